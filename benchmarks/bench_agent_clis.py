"""The real agent CLIs in a long tool loop, straight at a model server that enforces its window and
through the real `compacting-proxy` process (issue 16).

Each run: one CLI from tests/clis (npm, pinned), `STEPS` model steps of 1-3 real tool calls on httpx's
source tree, against tests/support/upstreams/agent_model.py (cl100k_base window, each format's own overflow
error). Printed per run: requests the server received, how many were over its window, whether the
task finished, the largest request the client sent and the largest the server received (cl100k), and
the proxy's time from receiving a request to forwarding it (total over the run, and the largest).

    python -m benchmarks.bench_agent_clis            # 3 CLIs (+ Claude Code with thinking) x 16k/32k/128k, direct and proxied
    python -m benchmarks.bench_agent_clis --quick    # Codex and opencode at 32k, 30 steps (about a minute)
"""

from __future__ import annotations

import argparse
import sys
import time

from tests.support.agent_clis import installed, run

HEADER = (
    "| client | version | window | route | requests | over the window | finished | largest sent | "
    "largest received | proxy time |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--steps", type=int, default=None)
    args = parser.parse_args()
    steps = args.steps or (30 if args.quick else 100)
    if args.quick:
        matrix = [(c, False, 32_000) for c in ("codex", "opencode")]
    else:
        clients = [("claude", False), ("claude", True), ("codex", False), ("opencode", False)]
        matrix = [(c, t, w) for c, t in clients for w in (16_000, 32_000, 128_000)]
    missing = sorted({c for c, _, _ in matrix if not installed(c)})
    if missing:
        sys.exit(f"not installed: {missing}; run: npm install --prefix tests/clis")
    print(f"{steps} steps a run; tokens by cl100k_base\n")
    print(HEADER, flush=True)
    started = time.monotonic()
    for client, thinking, window in matrix:
        for proxied in (False, True):
            r = run(client, window, proxied=proxied, steps=steps, thinking=thinking, timeout=900)
            print(r.row(), flush=True)
            if proxied and not (r.orphans == 0 and r.system_intact and r.task_intact):
                print(f"  orphans {r.orphans}, system intact {r.system_intact}, task intact {r.task_intact}")
    print(f"\n{time.monotonic() - started:.0f} s in all")


if __name__ == "__main__":
    main()
