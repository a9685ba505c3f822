"""What notes keep of what an agent uses, on real trajectories replayed through the engine, against
other checkouts in the same run.

``python -m benchmarks.notes.bench_notes [--quick] [--baseline DIR ...] [--split held-out|tune] [--windows 8192,16384,32768]``

The trajectories are real runs of three agents this project did not generate (`real_trajectories.py`
says where each was found: `gruckion/mini-swe-agent` `swebench_results/20251118_gemini-3-pro-74pct/trajs/`,
`SWE-agent/SWE-agent` `trajectories/` and `tests/test_data/trajectories/`, `All-Hands-AI/OpenHands`
`evaluation/benchmarks/multi_swe_bench/examples/output.jsonl` and `tests/runtime/trajs/`,
`nunu0404/Python_OpenHands` `output.jsonl`), under `--real DIR`, sent as a tool-calling agent sends
them. The notes were tuned on a quarter of the mini-swe-agent runs (`--split tune`); the figures are
of the others (`held-out`, the default). Each checkout (this one, and each `--baseline`, e.g. `git
archive e02f76e | tar -x -C /tmp/basee02f76e`) replays every run request by request at each window
(`notes_replay.py`), and every tool result it notes is judged once per window, the first time:

- *next step*: the facts of the result that the next assistant message (its words outside code
  blocks, and its tool call) uses, and that the result's own call did not already name: paths,
  ids (tokens of letters and digits), names (`snake_case`, `CamelCase`, dotted), numbers of 2+
  digits; kept when the note holds them. *exit status* and *outcome*: the result's exit status and
  its outcome line (an exception line, pytest's counts, `FAILED x::t`, `error:`, `Successfully
  installed`), counted for every result that has one.
- *read back*: the facts of the result that an assistant message after the note was written uses
  first, with no newer tool result holding them in between: what the agent reads back from the note.
- *note*: mean characters; *versions*: bare version numbers the notes keep (`3.13.0`), noise;
  *pytest E / first*: of pytest outputs, the share of their exception lines kept (`E` lines that
  state the error: `E   KeyError: 'x'`, `E   assert 1 == 2`), and the share whose first failing
  location (`path.py:12: AssertionError`) the note names with its line.
- *last 3 touched*: requests in which one of the last three tool results (inside the protected part)
  went out noted or dropped without the report saying so; *said*: the report said so.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks.agents.real_trajectories import AGENTS, DEFAULT_REAL, Message, load_real, split, trajectories
from benchmarks.notes import notes_replay

__all__ = ["DEFAULT_REAL", "load_real"]  # bench_server_cache reads the same runs

HERE = Path(__file__).resolve().parent
KINDS = ("exit status", "outcome", "path", "id", "name", "number")
TOKEN = re.compile(r"[\w#$][\w.\-/:#$]*\w|\d")
EXTENSION = re.compile(
    r"\.(?:py|pyi|js|ts|tsx|rs|go|java|c|h|cc|cpp|rb|php|md|rst|txt|toml|yaml|yml|json|cfg|ini|sh|html|css|sql|xml|pony|kt)$"
)
FENCED = re.compile(r"```.*?```", re.S)
EXIT = re.compile(r"<returncode>(-?\d+)</returncode>|exit code (-?\d+)|exit status (-?\d+)")
OUTCOMES = (
    re.compile(r"^\s*((?:[\w.]+\.)?[A-Z]\w*(?:Error|Exception)\b(?::[^\n]{0,60})?)\s*$", re.M),
    re.compile(r"^[=\s]*(\d+ (?:passed|failed|errors?)[^\n=]{0,60}?)[=\s]*$", re.M),
    re.compile(r"^((?:FAILED|ERROR) \S+)", re.M),
    re.compile(r"^\s*((?:\S+: )?(?:error|Error|fatal): [^\n]{1,60})", re.M),
    re.compile(r"^(Successfully installed [^\n]{1,60})", re.M),
)
# A bare version (`3.13.0`, `pluggy-0.13.1`, `5.4.1.dev593+ge6e300e`) or a bare decimal (`3.8`), as a kept fact.
VERSION = re.compile(r"(?:[A-Za-z][\w.]*-)?v?\d+(?:\.\d+){1,3}(?:\.?(?:dev|rc|post|a|b)\d*)?(?:\+\w+)?")
# pytest's exception lines: an `E` line that states the error (an exception and its message, an assert).
PYTEST_E = re.compile(
    r"^E\s+((?:[\w.]+\.)?[A-Z]\w*(?:Error|Exception|Failed|Exit|Warning)\b[^\n]*|assert [^\n]*|Failed: [^\n]*)",
    re.M,
)
PYTEST_AT = re.compile(r"^([\w./-]+\.py):(\d+): ([A-Z]\w*)$", re.M)  # a failure's location line


def kind_of(token: str) -> str | None:
    """What a token of an agent's message is as a fact (None: a plain word or too short)."""
    if len(token) < 2:
        return None
    if "/" in token or "::" in token or EXTENSION.search(token):
        return "path"
    if re.fullmatch(r"#?\d+(?:[.,]\d+)*", token):
        return "number" if len(token.lstrip("#")) >= 2 else None
    if re.search(r"\d", token) and re.search(r"[A-Za-z]", token):
        return "id"
    if "_" in token.strip("_") or re.search(r"[a-z][A-Z]", token) or re.fullmatch(r"\w+(?:\.\w+)+", token):
        return "name"
    return None


