# ruff: noqa: RUF001, RUF002  (the report prints multiplication and minus signs, on purpose)
"""Prompt-cache retention of compaction: the pattern's plain algorithm against our engine.

``python -m benchmarks.cache.bench_cache [--quick] [--turns N] [--tokens-per-turn T] [--seed S]``

Each simulated conversation (``conversations.py``) is replayed as an agent client runs it through
a transparent proxy: the client keeps the full history and, before every model call (after each
user request and after each round of tool results), sends all of it; the compactor turns it into
the request that goes upstream. Compactors, side by side on the same conversation and window:

- ``plain``: the pattern's plain algorithm (``seeds/compaction-pattern.zh.md``, its Python
  ``compact()``), re-implemented faithfully below: chars/4 over ``json.dumps`` of each message
  plus the system prompt, a line at window × 0.8, level 1 (oldest tool result first, preview of
  150 characters) then level 2 (oldest exchange first, the first request kept), stopping as soon as
  it fits, the last 2 user requests and what follows protected. A proxy has no state, so it runs
  on the full history every time. Its decisions are computed by ``plain_compact_fast``, which
  makes the same decisions with a running estimate and each message's serialised size
  remembered; the algorithm as written (``plain_compact``, which deep-copies the history and
  re-estimates all of it after every change: quadratic) is run on a few requests spread evenly
  over the replay (``--samples``), checked to give the same messages there, and timed: its time
  is the sampled time scaled up by the sampling stride.
- ``plain, in the client``: for reference, the seed's own loop, where the compacted history
  replaces the client's (``messages[:] = compact(messages)``), so nothing comes back once cut.
- ``ours tX``: ``proxy.compaction.compact`` with the budget ``proxy.engine.plan.budget_for`` gives
  (threshold 0.8, target X, reply reserve 1,024, the tool schemas counted as fixed), keeping the
  last 2 user requests, counting with ``RequestCounter(count_chars4)``.

Measures, per compactor (all token counts by ``RequestCounter(count_chars4)``, whatever the
compactor counts with, so that every row is measured with the same ruler):

- cache retention: for every request that has a successor, compare it with the next request
  message by message (serialised with orjson), take the longest common prefix of whole messages
  and count its tokens; retention = Σ common-prefix tokens / Σ tokens of those requests. An
  append-only history that never compacts scores 100%.
- cache breaks: requests whose messages differ from the previous request's before the end of the
  previous request (the previous request is not a prefix of this one); also counted per turn.
- tokens sent (Σ over all requests) and uncached tokens (Σ of what each request sends beyond the
  common prefix with its predecessor: what the upstream must prefill again).
- over the line: requests still over the compactor's own line after compaction (ours: its
  ``overflow`` flag; plain: its own estimate against window × 0.8), and in parentheses how many of
  them the protected part alone already puts over the line (no compactor may touch it).
- time: CPU seconds (``time.process_time``, robust to a noisy neighbour) in the compactor over the
  whole replay, each replay in its own worker process (``--jobs``), and its ratio to the plain
  algorithm as written, same window, same run.

Results: Markdown on stdout; with ``--write`` (the default for a full run) also the section of
``benchmarks/cache/CACHE.md`` this script owns, with the exact command.
"""

from __future__ import annotations

import argparse
import multiprocessing
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from proxy.engine.index import Budget
from tests.support import simulated_chats as sim
from tests.support.cache_replay import (
    COUNT,
    Run,
    TokenCache,
    our_budget,
    ours,
    plain_client,
    plain_proxy,
    protected_tokens,
    replay,
)

HERE = Path(__file__).resolve().parent

CACHE_MD = HERE / "CACHE.md"


