"""Simulated coding-agent loops for `bench_loops.py`: seeded, tool-heavy, facts planted.

A loop is what a coding agent's client keeps and sends: a long system prompt and tool schemas, then
one user request (or a few) each followed by tens to hundreds of model calls. Each call answers with
1-4 parallel tool calls: file reads (2-30 KB of Python source numbered like `cat -n`), greps, test
runs (pytest output with tracebacks and a summary line), shell commands (git, ls, pip, make, with
their exit status) and edits (the new text in the call's arguments). A request ends with the
assistant's answer in words. The client calls the model after each user request and after each
round of tool results: `Loop.requests` holds the length of the history at each of those calls.

Facts are planted in tool results, one to three a result, of five kinds: `path` (a file only that
result names), `function` (a name only that file defines), `error` (an exception line, the text
after pytest's `E`), `id` (a failing test id, a commit hash, a ticket key) and `number` (a
constant's value, a size, a duration). Each planted text occurs once in the whole loop (the values
come from namespaces the filler never uses), so "is it still in the request" measures whether a
compactor kept it. Deterministic: one seeded `random.Random`.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from typing import Any

Message = dict[str, Any]

FACT_KINDS = ("path", "function", "error", "id", "number")

SYSTEM = "\n".join(
    [
        "You are a coding agent working in the user's repository through tools. You read files before",
        "editing them, run the tests after each change, and never invent file names, function names or",
        "test results: look them up. Prefer small, reviewable edits. When a command fails, read its output",
        "and fix the cause rather than retrying blindly. Keep the user informed with short summaries of",
        "what you found and what you changed; finish with what is left to do.",
        "",
        "Conventions: Python 3.11, type hints everywhere, pytest for tests, ruff for lint. Tests live",
        "under tests/, sources under src/. Do not touch generated files under build/ or vendored code",
        "under third_party/. Never commit secrets. Ask before deleting files.",
    ]
    * 3
)

TOOL_SCHEMAS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": list(properties)[:1]},
        },
    }
    for name, description, properties in [
        (
            "read_file",
            "Read a file, numbered like cat -n. Use offset and limit for big files.",
            {"path": {"type": "string"}, "offset": {"type": "integer"}, "limit": {"type": "integer"}},
        ),
        (
            "grep",
            "Search the repository with ripgrep; prints path:line:text for each match.",
            {"pattern": {"type": "string"}, "path": {"type": "string"}},
        ),
        ("run_tests", "Run pytest with the given arguments.", {"args": {"type": "string"}}),
        ("bash", "Run a shell command; prints its output and exit status.", {"command": {"type": "string"}}),
        (
            "edit_file",
            "Replace old_text with new_text in a file.",
            {"path": {"type": "string"}, "old_text": {"type": "string"}, "new_text": {"type": "string"}},
        ),
    ]
]

PACKAGES = ("billing", "auth", "scheduler", "storage", "api", "reports", "sync", "cache", "ingest", "notify")
NOUNS = (
    "invoice", "ledger", "account", "session", "token", "job", "queue", "bucket", "record", "report",
    "batch", "payload", "cursor", "window", "policy", "rule", "event", "handler", "client", "buffer",
)  # fmt: skip
VERBS = (
    "load", "parse", "build", "render", "merge", "flush", "fetch", "store", "resolve", "validate",
    "schedule", "retry", "compute", "normalize", "encode", "decode", "sync", "prune", "emit", "check",
)  # fmt: skip
# Planted names and paths use these words only (never the filler's), so each occurs once.
RARE = (
    "zephyr", "quokka", "marlin", "basalt", "juniper", "tundra", "osprey", "cobalt", "fennel", "lagoon",
    "mistral", "nimbus", "saffron", "talon", "umber", "vortex", "wren", "yarrow", "zinnia", "garnet",
)  # fmt: skip
EXCEPTIONS = ("KeyError", "ValueError", "TypeError", "AttributeError", "AssertionError", "RuntimeError")


@dataclass(frozen=True, slots=True)
class Fact:
    kind: str
    text: str
    message: int  # the tool result that holds it


@dataclass(slots=True)
class Loop:
    name: str
    messages: list[Message] = field(default_factory=list)
    requests: list[int] = field(default_factory=list)
    facts: list[Fact] = field(default_factory=list)
    user_requests: int = 0

    def history(self, k: int) -> list[Message]:
        return self.messages[: self.requests[k]]


class _Writer:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.serial = 0
        self.loop = Loop("")

    def unique(self) -> int:
        self.serial += 1
        return self.serial

    def rare_name(self) -> str:
        return f"{self.rng.choice(VERBS)}_{self.rng.choice(RARE)}_{self.unique()}"

    def plant(self, kind: str, text: str) -> str:
        self.loop.facts.append(Fact(kind, text, len(self.loop.messages)))
        return text

    # Tool results ---------------------------------------------------------------------------

    def source_file(self, path: str) -> str:
        rng = self.rng
        size = int(2000 * 15 ** rng.random())  # 2-30 KB, log-uniform
        lines = [f'"""{rng.choice(VERBS).title()} the {rng.choice(NOUNS)}s of {path}."""', ""]
        lines += [f"import {m}" for m in rng.sample(["os", "re", "json", "time", "logging", "typing"], 3)]
        lines += ["", f"{rng.choice(NOUNS).upper()}_LIMIT = {rng.randint(2, 99)}", ""]
        planted_at = rng.randint(1, 6)
        definitions = written = counted = 0
        while True:
            written += sum(len(line) + 8 for line in lines[counted:])
            counted = len(lines)
            if written >= size:
                break
            definitions += 1
            if definitions == planted_at:
                name = self.plant("function", self.rare_name())
            else:
                name = f"{rng.choice(VERBS)}_{rng.choice(NOUNS)}"
            if definitions == planted_at + 2:
                value = self.plant("number", str(rng.randint(100_000, 999_999)))
                lines += [f"{rng.choice(NOUNS).upper()}_BUDGET_MS = {value}", ""]
            if rng.random() < 0.25:
                lines.append(f"class {rng.choice(NOUNS).title()}{rng.choice(NOUNS).title()}:")
                indent = "    "
            else:
                indent = ""
            args = ", ".join(rng.sample(NOUNS, rng.randint(1, 3)))
            lines.append(f"{indent}def {name}({'self, ' if indent else ''}{args}):")
            lines.append(f'{indent}    """{rng.choice(VERBS).title()} {rng.choice(NOUNS)} for {args}."""')
            for _ in range(rng.randint(3, 12)):
                a, b = rng.choice(NOUNS), rng.choice(NOUNS)
                lines.append(
                    rng.choice(
                        [
                            f"{indent}    {a} = {rng.choice(VERBS)}_{b}({a}, limit={rng.randint(1, 64)})",
                            f"{indent}    if not {a}:",
                            f"{indent}        raise ValueError(f'no {a} for {{{b}!r}}')",
                            f"{indent}    for {a} in {b}s:",
                            f"{indent}        log.debug('{rng.choice(VERBS)} %s', {a})",
                            f"{indent}    {a}.{rng.choice(VERBS)}({b}, strict={rng.choice(['True', 'False'])})",
                        ]
                    )
                )
            lines += [f"{indent}    return {rng.choice(NOUNS)}", ""]
        start = 1 if rng.random() < 0.7 else rng.randint(50, 400)
        return "\n".join(f"{start + i:6}\t{line}" for i, line in enumerate(lines))

    def grep_output(self) -> str:
        rng = self.rng
        path = self.plant("path", f"src/{rng.choice(PACKAGES)}/{rng.choice(RARE)}_{self.unique()}.py")
        word = f"{rng.choice(VERBS)}_{rng.choice(NOUNS)}"
        out = []
        for _ in range(rng.randint(8, 80)):
            where = path if rng.random() < 0.1 else f"src/{rng.choice(PACKAGES)}/{rng.choice(NOUNS)}.py"
            out.append(f"{where}:{rng.randint(1, 900)}:    {rng.choice(NOUNS)} = {word}({rng.choice(NOUNS)})")
        if path not in "".join(out):
            out.insert(rng.randrange(len(out)), f"{path}:{rng.randint(1, 900)}:def {word}(payload):")
        return "\n".join(out)

    def pytest_output(self) -> str:
        rng = self.rng
        passed, failed = rng.randint(40, 400), rng.randint(1, 3)
        out = [
            "============================= test session starts ==============================",
            "platform linux -- Python 3.11.9, pytest-8.3.4, pluggy-1.5.0",
            f"collected {passed + failed} items",
            "",
        ]
        for _ in range(rng.randint(3, 30)):
            dots = "".join(rng.choice("....................F.s") for _ in range(rng.randint(20, 60)))
            out.append(f"tests/test_{rng.choice(NOUNS)}.py {dots} [{rng.randint(1, 99):3}%]")
        summary = []
        for k in range(failed):
            test = f"tests/test_{rng.choice(NOUNS)}.py::test_{rng.choice(VERBS)}_{rng.choice(RARE)}_{self.unique()}"
            if k == 0:
                self.plant("id", test)
            exception = rng.choice(EXCEPTIONS)
            detail = f"'{rng.choice(NOUNS)}_{self.unique()}{rng.randint(1000, 9999)}'"
            error = (
                f"{exception}: {detail}"
                if exception != "AssertionError"
                else f"{exception}: assert {detail} == {rng.randint(1, 9)}"
            )
            if k == 0:
                self.plant("error", error)
            out += [
                "",
                f"_______________________ {test.split('::')[1]} _______________________",
                "",
            ]
            for _ in range(rng.randint(1, 4)):
                out += [
                    f"    def {rng.choice(VERBS)}_{rng.choice(NOUNS)}({rng.choice(NOUNS)}):",
                    f"        {rng.choice(NOUNS)} = {rng.choice(VERBS)}({rng.choice(NOUNS)})",
                    f">       return {rng.choice(NOUNS)}[{rng.choice(NOUNS)}]",
                    "",
                    f"src/{rng.choice(PACKAGES)}/{rng.choice(NOUNS)}.py:{rng.randint(10, 900)}: ",
                    "_ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _",
                ]
            out += [f"E       {error}", "", f"{test.split('::')[0]}:{rng.randint(10, 300)}: {exception}"]
            summary.append(f"FAILED {test} - {error[:60]}")
        seconds = self.plant("number", f"{rng.randint(10, 99)}.{rng.randint(10, 99)}s")
        out += ["=========================== short test summary info ============================", *summary]
        out.append(f"================== {failed} failed, {passed} passed in {seconds} ==================")
        return "\n".join(out)

    def shell_output(self, command: str) -> str:
        rng = self.rng
        if command.startswith("git log"):
            head = self.plant("id", f"{rng.getrandbits(28):07x}")
            lines = [f"{head} {rng.choice(VERBS).title()} {rng.choice(NOUNS)} handling"]
            lines += [
                f"{rng.getrandbits(24):06x}0 {rng.choice(VERBS).title()} {rng.choice(NOUNS)}"
                for _ in range(rng.randint(10, 40))
            ]
            return "\n".join(lines) + "\n[exit status 0]"
        if command.startswith("ls"):
            size = self.plant("number", str(rng.randint(1_000_000, 9_999_999)))
            lines = [f"total {rng.randint(100, 900)}"]
            for k in range(rng.randint(10, 60)):
                bytes_ = size if k == 3 else str(rng.randint(100, 99_999))
                lines.append(
                    f"-rw-r--r-- 1 dev dev {bytes_:>8} Nov 30 12:{k % 60:02} {rng.choice(NOUNS)}_{k}.py"
                )
            return "\n".join(lines) + "\n[exit status 0]"
        # A build that fails: a long log, an error line near the end, a non-zero status.
        lines = []
        for _ in range(rng.randint(30, 200)):
            lines.append(
                f"[{rng.randint(1, 99):3}%] Building {rng.choice(['C', 'CXX'])} object "
                f"build/{rng.choice(PACKAGES)}/{rng.choice(NOUNS)}.o"
            )
        error = self.plant(
            "error",
            f"RuntimeError: linker failed for {rng.choice(RARE)}_{self.unique()}.so (code {rng.randint(2, 127)})",
        )
        lines.insert(len(lines) - rng.randint(1, 5), error)
        return (
            "\n".join(lines) + f"\nmake: *** [Makefile:{rng.randint(10, 90)}: all] Error 2\n[exit status 2]"
        )

    # Messages --------------------------------------------------------------------------------

    def tool_step(self, step: int) -> int:
        """One model call answered with 1-4 parallel tool calls and their results; how many calls."""
        rng, loop = self.rng, self.loop
        calls = []
        results = []
        for k in range(rng.choice((1, 1, 1, 2, 2, 3, 4))):
            kind = rng.choices(["read", "grep", "tests", "shell", "edit"], weights=[40, 20, 15, 15, 10])[0]
            call_id = f"call_{step}_{k}_{self.unique()}"
            if kind == "read":
                path = f"src/{rng.choice(PACKAGES)}/{rng.choice(RARE)}_{self.unique()}.py"
                name, arguments = "read_file", {"path": path}
            elif kind == "grep":
                name, arguments = (
                    "grep",
                    {"pattern": f"{rng.choice(VERBS)}_{rng.choice(NOUNS)}", "path": "src"},
                )
            elif kind == "tests":
                name, arguments = "run_tests", {"args": f"-x tests/test_{rng.choice(NOUNS)}.py"}
            elif kind == "shell":
                command = rng.choice(["git log --oneline -n 40", "ls -la src/", "make -j4"])
                name, arguments = "bash", {"command": command}
            else:
                new_text = "\n".join(
                    f"    {rng.choice(NOUNS)} = {rng.choice(VERBS)}_{rng.choice(NOUNS)}()"
                    for _ in range(rng.randint(3, 40))
                )
                path = f"src/{rng.choice(PACKAGES)}/{rng.choice(NOUNS)}.py"
                name, arguments = "edit_file", {"path": path, "old_text": "    pass", "new_text": new_text}
            calls.append(
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(arguments)},
                }
            )
            results.append((call_id, kind, arguments))
        thought = rng.choice(
            [None, None, "Let me look at that.", "Checking the tests next.", "Reading the module."]
        )
        loop.messages.append({"role": "assistant", "content": thought, "tool_calls": calls})
        for call_id, kind, arguments in results:
            if kind == "read":
                content = self.source_file(arguments["path"])
            elif kind == "grep":
                content = self.grep_output()
            elif kind == "tests":
                content = self.pytest_output()
            elif kind == "shell":
                content = self.shell_output(arguments["command"])
            else:
                content = (
                    f"Edited {arguments['path']}: {arguments['new_text'].count(chr(10)) + 1} lines replaced."
                )
            loop.messages.append({"role": "tool", "tool_call_id": call_id, "content": content})
        loop.requests.append(len(loop.messages))
        return len(calls)

    def request(self, calls: int, number: int) -> None:
        rng, loop = self.rng, self.loop
        package = rng.choice(PACKAGES)
        ask = (
            f"Request {number}: the {package} tests fail since the last merge. Find out why, fix it, "
            f"and make sure `pytest tests/test_{package}.py` passes. Keep the public API of "
            f"src/{package}/ unchanged."
        )
        if rng.random() < 0.3:
            ask += "\nHere is what I see:\n" + "\n".join(
                f'  File "src/{package}/{rng.choice(NOUNS)}.py", line {rng.randint(1, 900)}, in {rng.choice(VERBS)}'
                for _ in range(rng.randint(3, 12))
            )
        loop.messages.append({"role": "user", "content": ask})
        loop.requests.append(len(loop.messages))
        done = step = 0
        while done < calls:
            done += self.tool_step(step)
            step += 1
        answer = (
            f"Done with request {number}: the failures in {package} came from a changed signature; "
            "I updated the callers and the tests now pass. Left to do: the deprecation warnings."
        )
        loop.messages.append({"role": "assistant", "content": answer})


def agent_loop(name: str, seed: int, calls_per_request: list[int]) -> Loop:
    """One loop: a system prompt, then one user request per entry, each followed by about that many
    tool calls (in steps of 1-4 parallel calls) and an answer."""
    writer = _Writer(seed)
    writer.loop = Loop(name)
    writer.loop.messages.append({"role": "system", "content": SYSTEM})
    for number, calls in enumerate(calls_per_request, 1):
        writer.request(calls, number)
    # The last request's answer is not sent: the loop ends at its last model call.
    writer.loop.messages.pop()
    writer.loop.user_requests = len(calls_per_request)
    return writer.loop


def loops(quick: bool = False, seed: int = 0) -> list[Loop]:
    """The loops the benchmark replays: single-request loops of 60-300 calls and 3-5-request loops of
    30-100 calls a request (fewer and shorter with `quick`)."""
    rng = random.Random(seed)
    if quick:
        return [
            agent_loop("1 request, 60 calls", seed * 100 + 1, [60]),
            agent_loop("3 requests, 30-40 calls", seed * 100 + 2, [30, 35, 40]),
        ]
    out = []
    for k, calls in enumerate((60, 150, 300)):
        out.append(agent_loop(f"1 request, {calls} calls", seed * 100 + 10 + k, [calls]))
    for k, requests in enumerate((3, 4, 5)):
        plan = [rng.randint(30, 100) for _ in range(requests)]
        out.append(
            agent_loop(f"{requests} requests, {'/'.join(map(str, plan))} calls", seed * 100 + 20 + k, plan)
        )
    return out


if __name__ == "__main__":
    for loop in loops():
        chars = sum(len(json.dumps(m)) for m in loop.messages)
        print(
            f"{loop.name}: {len(loop.messages)} messages, {len(loop.requests)} model calls, {chars:,} chars, {len(loop.facts)} facts"
        )
