"""`Planner` on its own: a request that fits goes as it came, one over the line is compacted, one that
cannot fit the window is refused (after the upstream's count, where it has one), and what the answer
reports is learned. The counters are fakes: the four-characters-a-token count (`chars4`), an upstream
`/tokenize` that answers what the test says, and a window detector that knows one window.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from proxy.counting.margin import MIN_MARGIN, text_bytes
from proxy.counting.modes import Counting
from proxy.planning.planner import Planner
from proxy.settings import Settings
from proxy.upstream.overflow import Overflow
from proxy.upstream.probes import DetectedWindow

WINDOW = 2048
Message = dict[str, Any]


class FakeTokenize:
    """The upstream's exact count (`UpstreamTokenCounter.count`): `tokens_per_char` of the messages'
    text, or None (no `/tokenize`, as OpenAI's API and Ollama have none)."""

    def __init__(self, tokens_per_char: float | None) -> None:
        self.tokens_per_char = tokens_per_char
        self.asked: list[dict[str, Any]] = []

    async def count(self, body: dict[str, Any], headers: Sequence[tuple[bytes, bytes]] = ()) -> int | None:
        self.asked.append(body)
        if self.tokens_per_char is None:
            return None
        chars = sum(len(str(m.get("content") or "")) for m in body["messages"])
        return int(chars * self.tokens_per_char) + 8


class FakeDetector:
    """A window detector (`WindowDetector.window`) that finds llama.cpp's `/props` saying `tokens`."""

    def __init__(self, tokens: int) -> None:
        self.tokens = tokens

    async def window(self, model: str, headers: Sequence[tuple[bytes, bytes]] = ()) -> DetectedWindow:
        return DetectedWindow(self.tokens, "llama.cpp /props n_ctx")


def make(tokenizer: str = "chars4", *, exact: FakeTokenize | None = None, **knobs: Any) -> Planner:
    knobs = {"window": WINDOW, "upstream_kind": "openai", **knobs}
    settings = Settings(_env_file=None, tokenizer=tokenizer, **knobs)  # type: ignore[call-arg]
    return Planner(settings, exact=exact)  # type: ignore[arg-type]


def agent_loop(results: int, chars: int) -> list[Message]:
    messages: list[Message] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix the failing test."},
    ]
    for i in range(results):
        call = {"id": f"c{i}", "type": "function", "function": {"name": "read", "arguments": f'{{"n": {i}}}'}}
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": f"c{i}", "content": f"line {i}: " + "x" * chars})
    return messages