def time_plain_as_written(
    conversation: sim.Conversation, window: int, stride: int
) -> tuple[float, float, int]:
    """Run the seed's algorithm as written on every `stride`-th request, check that it gives the
    same messages as the fast version, and return (its seconds, the fast one's, samples) there."""
    written, fast = plain_proxy(window, fast=False), plain_proxy(window, fast=True)
    slow_seconds = fast_seconds = 0.0
    samples = 0
    for k in range(stride // 2, len(conversation.requests), stride):
        history = conversation.history(k)
        a, b = written(history), fast(history)
        if orjson.dumps(a.messages) != orjson.dumps(b.messages):
            raise AssertionError(f"plain_compact_fast differs from plain_compact at request {k}")
        slow_seconds += a.seconds
        fast_seconds += b.seconds
        samples += 1
    return slow_seconds, fast_seconds, samples


# --------------------------------------------------------------------------------------------
# Report.


@dataclass(slots=True)
class WindowReport:
    window: int
    runs: list[Run]
    plain_written_seconds: float  # the algorithm as written, extrapolated from its samples
    plain_fast_seconds: float  # the same decisions with a running estimate, every request
    samples: int
    stride: int
    budget: Budget
    protected_mean: float


def markdown(conversation: sim.Conversation, reports: list[WindowReport], command: str) -> str:
    turns = conversation.turns
    total = sum(COUNT(m) for m in conversation.messages)
    growth = (total - COUNT(conversation.messages[0])) / turns
    tool_results = sum(1 for m in conversation.messages if m["role"] == "tool")
    per_turn = conversation.requests == conversation.one_call_a_turn().requests
    lines = [
        "## Cache retention" + (", one model call a turn" if per_turn else ""),
        "",
        f"`{command}`",
        "",
        f"Conversation: seed {conversation.seed}, {turns} turns, {len(conversation.messages):,} messages "
        f"({tool_results} tool results), {len(conversation.requests)} model calls replayed"
        + (
            " (one a turn, at each user request)"
            if conversation.requests == conversation.one_call_a_turn().requests
            else ""
        )
        + ", "
        f"{total:,} tokens in all, growing {growth:,.0f} tokens a turn on average "
        f"(asked for {conversation.tokens_per_turn:,}). Token counts: `RequestCounter(count_chars4)` for "
        "every row. Engine: " + engine_state() + ".",
        "",
        "- **retention**: for each request that has a successor, the tokens of the longest run of "
        "whole messages, from the start, that the next request sends again unchanged (compared "
        "serialised), over the tokens of the request; summed over all requests. Never compacting "
        "scores 100%.",
        "- **breaks**: requests whose messages differ from the previous request's before the previous "
        "request's end; *turns* counts the turns with at least one.",
        "- **uncached**: Σ of what each request sends beyond its common prefix with the previous one "
        "(what the upstream must prefill).",
        "- **over line**: requests still over the compactor's own line after compaction (in brackets: "
        "of those, how many the protected part alone puts over the line).",
        "- **time**: CPU seconds inside the compactor for the whole replay (each replay in its own process), and × the plain algorithm as "
        "the seed writes it (same window, same run; that one re-estimates the whole history after "
        f"every change, so it is timed on {reports[0].samples} requests, one in every "
        f"{reports[0].stride}, and scaled by {reports[0].stride}; its decisions, checked equal there, "
        "come from a version with a running estimate).",
        "",
        "| window | compactor | retention | breaks (requests) | turns with a break | tokens sent | "
        "uncached | peak request | over line | time s | × plain |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for report in reports:
        for run in report.runs:
            seconds = report.plain_written_seconds if run.name == "plain" else run.seconds
            ratio = seconds / report.plain_written_seconds if report.plain_written_seconds else 0.0
            lines.append(
                f"| {report.window // 1000}k | {run.name} | {run.retention:.1%} | {run.breaks} / "
                f"{run.requests - 1} | {len(run.break_turns)} / {turns} | {run.sent_tokens / 1e6:.2f} M | "
                f"{run.uncached_tokens / 1e6:.2f} M | {run.peak_tokens:,} | {run.over_line} "
                f"({run.unavoidable}) | {seconds:.2f} | {ratio:.3g}× |"
            )
    lines += [
        "",
        "Plain with a running estimate and cached sizes instead (same decisions): "
        + ", ".join(
            f"{r.window // 1000}k {r.plain_fast_seconds:.2f} s "
            f"({r.plain_fast_seconds / r.plain_written_seconds:.3f}× as written)"
            for r in reports
            if r.plain_written_seconds
        )
        + ".",
        "",
        "Budgets (ours, target 0.6): "
        + "; ".join(
            f"{r.window // 1000}k: line {r.budget.limit:,}, target {r.budget.target:,}, fixed "
            f"{r.budget.fixed:,}, protected part {r.protected_mean:,.0f} tokens on average"
            for r in reports
        )
        + ".",
        "",
    ]
    lines += _explain(reports, growth, turns, len(conversation.requests) / turns)
    return "\n".join(lines) + "\n"


def _explain(reports: list[WindowReport], growth: float, turns: int, calls: float) -> list[str]:
    """What bounds retention: how often the frontier must move, and what each move loses."""
    out = [
        "What bounds retention (ours, target 0.6). The frontier moves only when a request crosses "
        "the line, and then goes down to the target, so the history can grow by the room "
        "(line − target) before the next move: at best one move every room / growth turns. Each "
        "move loses, for the cache, everything after the first message it changes: every result "
        "not yet truncated and the whole protected part P (the last two turns). Whatever the "
        "compactor, every token a turn adds (g) must be changed or dropped once the turn is old, "
        "and each change loses at least that token and P after it; with at most line − fixed − P "
        "tokens of history that may change, that is at least g + P·g / (line − fixed − P) tokens "
        "lost a turn, out of c requests a turn of S tokens each: retention ≤ 1 − that / (c·S) "
        f"(c = {calls:.2f} model calls a turn here; S = this row's mean request).",
        "",
        "| window | room (line − target) | growth g a turn | turns of room | moves a turn | "
        "tokens lost a move | P, mean | S, mean | bound ≈ | retention |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for report in reports:
        run = next((r for r in report.runs if r.name == "ours t0.6"), None)
        if run is None:
            continue
        budget = report.budget
        room = budget.limit - budget.target
        lost = run.lost_at_breaks / run.breaks if run.breaks else 0.0
        mean = run.sent_tokens / run.requests
        changeable = budget.limit - budget.fixed - report.protected_mean
        bound = (
            f"{1 - (growth + report.protected_mean * growth / changeable) / (calls * mean):.1%}"
            if changeable > 0
            else "-"
        )
        out.append(
            f"| {report.window // 1000}k | {room:,} | {growth:,.0f} | {room / growth:.2f} | "
            f"{run.breaks / turns:.2f} | {lost:,.0f} | {report.protected_mean:,.0f} | {mean:,.0f} | "
            f"{bound} | {run.retention:.1%} |"
        )
    out.append("")
    return out


# One task per (window, compactor), run in worker processes: each builds the same conversation.
_CONVERSATION: sim.Conversation | None = None


def simulate(turns: int, tokens_per_turn: int, seed: int, per_turn: bool = False) -> sim.Conversation:
    conversation = sim.simulate(turns, tokens_per_turn=tokens_per_turn, seed=seed)
    return conversation.one_call_a_turn() if per_turn else conversation


def _start_worker(turns: int, tokens_per_turn: int, seed: int, per_turn: bool) -> None:
    global _CONVERSATION
    _CONVERSATION = simulate(turns, tokens_per_turn, seed, per_turn)


def _task(task: tuple[str, int, float]) -> tuple[tuple[str, int, float], Any]:
    kind, window, value = task
    conversation = _CONVERSATION
    assert conversation is not None
    if kind == "plain":
        return task, replay(conversation, plain_proxy(window), "plain", window)
    if kind == "client":
        return task, replay(conversation, plain_client(window), "plain, in the client", window)
    if kind == "ours":
        return task, replay(conversation, ours(window, value), f"ours t{value}", window)
    return task, time_plain_as_written(conversation, window, int(value))


def measure(
    conversation: sim.Conversation,
    windows: Sequence[int],
    targets: Sequence[float],
    *,
    samples: int = 6,
    jobs: int = 2,
    progress: Callable[[str], None] = lambda _: None,
) -> list[WindowReport]:
    """Every compactor at every window; the seed's algorithm as written on `samples` requests."""
    stride = max(1, len(conversation.requests) // samples)
    tasks: list[tuple[str, int, float]] = []
    # The longest first, so that the workers finish together.
    tasks += [("ours", window, target) for window in windows for target in targets]
    tasks += [("written", window, stride) for window in windows]
    tasks += [(kind, window, 0.0) for window in windows for kind in ("plain", "client")]
    done: dict[tuple[str, int, float], Any] = {}
    per_turn = conversation.requests == conversation.one_call_a_turn().requests
    args = (conversation.turns, conversation.tokens_per_turn, conversation.seed, per_turn)
    if jobs > 1:
        context = multiprocessing.get_context("fork")
        with context.Pool(jobs, initializer=_start_worker, initargs=args) as pool:
            for task, result in pool.imap_unordered(_task, tasks):
                done[task] = result
                progress(f"{task[1] // 1000}k {task[0]} {task[2]:g} done")
    else:
        _start_worker(*args)
        for task in tasks:
            done[task] = _task(task)[1]
            progress(f"{task[1] // 1000}k {task[0]} {task[2]:g} done")

    tokens = TokenCache(conversation.messages)
    protected = [
        protected_tokens(h, [tokens(m) for m in h])
        for h in (conversation.history(k) for k in range(0, len(conversation.requests), 7))
    ]
    reports = []
    for window in windows:
        written, _, sampled = done[("written", window, stride)]
        runs = [done[("plain", window, 0.0)], done[("client", window, 0.0)]]
        runs += [done[("ours", window, target)] for target in targets]
        reports.append(
            WindowReport(
                window,
                runs,
                written * stride,
                runs[0].seconds,
                sampled,
                stride,
                our_budget(window, 0.6),
                sum(protected) / len(protected),
            )
        )
    return reports


# --------------------------------------------------------------------------------------------


def engine_state() -> str:
    """Which engine was measured: the commit, and the files of `proxy/` changed since (if any)."""
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True, text=True, check=True
        ).stdout.strip()
        changed = subprocess.run(
            ["git", "status", "--porcelain", "--", "proxy"],
            cwd=HERE.parents[1],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split("\n")
    except (OSError, subprocess.CalledProcessError):
        return "unknown (no git)"
    files = sorted(line[3:] for line in changed if line.strip())
    return f"commit {head}" + (f" with uncommitted changes in {', '.join(files)}" if files else "")


def add_write_option(parser: argparse.ArgumentParser, page: str) -> None:
    """`--write` / `--no-write`: whether the script writes its section of `page`; by default a full
    run does and a `--quick` one does not (the suite's runs leave the published figures alone)."""
    help = f"write this script's section of {page} (default: on without --quick)"
    parser.add_argument("--write", action=argparse.BooleanOptionalAction, default=None, help=help)


def publish(args: argparse.Namespace, path: Path, name: str, text: str) -> None:
    """The script's section `name` of `path` written, if `--write` (or a full run) says so."""
    if args.write if args.write is not None else not args.quick:
        write_section(path, name, text)
        print(f"wrote {path}", file=sys.stderr)


def write_section(path: Path, name: str, text: str) -> None:
    """Replace a script's section of a Markdown page (between its markers), keeping the others."""
    begin, end = f"<!-- {name}: begin -->", f"<!-- {name}: end -->"
    block = f"{begin}\n{text.rstrip()}\n{end}\n"
    old = path.read_text() if path.exists() else "# Compaction and the prompt cache\n\n"
    if begin in old and end in old:
        before, rest = old.split(begin, 1)
        after = rest.split(end, 1)[1].lstrip("\n")
        new = before + block + ("\n" + after if after else "")
    else:
        new = old.rstrip() + "\n\n" + block
    path.write_text(new)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="120 turns, windows 8k and 32k, target 0.6")
    parser.add_argument("--turns", type=int, help="default 200 (120 with --quick)")
    parser.add_argument("--tokens-per-turn", type=int, default=1900)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--windows", type=str, help="comma-separated, default 8000,32000,128000")
    parser.add_argument("--targets", type=str, help="comma-separated, default 0.5,0.6,0.7")
    parser.add_argument(
        "--samples", type=int, help="requests the seed's algorithm as written is timed on (6, 4 with --quick)"
    )
    parser.add_argument(
        "--per-turn",
        action="store_true",
        help="replay one model call a turn (at each user request) instead of every call",
    )
    parser.add_argument("--jobs", type=int, default=2, help="worker processes")
    add_write_option(parser, "benchmarks/cache/CACHE.md")
    args = parser.parse_args(argv)
    turns = args.turns or (120 if args.quick else 200)
    default_windows = "8000,32000" if args.quick else "8000,32000,128000"
    windows = [int(w) for w in (args.windows or default_windows).split(",")]
    targets = [float(t) for t in (args.targets or ("0.6" if args.quick else "0.5,0.6,0.7")).split(",")]
    if 0.6 not in targets:
        targets.append(0.6)
    given = sys.argv[1:] if argv is None else argv
    command = " ".join(["python -m benchmarks.cache.bench_cache", *map(shlex.quote, given)])

    started = time.perf_counter()
    conversation = simulate(turns, args.tokens_per_turn, args.seed, args.per_turn)
    reports = measure(
        conversation,
        windows,
        targets,
        samples=args.samples or (4 if args.quick else 6),
        jobs=args.jobs,
        progress=lambda line: print(f"[{time.perf_counter() - started:6.1f}s] {line}", file=sys.stderr),
    )
    text = markdown(conversation, reports, command)
    print(text)
    publish(args, CACHE_MD, "bench_cache per-turn" if args.per_turn else "bench_cache", text)


if __name__ == "__main__":
    main()
