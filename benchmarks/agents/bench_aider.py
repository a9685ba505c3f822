"""The real aider (``aider-chat``, ``scripts/aider_venv.py``) in one whole-format edit whose restored
chat history is 1.4 times the server's window, straight at the scripted model server and through the
real `compacting-proxy` process (issue 26, part 4; the session: ``tests/support/aider_runs.py``).
Printed per run: the requests the server received, how many were over its window, whether aider hit
its token limit, whether the edit was applied, the restored history and the largest request received
(cl100k), and the run's time.

    python -m benchmarks.agents.bench_aider            # 32k and 128k, direct and proxied
    python -m benchmarks.agents.bench_aider --quick    # 32k only (about a minute)
"""

from __future__ import annotations

import argparse
import sys
import time

from scripts.aider_venv import AIDER_VERSION, is_installed
from tests.support.aider_runs import SOURCE, run_aider
from tests.support.upstreams.aider_model import EDIT_LINE

HEADER = (
    "| aider | window | route | requests | over the window | token limit hit | edit applied | history | "
    "largest received | time |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"
)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--windows", default="32000,128000")
    parser.add_argument("--quick", action="store_true", help="32k only")
    args = parser.parse_args()
    if not is_installed():
        sys.exit("aider is not installed; run: python scripts/aider_venv.py install")
    print(HEADER, flush=True)
    windows = [32_000] if args.quick else [int(w) for w in args.windows.split(",")]
    for window in windows:
        for proxied in (False, True):
            started = time.monotonic()
            r = run_aider(window, proxied=proxied, history_tokens=int(window * 1.4), timeout=900)
            edited = r.edited != SOURCE and r.edited.endswith(EDIT_LINE)
            largest = max([x["tokens"] for x in r.received] or [0])
            print(
                f"| {AIDER_VERSION} | {window // 1000}k | {'proxy' if proxied else 'direct'} | {len(r.received)} | "
                f"{r.over} | {'yes' if r.hit_the_limit else 'no'} | {'yes' if edited else 'no'} | "
                f"{r.history_tokens:,} | {largest:,} | {time.monotonic() - started:.0f} s |",
                flush=True,
            )


if __name__ == "__main__":
    main()