def paste(chars: int) -> list[Message]:
    return [{"role": "user", "content": "Summarise this:\n" + "word " * (chars // 5)}]


async def test_a_request_that_fits_goes_as_it_came() -> None:
    messages = agent_loop(2, 400)
    plan = await make().plan({"model": "m", "messages": messages})
    assert not plan.result.changed and not plan.result.overflow
    assert plan.result.messages == messages
    assert plan.counted_by == Counting.CHARS4 and plan.window.window == WINDOW


async def test_a_request_over_the_line_is_compacted_under_it() -> None:
    messages = agent_loop(12, 1200)  # ~3,700 tokens at four characters a token
    plan = await make().plan({"model": "m", "messages": messages})
    assert plan.result.changed and not plan.result.overflow
    assert plan.result.tokens_before > WINDOW >= plan.budget.limit >= plan.result.tokens_after
    assert plan.result.messages[:2] == messages[:2], "the system message and the task are never touched"
    assert plan.result.truncated or plan.result.dropped


async def test_what_cannot_fit_the_window_is_refused() -> None:
    plan = await make().plan({"model": "m", "messages": paste(12_000)})
    assert plan.result.over_window and plan.result.overflow


async def test_the_estimate_over_the_window_asks_the_upstream_before_refusing() -> None:
    """The estimate (with its margin) says over; the server's own count says it fits: forwarded as
    it came, counted by the upstream. Without a count (None) it is refused, and the server without
    `/tokenize` is not asked again for the next request."""
    body = {"model": "m", "messages": paste(10_500)}  # ~1,930 estimated, ~2,240 with the margin
    fits = FakeTokenize(0.18)  # 1,898 tokens by the server
    plan = await make("estimate", exact=fits).plan(body)
    assert not plan.result.over_window and plan.counted_by == Counting.UPSTREAM
    assert plan.result.messages == body["messages"] and fits.asked
    none = FakeTokenize(None)
    planner = make("estimate", exact=none)
    assert (await planner.plan(body)).result.over_window
    assert (await planner.plan(body)).result.over_window
    assert len(none.asked) == 1


async def test_near_the_line_the_upstream_counts_exactly_by_default() -> None:
    """`auto`: the server's own count, its factor over the local count on the 5% grid, the output
    counted by the server too and the reply limit set by that count."""
    exact = FakeTokenize(0.5)  # twice what four characters a token says
    body = {"model": "m", "messages": agent_loop(8, 1200), "max_tokens": 4096}  # near the line
    plan = await make("auto", exact=exact).plan(body)
    assert len(exact.asked) >= 2 and plan.counted_by == Counting.UPSTREAM and plan.result.changed
    assert plan.sent_tokens == await exact.count({"messages": plan.result.messages})
    assert plan.sent_tokens <= plan.budget.limit
    assert plan.max_tokens == WINDOW - plan.sent_tokens, "the reply limit by the server's count"
    again = await make("auto", exact=FakeTokenize(0.5)).plan(body)
    assert again.result.messages == plan.result.messages and again.factor == plan.factor


async def test_the_window_the_upstream_reports_is_the_one_planned_for() -> None:
    settings = Settings(_env_file=None, window="auto", tokenizer="chars4")  # type: ignore[call-arg]
    planner = Planner(settings, detector=FakeDetector(4096))  # type: ignore[arg-type]
    plan = await planner.plan({"model": "m", "messages": agent_loop(1, 10)})
    assert plan.window.window == 4096 and plan.window.stops_at_end  # llama.cpp ends a reply at the window


async def test_the_reported_prompt_size_calibrates_the_next_plans() -> None:
    planner = make("estimate")
    body = {"model": "m", "messages": agent_loop(3, 1000)}
    first = await planner.plan(body)
    assert planner.read_report(first, int(first.result.tokens_after * 1.5)) is None
    second = await planner.plan(body)
    assert second.factor >= 1.45 and second.result.tokens_before > first.result.tokens_before


async def test_a_silent_cut_lowers_the_window_for_the_next_plans() -> None:
    """Ollama (it cuts silently) read about 600 tokens of three prompts whose sizes differ by a third:
    counts pinned while the size sent moves, which no tokenizer's difference makes."""
    planner = make(reply_reserve=256, upstream_kind="ollama")
    body = {"model": "m", "messages": agent_loop(3, 1500)}  # ~1,150 tokens: under the line (1,638)
    first = await planner.plan(body)
    assert not first.result.changed and first.result.tokens_after > 1100
    assert planner.read_report(first, 600) is None, "one count far under: a tokenizer may do that"
    smaller = await planner.plan({"model": "m", "messages": agent_loop(3, 1000)})
    assert planner.read_report(smaller, 610) is None, "two: a coincidence of two kinds of text may"
    between = await planner.plan({"model": "m", "messages": agent_loop(3, 1200)})
    truncation = planner.read_report(between, 605)
    assert truncation is not None and truncation.window == 1024
    again = await planner.plan(body)
    assert again.window.window == 1024 and again.result.changed


async def test_an_honest_server_never_shrinks_the_window() -> None:
    """A server that refuses what does not fit (vLLM, OpenAI's API) reports what it read: counts far
    under the proxy's, pinned or not, are its tokenizer's, never a cut."""
    planner = make(reply_reserve=256)
    for results in (3, 2, 3, 2):
        plan = await planner.plan({"model": "m", "messages": agent_loop(results, 1500)})
        assert planner.read_report(plan, 600) is None
    assert (await planner.plan({"model": "m", "messages": agent_loop(3, 1500)})).window.window == WINDOW


async def test_a_retry_after_the_upstreams_overflow_is_compacted_harder() -> None:
    planner = make()
    body = {"model": "m", "messages": agent_loop(12, 1200)}
    plan = await planner.plan(body)
    harder = planner.harder(body, plan, Overflow(prompt_tokens=plan.result.tokens_after * 2, window=None))
    assert harder is not None and harder.factor > plan.factor * 1.9
    assert harder.result.tokens_after / harder.factor < plan.result.tokens_after / plan.factor
    nothing = planner.harder(
        {"model": "m", "messages": paste(400)},
        await planner.plan({"model": "m", "messages": paste(400)}),
        Overflow(None, None),
    )
    assert nothing is None, "a request compaction cannot change is not retried"


@pytest.mark.parametrize(("text", "measured"), [("word " * 6_000, False), ("汉字" * 6_000, True)])
async def test_a_text_that_cannot_reach_the_line_by_its_bytes_needs_no_measured_margin(
    text: str, measured: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No tokenizer spends more than a token per UTF-8 byte: 30,000 ASCII characters cannot reach
    half of an 80,000-token line, 12,000 Chinese ones (36,000 bytes, bounded as 48,000) might."""
    planner = make("estimate", window=100_000)
    margins = planner.drafter.margins
    asked: list[int] = []
    measure = margins.margin

    def measured_margin(messages: Any, written: Any = None) -> float:
        asked.append(len(messages))
        return measure(messages, written)

    monkeypatch.setattr(margins, "margin", measured_margin)
    plan = await planner.plan({"model": "m", "messages": [{"role": "user", "content": text}]})
    assert not plan.result.changed
    assert bool(asked) is measured
    assert (plan.margin == MIN_MARGIN) is not measured


def test_the_byte_bound_is_never_below_the_texts_own_bytes() -> None:
    texts = [
        "plain ASCII",
        "é" * 7,
        "汉字",
        "🙂" * 3,
        "\udc80",  # a lone surrogate, as the standard library parses one
        "mixed é 汉 🙂",
    ]
    for text in texts:
        own = len(text.encode("utf-8", "surrogatepass"))
        assert own <= text_bytes([{"role": "user", "content": text}], 10**9) <= 4 * len(text)
    many = [{"role": "user", "content": "ten bytes."}] * 2_000
    assert text_bytes(many, 50) == 60, "read only until past the cap"


@pytest.mark.parametrize("spec", list(Counting))
def test_every_counting_mode_is_a_setting(spec: Counting) -> None:
    settings = Settings(_env_file=None, tokenizer=spec.value)  # type: ignore[call-arg]
    assert settings.tokenizer == spec
