"""Agent loops for the engine's tests: one request answered by step after step of tool calls and
their results (file reads of a given size, a failing test run)."""

from __future__ import annotations

import json
from typing import Any

SYSTEM = "You are a coding agent. Read files before editing them; run the tests after each change."
# The one tool the loops call, as a Chat Completions tool schema.
READ_FILE_TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file, numbered like cat -n.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    }
]


def source(name: str, lines: int) -> str:
    body = []
    for k in range(lines // 4):
        body += [f"def {name}_{k}(payload):", f"    value = payload[{k}]", "    return value * 2", ""]
    return "\n".join(f"{n:6}\t{line}" for n, line in enumerate(body, 1))


def call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def step(
    messages: list[dict[str, Any]], k: int, results: list[tuple[str, str]], text: str | None = None
) -> None:
    """One model call answered with parallel tool calls, and their results."""
    calls = [call(f"c{k}_{j}", name, path=f"src/mod_{k}_{j}.py") for j, (name, _) in enumerate(results)]
    messages.append({"role": "assistant", "content": text, "tool_calls": calls})
    messages += [
        {"role": "tool", "tool_call_id": c["id"], "content": content}
        for c, (_, content) in zip(calls, results, strict=True)
    ]


def one_request_loop(steps: int, parallel: int = 1, lines: int = 240) -> list[dict[str, Any]]:
    loop = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "The billing tests fail since the merge. Find out why and fix it."},
    ]
    for k in range(steps):
        step(loop, k, [("read_file", source(f"fn{k}x{j}", lines)) for j in range(parallel)])
    return loop


PYTEST = """============================= test session starts ==============================
collected 212 items

tests/test_billing.py ....F.....
________________________________ test_totals ________________________________
>       assert total(invoice) == 129
E       KeyError: 'invoice_88213'

src/billing/totals.py:41: KeyError
=========================== short test summary info ============================
FAILED tests/test_billing.py::test_totals - KeyError: 'invoice_88213'
========================= 1 failed, 211 passed in 3.21s =========================
[exit status 1]
"""
