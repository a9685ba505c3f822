"""The same room gives the same cut (issue 24, item 5).

At 8k an unread 24,000-character result was cut to well under the line while a 40,000-character one
of the same kind kept more: the cap's search stopped after a few proportional steps, and `cap_text`
gave the share it reserves for error lines to nothing when the cut part had few. Now an unread
result too big for the line is cut as close to it as the count allows, whatever its size or kind.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Callable
from typing import Any

import pytest

from proxy.counting.tokens import text_of
from proxy.engine.plan import ChatPlan
from proxy.planning.planner import Planner
from proxy.settings import Settings

WORDS = ["the", "model", "keeps", "what", "it", "needs", "next", "window", "cache", "result"]
KINDS: dict[str, Callable[[int, random.Random], str]] = {
    "grep": lambda j, rng: (
        f"src/pkg/module_{j % 17}.py:{j}: def handler_{j}(request, value={rng.randint(0, 9999)}):"
    ),
    "log": lambda j, rng: (
        f"2026-01-0{j % 9 + 1} INFO worker-{j % 5} batch {rng.randint(0, 99999)} in "
        f"{rng.random():.3f}s" + (" ERROR timeout" if j % 7 == 0 else "")
    ),
    "prose": lambda j, rng: " ".join(rng.choice(WORDS) for _ in range(14)),
}
SIZES = (24_000, 30_000, 40_000, 80_000)
WINDOW = 8192


def body(kind: str, chars: int) -> dict[str, Any]:
    rng = random.Random(0)
    lines: list[str] = []
    size = 0
    while size < chars:
        lines.append(KINDS[kind](len(lines), rng))
        size += len(lines[-1]) + 1
    call = {
        "id": "c1",
        "type": "function",
        "function": {"name": "bash", "arguments": json.dumps({"cmd": "run"})},
    }
    return {
        "model": "m",
        "messages": [
            {"role": "system", "content": "You are a coding agent."},
            {"role": "user", "content": "Find the handler."},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": "\n".join(lines)[:chars]},
        ],
    }


def plan(kind: str, chars: int) -> ChatPlan:
    planner = Planner(Settings(_env_file=None, window=WINDOW, upstream_kind="openai"))  # type: ignore[call-arg]
    return asyncio.run(planner.plan(body(kind, chars)))


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_an_unread_result_is_cut_to_the_line_whatever_its_size(kind: str) -> None:
    kept: list[int] = []
    for chars in SIZES:
        p = plan(kind, chars)
        if not p.result.capped:
            assert p.result.tokens_after <= p.budget.limit  # it fits whole
            continue
        after, line = p.result.tokens_after, p.budget.limit
        assert 0.98 * line <= after <= line, f"{chars:,} chars went out at {after} of a {line} line"
        kept.append(len(text_of(p.result.messages[-1]["content"])))
    assert kept, "some sizes must be capped, or this measures nothing"
    # The same room keeps about the same number of characters, whatever the result's size.
    assert max(kept) <= min(kept) * 1.03, kept
