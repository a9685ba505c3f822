"""The real Gemini CLI in a long tool loop, straight at a Gemini API server that enforces its window
and through the real `compacting-proxy` process (issue 26).

Each run: Gemini CLI from tests/clis (npm, pinned), `STEPS` model steps of 1-3 of its own tool calls on
httpx's source tree, against tests/support/upstreams/gemini_model.py (cl100k_base window, the Gemini
API's overflow error, thought signatures on its calls). Printed per run: requests the server received,
how many were over its window, orphaned function responses, whether the task finished, the largest
request the server received (cl100k), and the run's time. The proxy finds the window itself (the
model's `inputTokenLimit`).

    python -m benchmarks.agents.bench_gemini_cli            # 32k and 128k, 100 steps, direct and proxied
    python -m benchmarks.agents.bench_gemini_cli --quick    # 32k proxied, 10 steps (about 20 s)
"""

from __future__ import annotations

import argparse
import sys
import time

from tests.support.gemini_cli import installed, run, version

HEADER = (
    "| client | window | route | requests | over the window | orphans | finished | largest received | time |\n"
    "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"
)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--steps", type=int, default=None)
    args = parser.parse_args()
    if not installed():
        sys.exit("Gemini CLI is not installed; run: npm install --prefix tests/clis")
    steps = args.steps or (10 if args.quick else 100)
    matrix = [(32_000, True)] if args.quick else [(w, p) for w in (32_000, 128_000) for p in (False, True)]
    print(f"Gemini CLI {version()}, {steps} steps a run; tokens by cl100k_base\n")
    print(HEADER, flush=True)
    for window, proxied in matrix:
        started = time.monotonic()
        r = run(window, proxied=proxied, steps=steps, timeout=900)
        largest = max((x["tokens"] for x in r.received), default=0)
        print(
            f"| gemini {version()} | {window // 1000}k | {'proxy' if proxied else 'direct'} | {len(r.received)} | "
            f"{r.over} | {r.orphans} | {'yes' if r.finished else 'no'} | {largest:,} | "
            f"{time.monotonic() - started:.0f} s |",
            flush=True,
        )


if __name__ == "__main__":
    main()
