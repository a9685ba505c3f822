"""Do planted facts survive level 1? Our notes against the pattern's plain preview.

``python -m benchmarks.notes.bench_facts [--quick] [--turns N] [--seeds 0,1,2]``

Facts (order numbers, part numbers, ids, amounts, dates, error lines) are planted at the head, the
middle or the tail of tool results of simulated agent chats (``conversations.py``; each planted
value occurs once in the whole chat). Each chat is compacted by ``proxy.compaction.compact`` with
the smallest line at which level 1 alone is enough (no exchange dropped) and target = line, so that
nearly every old tool result becomes a note. The same results are then given the plain
preview of the pattern instead (``[Truncated to save context: N chars. Preview: first 150
chars...]``). A fact survives when its exact text is still a substring of the compacted history.
Only facts planted in the results that were truncated are counted: elsewhere both keep everything.

Results: Markdown on stdout; with ``--write`` (the default for a full run) also the section of
``benchmarks/cache/CACHE.md`` this script owns.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from benchmarks.cache import bench_cache
from tests.support import simulated_chats as sim
from tests.support.fact_replay import FactsReport, measure_facts

HERE = Path(__file__).resolve().parent


def markdown(report: FactsReport, conversations: Sequence[sim.Conversation], command: str) -> str:
    seeds = ", ".join(str(c.seed) for c in conversations)
    turns = conversations[0].turns
    planted = sum(report.planted.values())
    lines = [
        "## Facts surviving level 1",
        "",
        f"`{command}`",
        "",
        f"{len(conversations)} conversations (seeds {seeds}, {turns} turns each, "
        f"{conversations[0].tokens_per_turn:,} tokens a turn), each compacted by our engine at the "
        "smallest line (within 0.5%) where level 1 alone is enough (lines "
        + ", ".join(f"{line:,}" for line in report.lines)
        + f" tokens): {report.results} tool results truncated, holding {planted} planted facts. "
        "The plain preview is applied to the same results. A fact survives when its exact text is "
        "still in the compacted history. Engine: " + bench_cache.engine_state() + ".",
        "",
        "| fact kind | planted | ours (notes) | plain preview |",
        "|---|---|---|---|",
    ]
    for kind in sim.FACT_KINDS:
        n = report.count(report.planted, kind)
        lines.append(
            f"| {kind} | {n} | {report.count(report.ours, kind)} ({report.share(report.ours, kind):.0%}) | "
            f"{report.count(report.plain, kind)} ({report.share(report.plain, kind):.0%}) |"
        )
    lines.append(
        f"| **all** | {planted} | {sum(report.ours.values())} ({report.share(report.ours):.0%}) | "
        f"{sum(report.plain.values())} ({report.share(report.plain):.0%}) |"
    )
    lines += [
        "",
        "By where the fact sits in its result:",
        "",
        "| position | planted | ours (notes) | plain preview |",
        "|---|---|---|---|",
    ]
    for where in sim.POSITIONS:
        n = report.count(report.planted, where=where)
        lines.append(
            f"| {where} | {n} | {report.share(report.ours, where=where):.0%} | "
            f"{report.share(report.plain, where=where):.0%} |"
        )
    per = max(1, report.results)
    lines += [
        "",
        f"Size of the truncated results: {report.raw_tokens / per:,.0f} tokens each on average raw, "
        f"{report.our_tokens / per:,.0f} as our notes, {report.plain_tokens / per:,.0f} as plain "
        "previews.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one conversation")
    parser.add_argument("--turns", type=int, default=60)
    parser.add_argument("--tokens-per-turn", type=int, default=1900)
    parser.add_argument("--seeds", type=str, help="comma-separated, default 0,1,2 (0 with --quick)")
    bench_cache.add_write_option(parser, "benchmarks/cache/CACHE.md")
    args = parser.parse_args(argv)
    seeds = [int(s) for s in (args.seeds or ("0" if args.quick else "0,1,2")).split(",")]
    conversations = [sim.simulate(args.turns, tokens_per_turn=args.tokens_per_turn, seed=s) for s in seeds]
    given = sys.argv[1:] if argv is None else argv
    command = " ".join(["python -m benchmarks.notes.bench_facts", *map(shlex.quote, given)])
    text = markdown(measure_facts(conversations), conversations, command)
    print(text)
    bench_cache.publish(args, bench_cache.CACHE_MD, "bench_facts", text)


if __name__ == "__main__":
    main()
