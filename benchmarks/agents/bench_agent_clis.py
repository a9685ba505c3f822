"""The real agent CLIs in a long tool loop, straight at a model server that enforces its window and
through the real `compacting-proxy` process (issue 16).

Each run: one CLI from tests/clis (npm, pinned), `STEPS` model steps of 1-3 real tool calls on httpx's
source tree, against tests/support/upstreams/agent_model.py (cl100k_base window, each format's own overflow
error). Printed per run: requests the server received, how many were over its window, whether the
task finished, the largest request the client sent and the largest the server received (cl100k), and
the proxy's time from receiving a request to forwarding it (total over the run, and the largest).

    python -m benchmarks.agents.bench_agent_clis            # 3 CLIs (+ Claude Code with thinking) x 16k/32k/128k, direct and proxied
    python -m benchmarks.agents.bench_agent_clis --quick    # Codex and opencode at 32k, 30 steps (about a minute)
    python -m benchmarks.agents.bench_agent_clis --run      # `compacting-proxy run`: the window told to the CLI or not
    python -m benchmarks.agents.bench_agent_clis --run --quick   # the same, Codex and opencode at 32k only

With `--run` each CLI is started by `compacting-proxy run CLI --proxy <tap>` twice: `--no-tell-window`
(the CLI knows no window, the proxy alone keeps it inside) and `--tell-window` (Codex's
`model_context_window`, opencode's `limit.context`, Claude Code's `CLAUDE_CODE_MAX_CONTEXT_TOKENS` for
the model id `agent-model`). Printed also: the tokens the server received over the whole run, and the
prefix kept (of the bytes of each main-loop request, the share unchanged from the request before: what
a server's prompt cache reuses).
"""

from __future__ import annotations

import argparse
import sys
import time

from tests.support.agent_clis import Run, installed, run, run_command

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
    parser.add_argument("--run", action="store_true", help="compare telling the CLI the window or not")
    parser.add_argument(
        "--window", type=int, action="append", help="with --run: the windows (default: 32000)"
    )
    args = parser.parse_args()
    if args.run:
        compare_told_window(
            args.quick, args.steps or (30 if args.quick else 60), tuple(args.window or [32_000])
        )
        return
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


RUN_HEADER = (
    "| client | window | told the window | requests | over the window | finished | largest sent | "
    "largest received | tokens received | prefix kept |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
)


def run_row(r: Run, told: bool) -> str:
    return (
        f"| {r.client} {r.version} | {r.window // 1000}k | {'yes' if told else 'no'} | {r.requests} | {r.over} | "
        f"{'yes' if r.finished else 'no'} | {r.largest_sent:,} | {r.largest_received:,} | "
        f"{r.received_tokens:,} | {r.prefix_kept:.1%} |"
    )


def compare_told_window(quick: bool, steps: int, windows: tuple[int, ...]) -> None:
    clients = ("codex", "opencode") if quick else ("claude", "codex", "opencode")
    missing = sorted(c for c in clients if not installed(c))
    if missing:
        sys.exit(f"not installed: {missing}; run: npm install --prefix tests/clis")
    print(f"compacting-proxy run, {steps} steps a run; tokens by cl100k_base\n")
    print(RUN_HEADER, flush=True)
    started = time.monotonic()
    for client in clients:
        for window in windows:
            for told in (False, True):
                r, _ = run_command(
                    client, window, steps=steps, tell_window=told, own_proxy=False, timeout=900
                )
                print(run_row(r, told), flush=True)
                if not r.finished:
                    print(f"  exit {r.exit_code}: {r.output[-300:]!r}")
    print(f"\n{time.monotonic() - started:.0f} s in all")


if __name__ == "__main__":
    main()
