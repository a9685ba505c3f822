"""For the live page's browser tests: Debian's Chromium driven by Playwright, and a coding agent's loop
to send through the proxy in two wire formats.

Chromium is Debian's (`apt-get install chromium`, as `scripts/test.sh` does), started with the flags
this machine needs (no sandbox as root, no background networking: its closed network refuses those
connections); Playwright's own browsers are never downloaded.

`coding_loop(steps)` is one agent run as the client keeps it: a system prompt, the user's request,
then step after step of tool calls (read a file, grep, run the tests) and their results, of sizes
that vary as real ones do (a few big ones get capped), and a second user request half-way. Each
prefix that ends on a tool result is one request the agent sends. `as_chat` and `as_messages` write
it as Chat Completions and as Anthropic Messages (tool_use / tool_result blocks) bodies.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# The fake upstream that speaks each format (run as a script: a test's working directory is its own).
FORMATS_UPSTREAM = Path(__file__).parent / "upstreams" / "formats.py"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

Message = dict[str, Any]

SYSTEM = (
    "You are a coding agent working in the user's repository. Read files before editing them, keep "
    "changes small, and run the tests after each change. Answer with tool calls until the task is done."
)
TOOLS = [
    ("read_file", "Read a file of the repository.", {"path": {"type": "string"}}),
    ("grep", "Search the repository for a pattern.", {"pattern": {"type": "string"}}),
    ("run_tests", "Run the test suite, or one test file.", {"target": {"type": "string"}}),
]


def _source(name: str, lines: int) -> str:
    body = []
    for k in range(lines // 4):
        body += [
            f"def {name}_{k}(invoice):",
            f"    total = invoice.lines[{k}].amount",
            "    return round(total, 2)",
            "",
        ]
    return "\n".join(f"{n:5}\t{line}" for n, line in enumerate(body, 1))


def _grep(pattern: str, hits: int) -> str:
    return "\n".join(
        f"src/billing/mod_{k % 7}.py:{10 + 3 * k}:    {pattern}(invoice, {k})" for k in range(hits)
    )


def _tests(step: int) -> str:
    failed = max(0, 3 - step // 6)
    lines = [f"tests/test_billing_{k}.py::test_total_{k} PASSED" for k in range(40)]
    lines += [
        f"FAILED tests/test_totals.py::test_rounding_{k} - AssertionError: 129.0 != 128.99"
        for k in range(failed)
    ]
    return "\n".join([*lines, f"=== {failed} failed, {40 - failed} passed in 3.2s ==="])


def coding_loop(steps: int) -> list[Message]:
    """The whole run, in Chat Completions' neutral shape."""
    chat: list[Message] = [
        {"role": "system", "content": SYSTEM},
        {
            "role": "user",
            "content": "The billing totals are off by a cent since the merge. Find out why and fix it.",
        },
    ]
    for k in range(steps):
        if k == steps // 2:
            chat.append(
                {"role": "assistant", "content": "The rounding is fixed in totals.py; the tests pass."}
            )
            chat.append({"role": "user", "content": "Good. Now apply the same fix to the refunds module."})
        kind = k % 4
        if kind == 0:
            name, args, result = (
                "read_file",
                {"path": f"src/billing/mod_{k}.py"},
                _source(f"fn{k}", 90 + 40 * (k % 3)),
            )
        elif kind == 1:
            name, args, result = "grep", {"pattern": "round_total"}, _grep("round_total", 30 + 5 * k)
        elif kind == 2:
            name, args, result = "run_tests", {"target": "tests/"}, _tests(k)
        else:
            name, args, result = "read_file", {"path": f"src/billing/big_{k}.py"}, _source(f"big{k}", 520)
        call_id = f"call_{k}"
        call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
        chat.append({"role": "assistant", "content": None, "tool_calls": [call]})
        chat.append({"role": "tool", "tool_call_id": call_id, "content": result})
    return chat


def requests_of(chat: list[Message]) -> list[list[Message]]:
    """The prefixes the agent sends: each ends on a tool result."""
    return [chat[: k + 1] for k, m in enumerate(chat) if m["role"] == "tool"]


def as_chat(model: str, messages: list[Message]) -> dict[str, Any]:
    tools = [
        {
            "type": "function",
            "function": {
                "name": n,
                "description": d,
                "parameters": {"type": "object", "properties": p, "required": list(p)},
            },
        }
        for n, d, p in TOOLS
    ]
    return {"model": model, "messages": messages, "tools": tools, "max_tokens": 1024}


def as_messages(model: str, messages: list[Message]) -> dict[str, Any]:
    """The same request as Claude Code would send it to `/v1/messages`."""
    out: list[Message] = []
    for m in messages[1:]:
        if m["role"] == "user":
            out.append({"role": "user", "content": m["content"]})
        elif m["role"] == "tool":
            block = {"type": "tool_result", "tool_use_id": m["tool_call_id"], "content": m["content"]}
            if out and out[-1]["role"] == "user" and isinstance(out[-1]["content"], list):
                out[-1]["content"].append(block)
            else:
                out.append({"role": "user", "content": [block]})
        elif m.get("tool_calls"):
            uses = [
                {
                    "type": "tool_use",
                    "id": c["id"],
                    "name": c["function"]["name"],
                    "input": json.loads(c["function"]["arguments"]),
                }
                for c in m["tool_calls"]
            ]
            out.append({"role": "assistant", "content": uses})
        else:
            out.append({"role": "assistant", "content": [{"type": "text", "text": m["content"]}]})
    tools = [
        {
            "name": n,
            "description": d,
            "input_schema": {"type": "object", "properties": p, "required": list(p)},
        }
        for n, d, p in TOOLS
    ]
    system = [{"type": "text", "text": messages[0]["content"]}]
    return {"model": model, "system": system, "messages": out, "tools": tools, "max_tokens": 2048}


def next_event(lines: Iterator[str]) -> tuple[str, dict[str, Any]]:
    """The next server-sent event (comments skipped)."""
    kind, data = "message", ""
    for line in lines:
        if line.startswith("event:"):
            kind = line[6:].strip()
        elif line.startswith("data:"):
            data += line[5:].strip()
        elif not line and data:
            return kind, json.loads(data)
    raise AssertionError("the event stream ended")


@contextmanager
def live_page(base_url: str, wait_ms: int) -> Iterator[Any]:
    """Debian's Chromium showing the live page of the proxy at `base_url`, once its stream is live,
    marked so that a reload would show (`window.__notReloaded`)."""
    from playwright.sync_api import sync_playwright  # the browser tier's, imported by it alone

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 1440, "height": 900})
            page.goto(base_url + "/ui")
            page.wait_for_selector(".conn.live", timeout=wait_ms)
            page.evaluate("window.__notReloaded = true")
            yield page
        finally:
            browser.close()
