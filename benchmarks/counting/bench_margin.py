"""Never over the window with the default count: requests over the window by the real tokenizer, and
false refusals, on the kinds of text the estimate undercounts most.

``python -m benchmarks.counting.bench_margin [--quick] [--rejecting]`` plans requests with the proxy's own `Planner` (no
server: the plan is what would be forwarded or refused) at an 8,192-token window: a pasted text of
each kind (Chinese, Japanese, code, JSON, parse trees, base64; ``tests/support/kinds.py``) sized from
50% to 130% of the window by the real count, alone and after an older tool exchange of the same
kind (which compaction may cut), two seeds each. Two ways of counting:

- *default count, unnamed model* (`model: "m"`): the estimate with its margin. The real count is
  the heaviest of cl100k_base, o200k_base, Qwen2.5 and Llama 3 (the model may use any of them).
- *named model* (`qwen2.5:7b`, `gpt-4o`, `gpt-4`, `llama3.1:8b`): counted exactly by default
  (`COMPACT_TOKENIZER_BY_MODEL`); the real count is that model's tokenizer.

*over*: forwarded (compacted or not) while the real count of what is sent, with the template's
markers, is over the window (target 0). *false refusal*: refused while the request as it came, with
the reply reserve (1,024), fits the window by the real count (target 0); *refused, fits bare*:
refused while the bare prompt fits (no room left for the reply's reserve), for information.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Callable
from typing import Any

from proxy.counting.estimator import estimate_text_tokens
from proxy.counting.margin import text_bounds
from proxy.counting.tokenizers import load_text_counter
from proxy.counting.tokens import MESSAGE_OVERHEAD, REPLY_PRIMER, text_of
from proxy.planning.planner import Planner
from proxy.settings import Settings
from tests.support.kinds import KINDS, text_of_kind
from tests.support.pastes import paste_chat

WINDOW = 8192
RESERVE = 1024
RULERS = {"cl100k": "cl100k_base", "o200k": "o200k_base", "qwen2.5": "qwen2.5", "llama3": "llama3"}
NAMED = {"qwen2.5:7b": "qwen2.5", "gpt-4o": "o200k", "gpt-4": "cl100k", "llama3.1:8b": "llama3"}
COMMAND = "python -m benchmarks.counting.bench_margin"


def real_size(count: Callable[[str], int], messages: list[dict[str, Any]]) -> int:
    return sum(count(text_of(m.get("content"))) + MESSAGE_OVERHEAD for m in messages) + REPLY_PRIMER


def sized(
    kind: str, fraction: float, seed: int, history: bool, count: Callable[[str], int]
) -> list[dict[str, Any]]:
    """A request whose real size is about `fraction` of the window (the paste sized by the kind's
    real tokens per character, less what the rest of the request holds)."""
    sample = text_of_kind(kind, 20_000, seed)
    per_char = count(sample) / len(sample)
    rest = real_size(count, paste_chat(kind, 0, history=history, seed=seed))
    return paste_chat(kind, max(200, int((fraction * WINDOW - rest) / per_char)), history=history, seed=seed)


async def run(fractions: list[float], seeds: int) -> list[str]:
    counters = {name: load_text_counter(spec) for name, spec in RULERS.items()}

    def heaviest(text: str) -> int:
        return max(count(text) for count in counters.values())

    modes: list[tuple[str, str, Callable[[str], int]]] = [("default count, unnamed model", "m", heaviest)]
    modes += [(f"named: {model}", model, counters[ruler]) for model, ruler in NAMED.items()]
    rows = [
        "| count | kind | requests | forwarded | compacted | refused | **over the window** "
        "| **false refusals** | refused, fits bare |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    totals = {"over": 0, "false": 0}
    for label, model, count in modes:
        planner = Planner(Settings(_env_file=None, window=WINDOW, upstream_kind="openai"))  # type: ignore[call-arg]
        for kind in KINDS:
            n = fwd = compacted = refused = over = false = bare = 0
            for seed in range(1, seeds + 1):
                for history in (False, True):
                    for fraction in fractions:
                        messages = sized(kind, fraction, seed, history, count)
                        plan = await planner.plan({"model": model, "messages": messages})
                        n += 1
                        came = real_size(count, messages)
                        if plan.result.over_window:
                            refused += 1
                            false += came + RESERVE <= WINDOW
                            bare += came <= WINDOW
                            continue
                        fwd += 1
                        compacted += plan.result.changed
                        over += real_size(count, plan.result.messages) > WINDOW
            totals["over"] += over
            totals["false"] += false
            rows.append(
                f"| {label} | {kind} | {n} | {fwd} | {compacted} | {refused} | **{over}** | **{false}** | {bare} |"
            )
            print(rows[-1], file=sys.stderr, flush=True)
    rows.append(f"| **all** | | | | | | **{totals['over']}** | **{totals['false']}** | |")
    return rows


async def rejecting_rows(fractions: list[float], seeds: int) -> list[str]:
    """An unnamed model behind an upstream that refuses an overflow itself
    (`COMPACT_UPSTREAM_REJECTS_OVERFLOW`): what only the margin puts over the window is sent for the
    server's verdict. The model's vocabulary is each of the four in turn (the lightest for the text
    is where the proxy could refuse what fits). *Refused by the upstream*: sent while over the window
    by the model's count, so the server's error reaches the client (a round trip spent, no prompt cut)."""
    counters = {name: load_text_counter(spec) for name, spec in RULERS.items()}
    rows = [
        "| model's vocabulary | kind | requests | refused by the proxy | **false refusals** "
        "| sent, refused by the upstream |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    total = 0
    for name, count in counters.items():
        settings = Settings(  # type: ignore[call-arg]
            _env_file=None, window=WINDOW, upstream_kind="openai", upstream_rejects_overflow=True
        )
        planner = Planner(settings)
        for kind in KINDS:
            n = refused = false = sent_over = 0
            for seed in range(1, seeds + 1):
                for history in (False, True):
                    for fraction in fractions:
                        messages = sized(kind, fraction, seed, history, count)
                        plan = await planner.plan({"model": "m", "messages": messages})
                        n += 1
                        if plan.result.over_window:
                            refused += 1
                            false += real_size(count, messages) + RESERVE <= WINDOW
                        else:
                            sent_over += real_size(count, plan.result.messages) > WINDOW
            total += false
            rows.append(f"| {name} | {kind} | {n} | {refused} | **{false}** | {sent_over} |")
            print(rows[-1], file=sys.stderr, flush=True)
    rows.append(f"| **all** | | | | **{total}** | |")
    return rows


def speed_rows(chars: int = 500_000) -> list[str]:
    """What measuring the margin costs the first time a text is seen (it is remembered after), next to
    the estimate itself, on `chars` characters of each kind: best of 5."""
    rows = [
        f"| input ({chars // 1000}K chars) | estimate ms | margin pass ms | margin / estimate |",
        "| --- | ---: | ---: | ---: |",
    ]
    for kind in KINDS:
        text = text_of_kind(kind, chars)
        timings = []
        for fn in (estimate_text_tokens, text_bounds):
            runs = []
            for _ in range(5):
                start = time.perf_counter()
                fn(text)
                runs.append(time.perf_counter() - start)
            timings.append(min(runs))
        rows.append(
            f"| {kind} | {timings[0] * 1e3:.2f} | {timings[1] * 1e3:.2f} | {timings[1] / timings[0]:.2f}x |"
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer sizes, one seed")
    parser.add_argument(
        "--rejecting",
        action="store_true",
        help="only an unnamed model behind an upstream that refuses overflows",
    )
    args = parser.parse_args(argv)
    if args.quick:
        fractions, seeds = [0.6, 0.85, 1.0, 1.2], 1
    else:
        fractions, seeds = [round(0.5 + 0.05 * i, 2) for i in range(17)], 2
    try:
        rows = asyncio.run((rejecting_rows if args.rejecting else run)(fractions, seeds))
    except RuntimeError as exc:
        print(f"cannot load the real tokenizers: {exc}", file=sys.stderr)
        return 2
    print(
        f"`{COMMAND}{' --rejecting' if args.rejecting else ''}`: window {WINDOW:,}, sizes {fractions[0]:.0%}-{fractions[-1]:.0%} of it by the real count.\n"
    )
    print("\n".join(rows))
    if not args.rejecting:
        print()
        print("\n".join(speed_rows()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