def tokens(text: str) -> set[str]:
    return {t.strip(".:,-") for t in TOKEN.findall(text)}


def said_by(message: Message) -> str:
    """An assistant message's words outside code blocks (quotes of outputs), and its calls."""
    calls = [str(c.get("function", {}).get("arguments", "")) for c in message.get("tool_calls") or []]
    return "\n".join([FENCED.sub(" ", str(message.get("content") or "")), *calls])


class Run:
    """One trajectory, read once: each message's fact tokens and each result's call."""

    def __init__(self, messages: list[Message]) -> None:
        self.messages = messages
        self.said = [tokens(said_by(m)) if m["role"] == "assistant" else set() for m in messages]
        self.held = [tokens(str(m.get("content"))) if m["role"] == "tool" else set() for m in messages]
        calls = {
            c.get("id"): str(c.get("function", {}).get("arguments", ""))
            for m in messages
            for c in m.get("tool_calls") or []
        }
        self.call = [calls.get(m.get("tool_call_id"), "") if m["role"] == "tool" else "" for m in messages]

    def facts(self, i: int) -> dict[str, str]:
        """Result `i`'s fact tokens that its own call did not name, by kind."""
        named = tokens(self.call[i])
        return {t: k for t in self.held[i] - named if (k := kind_of(t))}

    def next_step(self, i: int) -> set[str]:
        return next(
            (
                self.said[k]
                for k in range(i + 1, len(self.messages))
                if self.messages[k]["role"] == "assistant"
            ),
            set(),
        )

    def read_back(self, i: int, end: int, facts: set[str]) -> set[str]:
        used: set[str] = set()
        blocked: set[str] = set()
        for k in range(i + 1, len(self.messages)):
            if self.messages[k]["role"] == "tool":
                blocked |= facts & self.held[k]
            elif k >= end:
                used |= (facts & self.said[k]) - blocked
        return used


def judge(runs: dict[str, Run], replayed: dict[str, Any]) -> dict[str, Any]:
    """The figures of one checkout's replay."""
    used: Counter[str] = Counter()
    kept: Counter[str] = Counter()
    back = [0, 0]
    chars: dict[tuple[str, int, int], int] = {}
    versions = 0
    pytest = [0, 0, 0, 0]  # E lines kept, E lines, first locations named, pytest outputs
    for name, window, i, end, note in replayed["notes"]:
        run = runs[name]
        text = str(run.messages[i].get("content"))
        chars[name, window, i] = len(note)
        flat = " ".join(note.split())
        facts = run.facts(i)
        for fact in facts.keys() & run.next_step(i):
            used[facts[fact]] += 1
            kept[facts[fact]] += fact in note
        for fact in run.read_back(i, end, set(facts)):
            back[0] += fact in note
            back[1] += 1
        if m := EXIT.search(text[:300]) or EXIT.search(text[-300:]):
            status = next(g for g in m.groups() if g is not None)
            used["exit status"] += 1
            kept["exit status"] += any(
                s in note for s in (f"exit status {status}", f"exit code {status}", f">{status}<")
            )
        for pattern in OUTCOMES:
            if lines := pattern.findall(text):
                used["outcome"] += 1
                kept["outcome"] += " ".join(lines[-1].split()) in flat
        kept_part = note.rpartition(" Kept: ")[2] if " Kept: " in note else ""
        versions += sum(1 for fact in kept_part.split("; ") if VERSION.fullmatch(fact.rstrip(".]")))
        if "test session starts" in text or (PYTEST_E.search(text) and PYTEST_AT.search(text)):
            e_lines = {" ".join(e.split())[:60] for e in PYTEST_E.findall(text)}
            pytest[0] += sum(line in flat for line in e_lines)
            pytest[1] += len(e_lines)
            if at := PYTEST_AT.search(text):
                pytest[2] += f"{at.group(1)}:{at.group(2)}" in note
                pytest[3] += 1
    return {
        "used": used,
        "kept": kept,
        "back": back,
        "chars": chars,
        "versions": versions,
        "pytest": pytest,
        "recent": replayed["recent"],
    }


