"""Idempotence over every conversation of the benchmark sets: compacting the proxy's own output.

``python -m benchmarks.cache.bench_idempotence [--quick] [--windows 8192,16384,32768]``

Every model call of every conversation the other benchmarks replay (the generated agent loops of
``agent_loops.py``, the mini-swe-agent and SWE-agent trajectories and the Chinese chat of
``trajectories.py``, the simulated support chat of ``tests/support/simulated_chats.py``) is planned
by the server's own planner (``Planner(Settings(window=W))``, every other setting at its default:
the estimate with its margin for the kind of text), and what it would forward (the compacted
messages, the reply limit it lowered) is planned again by a fresh planner, as a client that resends
what it sent, or a second proxy, would have it planned. A compaction is idempotent when that second
plan forwards the same messages and reply limit. Requests over their line whatever is done
(forwarded as they came, marked) and refusals are counted apart: they are not compaction's output.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from benchmarks.agents import trajectories as gen
from benchmarks.cache import agent_loops
from proxy.engine.plan import ChatPlan
from proxy.planning.planner import Planner
from proxy.settings import Settings
from tests.support import simulated_chats as sim

Message = dict[str, Any]


@dataclass(slots=True)
class Tally:
    kind: str
    window: int
    requests: int = 0
    compacted: int = 0
    unchanged_again: int = 0
    over_line: int = 0
    refused: int = 0


def conversations(quick: bool) -> Iterator[tuple[str, dict[str, Any], list[list[Message]]]]:
    """(kind, the request's other fields, every request's messages) for each conversation."""
    for loop in agent_loops.loops(quick=quick):
        yield "agent loops", {"model": "loop"}, [loop.history(k) for k in range(len(loop.requests))]
    # The trajectories are made once (minutes of real commands): --quick uses them only if made.
    made = gen.cache_path(False, 0).exists()
    trajectories = gen.cached_trajectories(False) if made or not quick else []
    for t in [t for t in trajectories if t.framework == "swe-agent"][:1] if quick else trajectories:
        kind = "chinese chat" if t.framework not in ("mini-swe-agent", "swe-agent") else t.framework
        yield kind, t.body, [t.request(k) for k in range(len(t.calls))]
    chat = sim.simulate(60 if quick else 200, tokens_per_turn=1900, seed=0)
    yield "support chat", {"model": "chat"}, [chat.history(k) for k in range(len(chat.requests))]


def forwarded(body: dict[str, Any], plan: ChatPlan) -> dict[str, Any]:
    out = {**body, "messages": plan.result.messages}
    if plan.max_tokens is not None:
        out[plan.reply_field] = plan.max_tokens
    return out


def measure(quick: bool, windows: list[int]) -> list[Tally]:
    tallies: dict[tuple[str, int], Tally] = {}
    for kind, fields, requests in conversations(quick):
        print(f"{kind}: {len(requests)} requests", file=sys.stderr)
        for window in windows:
            tally = tallies.setdefault((kind, window), Tally(kind, window))
            settings = Settings(_env_file=None, window=window)  # type: ignore[call-arg]
            for messages in requests:
                body = {**fields, "messages": messages}
                first = asyncio.run(Planner(settings).plan(body))
                tally.requests += 1
                if first.result.over_window:
                    tally.refused += 1
                    continue
                if first.result.overflow:
                    tally.over_line += 1
                    continue
                if not first.result.changed and first.max_tokens is None:
                    continue
                tally.compacted += 1
                again = asyncio.run(Planner(settings).plan(forwarded(body, first)))
                same = again.result.messages == first.result.messages and again.max_tokens in (
                    None,
                    first.max_tokens,
                )
                tally.unchanged_again += same
    return sorted(tallies.values(), key=lambda t: (t.kind, t.window))


def markdown(tallies: list[Tally], command: str, seconds: float) -> str:
    lines = [
        f"`{command}` ({seconds:.0f} s)",
        "",
        "| conversations | window | requests | compacted | unchanged when compacted again | over the line (as they came) | refused |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    total = same = 0
    for t in tallies:
        share = f"{t.unchanged_again / t.compacted:.1%}" if t.compacted else "-"
        lines.append(
            f"| {t.kind} | {t.window // 1024}k | {t.requests:,} | {t.compacted:,} | "
            f"{t.unchanged_again:,} ({share}) | {t.over_line} | {t.refused} |"
        )
        total += t.compacted
        same += t.unchanged_again
    lines += ["", f"All: {same:,} of {total:,} compacted requests unchanged when compacted again."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="the short loops and trajectories, a 60-turn chat"
    )
    parser.add_argument("--windows", type=str, default="8192,16384,32768")
    args = parser.parse_args(argv)
    for key in [k for k in os.environ if k.startswith("COMPACT_")]:
        del os.environ[key]  # the default settings, whatever the shell says
    given = sys.argv[1:] if argv is None else argv
    command = " ".join(["python -m benchmarks.cache.bench_idempotence", *map(shlex.quote, given)])
    started = time.perf_counter()
    tallies = measure(args.quick, [int(w) for w in args.windows.split(",")])
    print(markdown(tallies, command, time.perf_counter() - started))


if __name__ == "__main__":
    main()
