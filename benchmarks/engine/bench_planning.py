"""What planning one request costs the event loop, against another checkout of the project:
``python -m benchmarks.engine.bench_planning --baseline /path/to/other/checkout [--quick]``.

For each body (the small and large chats of ``chat_bodies.py``, under the line and compacting, and a
2.7 MB agent loop that is planned in a worker thread), each checkout's ``Planner.plan`` is timed in
its own process, the checkouts taking turns for ``--rounds`` rounds; the median per call is kept and
given as a ratio to the baseline's of the same run. Without ``--baseline`` it times this checkout
only. Nothing listens or sends: the planner's upstream is never asked (fixed window, no exact count).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.throughput.chat_bodies import large_chat, small_chat

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

CASES = {
    # name: (body, window)
    "small chat, under the line": ("small", 1_000_000),
    "small chat, compacting": ("small", 400),
    "large chat (401 KB), compacting": ("large", 8192),
    "agent loop (2.7 MB), compacting": ("loop", 8192),
}


def loop_chat() -> dict[str, Any]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are an agent."},
        {"role": "user", "content": "Fix the bug."},
    ]
    for i in range(400):
        call = {"name": "read_file", "arguments": json.dumps({"path": f"src/mod{i}.py"})}
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": f"c{i}", "type": "function", "function": call}],
            }
        )
        text = "\n".join(f"def function_{i}_{k}(x):\n    return x + {k}  # line {k}" for k in range(120))
        messages.append({"role": "tool", "tool_call_id": f"c{i}", "content": text})
    return {"model": "m", "messages": messages}


# Run with the checkout as its cwd, so `python -c` imports that checkout's `proxy`; the bodies are this
# checkout's, the same for both, read from a JSON file.
WORKER = r"""
import asyncio, json, sys, time
from proxy.planning.planner import Planner
from proxy.settings import Settings

with open(sys.argv[1]) as f:
    texts = {kind: json.dumps(body) for kind, body in json.load(f).items()}
cases = json.loads(sys.argv[2])
calls = int(sys.argv[3])

async def main():
    out = {}
    for name, (kind, window) in cases.items():
        settings = Settings(_env_file=None, window=window, upstream_kind="openai", calibrate=False)
        planner = Planner(settings)
        body = json.loads(texts[kind])
        n = max(3, calls // 50) if kind == "loop" else calls
        await planner.plan(body)  # warm: counter memo, notes memo, as a chat's next turn finds them
        times = []
        for _ in range(n):
            started = time.perf_counter()
            await planner.plan(body)
            times.append(time.perf_counter() - started)
        times.sort()
        out[name] = times[len(times) // 2]
    print(json.dumps(out))

asyncio.run(main())
"""


def time_checkout(root: Path, bodies: Path, calls: int) -> dict[str, float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPACT_")}
    result = subprocess.run(
        [sys.executable, "-c", WORKER, str(bodies), json.dumps(CASES), str(calls)],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
        env=env,
        timeout=600,
    )
    timings: dict[str, float] = json.loads(result.stdout)
    return timings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, help="another checkout of the project to compare with")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--quick", action="store_true", help="2 rounds of 50 calls")
    args = parser.parse_args()
    rounds, calls = (2, 50) if args.quick else (args.rounds, args.calls)
    checkouts = {"this": ROOT} | ({"baseline": args.baseline.resolve()} if args.baseline else {})
    samples: dict[str, dict[str, list[float]]] = {c: {name: [] for name in CASES} for c in checkouts}
    scratch = tempfile.TemporaryDirectory()
    bodies = Path(scratch.name) / "bodies.json"
    bodies.write_text(json.dumps({"small": small_chat(), "large": large_chat(), "loop": loop_chat()}))
    for r in range(rounds):
        order = list(checkouts.items())
        if r % 2:
            order.reverse()
        for label, root in order:
            for name, seconds in time_checkout(root, bodies, calls).items():
                samples[label][name].append(seconds)
    print("| request | this checkout (median per plan) | baseline | this / baseline |")
    print("| --- | ---: | ---: | ---: |")
    for name in CASES:
        mine = statistics.median(samples["this"][name])
        if "baseline" in samples:
            base = statistics.median(samples["baseline"][name])
            print(f"| {name} | {mine * 1e3:.3f} ms | {base * 1e3:.3f} ms | {mine / base:.2f}x |")
        else:
            print(f"| {name} | {mine * 1e3:.3f} ms | - | - |")


if __name__ == "__main__":
    main()