def share(got: int, total: int) -> str:
    return f"{got / total:.0%} ({total})" if total else "- (0)"


def rows(name: str, label: str, f: dict[str, Any], common: set[tuple[str, int, int]]) -> str:
    used, kept = f["used"], f["kept"]
    cells = [share(kept[k], used[k]) for k in KINDS]
    total = sum(used.values())
    recent = f["recent"]
    touched = sum(r["touched"] for r in recent.values())
    said = sum(r["said"] for r in recent.values())
    requests = sum(r["requests"] for r in recent.values())
    chars = f["chars"]
    mean = sum(chars.values()) / len(chars) if chars else 0
    same = sum(chars[k] for k in common) / len(common) if common else 0
    pytest = f["pytest"]
    return (
        f"| {name} | {label} | " + " | ".join(cells) + f" | **{share(sum(kept.values()), total)}** | "
        f"{share(*f['back'])} | {mean:,.0f} ({len(chars)}) / {same:,.0f} ({len(common)}) | {f['versions']} | "
        f"{share(pytest[0], pytest[1])} / {share(pytest[2], pytest[3])} | {touched} / {said} of {requests:,} |"
    )


def run_checkout(
    folder: Path | None, runs: list[tuple[str, list[Message]]], windows: list[int]
) -> dict[str, Any]:
    """This checkout's replay in this process, another's in a process with its `proxy` first."""
    if folder is None:
        return notes_replay.replay(runs, windows)
    with tempfile.TemporaryDirectory() as tmp:
        job, out = Path(tmp) / "job.json", Path(tmp) / "out.json"
        job.write_text(json.dumps({"runs": runs, "windows": windows}))
        env = {**os.environ, "PYTHONPATH": str(folder)}
        subprocess.run(
            [sys.executable, str(HERE / "notes_replay.py"), str(job), str(out)], env=env, check=True
        )
        replayed: dict[str, Any] = json.loads(out.read_text())
        return replayed


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="12 runs of each agent, 8k only")
    parser.add_argument("--real", type=Path, default=DEFAULT_REAL)
    parser.add_argument(
        "--baseline", type=Path, action="append", default=[], help="another checkout's folder"
    )
    parser.add_argument("--split", choices=("held-out", "tune"), default="held-out")
    parser.add_argument("--windows", default="8192,16384,32768")
    parser.add_argument("--limit", type=int, default=0, help="runs per agent (0: all)")
    args = parser.parse_args()
    windows = [8192] if args.quick else [int(w) for w in args.windows.split(",")]
    limit = 12 if args.quick else args.limit
    header = (
        "| set | checkout | " + " | ".join(KINDS) + " | **next step, all** | read back | "
        "note chars: all (notes) / of the results every checkout noted | versions | pytest E / first | "
        "last 3 touched / said |"
    )
    print(
        f"windows {', '.join(map(str, windows))}; split {args.split}\n\n{header}\n"
        + "|---" * (len(KINDS) + 8)
        + "|"
    )
    for agent in AGENTS:
        directory = args.real / agent
        if not directory.is_dir():
            print(f"no {agent} trajectories under {directory}: skipped", file=sys.stderr)
            continue
        chosen = [(n, m) for n, m in trajectories(directory, agent) if split(agent, n) == args.split]
        chosen = chosen[:limit] if limit else chosen
        if not chosen:
            continue
        runs = {name: Run(messages) for name, messages in chosen}
        results: dict[str, dict[str, Any]] = {}
        for folder in [*args.baseline, None]:
            started = time.perf_counter()
            label = folder.name if folder else "this"
            results[label] = judge(runs, run_checkout(folder, chosen, windows))
            print(f"{agent} {label}: {time.perf_counter() - started:.0f} s", file=sys.stderr)
        common = set.intersection(*(set(f["chars"]) for f in results.values()))
        for label, figures in results.items():
            print(rows(f"{agent} ({len(chosen)} runs)", label, figures, common), flush=True)


if __name__ == "__main__":
    main()
