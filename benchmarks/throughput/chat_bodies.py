"""Deterministic request bodies for the benchmarks.

- ``small``: a short tool-using chat (about 1.5 KB): system, a first request, one tool call and its
  result, an answer, and two more user turns. With a tiny window, its old tool result is the one
  thing a compactor can truncate.
- ``large``: an agent loop of about 200 messages and about 400 KB, most of it in big tool results
  (file reads, search hits, logs), the shape that overflows a context window.
- ``small-stream``: ``small`` with ``"stream": true`` and ``stream_options.include_usage``.

Same bytes on every run (a seeded ``random.Random``), so runs compare. ``python
benchmarks/throughput/chat_bodies.py DIR`` writes ``DIR/<name>.json``.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path
from typing import Any

import orjson

SYSTEM = (
    "You are a careful coding agent working in a Python repository. Use the tools to read files, "
    "search the code and run commands. Keep answers short and cite file paths."
)
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": desc,
            "parameters": {"type": "object", "properties": {"arg": {"type": "string"}}, "required": ["arg"]},
        },
    }
    for name, desc in [
        ("read_file", "Read a file of the repository."),
        ("search_code", "Search the repository with a regular expression."),
        ("run_command", "Run a shell command and return its output."),
    ]
]
_WORDS = (
    "request",
    "response",
    "client",
    "server",
    "proxy",
    "header",
    "stream",
    "chunk",
    "token",
    "window",
    "budget",
    "message",
    "tool",
    "result",
    "context",
    "compact",
    "settings",
    "upstream",
    "timeout",
    "retry",
    "socket",
    "buffer",
    "parse",
    "encode",
    "decode",
    "json",
    "async",
    "await",
    "error",
    "status",
    "value",
    "index",
    "count",
    "limit",
    "offset",
    "cursor",
    "cache",
    "layer",
    "route",
    "handler",
    "model",
    "usage",
)


def _code_blob(rng: random.Random, size: int) -> str:
    lines: list[str] = []
    n = 0
    while n < size:
        kind = rng.random()
        if kind < 0.5:
            name = "_".join(rng.sample(_WORDS, 2))
            args = ", ".join(rng.sample(_WORDS, rng.randint(1, 3)))
            line = f"def {name}({args}) -> int:  # line {len(lines) + 1}"
        elif kind < 0.8:
            target, obj, attr = (rng.choice(_WORDS) for _ in range(3))
            line = f"    {target} = {obj}.{attr}({rng.randint(0, 9999)})"
        else:
            stamp = f"2025-01-{rng.randint(1, 28):02d}T12:{rng.randint(0, 59):02d}"
            line = f"{stamp} INFO {' '.join(rng.sample(_WORDS, 6))}"
        lines.append(line)
        n += len(line) + 1
    return "\n".join(lines)[:size]


def _tool_exchange(rng: random.Random, i: int, result_size: int) -> list[dict[str, Any]]:
    tool = rng.choice(["read_file", "search_code", "run_command"])
    call_id = f"call_{i:04d}"
    return [
        {
            "role": "user",
            "content": f"Step {i}: check how the {rng.choice(_WORDS)} {rng.choice(_WORDS)} is handled.",
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {
                        "name": tool,
                        "arguments": orjson.dumps({"arg": f"proxy/{rng.choice(_WORDS)}.py"}).decode(),
                    },
                }
            ],
        },
        {"role": "tool", "tool_call_id": call_id, "content": _code_blob(rng, result_size)},
        {
            "role": "assistant",
            "content": f"The {rng.choice(_WORDS)} is handled in step {i}; "
            + " ".join(rng.sample(_WORDS, 12)),
        },
    ]


def small_chat() -> dict[str, Any]:
    rng = random.Random(1)
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    messages += _tool_exchange(rng, 1, 600)
    messages += [
        {"role": "user", "content": "Good. Now what does the retry setting do?"},
        {"role": "assistant", "content": "It retries a failed connection once before giving up."},
        {"role": "user", "content": "Summarise that in one sentence."},
    ]
    return {"model": "fake-model", "messages": messages, "max_tokens": 256, "temperature": 0}


def large_chat(exchanges: int = 50, result_size: int = 7600) -> dict[str, Any]:
    rng = random.Random(2)
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    for i in range(1, exchanges + 1):
        messages += _tool_exchange(rng, i, result_size)
    messages.append({"role": "user", "content": "Now write the summary of everything you found."})
    return {"model": "fake-model", "messages": messages, "tools": TOOLS, "max_tokens": 256, "temperature": 0}


def bodies() -> dict[str, bytes]:
    stream = {**small_chat(), "stream": True, "stream_options": {"include_usage": True}}
    return {
        "small": orjson.dumps(small_chat()),
        "large": orjson.dumps(large_chat()),
        "small-stream": orjson.dumps(stream),
    }


def write_bodies(directory: Path) -> dict[str, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, body in bodies().items():
        path = directory / f"{name}.json"
        path.write_bytes(body)
        paths[name] = path
    return paths


if __name__ == "__main__":
    for name, path in write_bodies(Path(sys.argv[1] if len(sys.argv) > 1 else ".")).items():
        data = orjson.loads(path.read_bytes())
        print(f"{name}: {path.stat().st_size} bytes, {len(data['messages'])} messages -> {path}")
