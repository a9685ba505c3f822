"""No false refusals for an unnamed model (issues 24 and 34): with no count from the upstream (OpenAI's
API, Ollama: no `/tokenize`) and no vocabulary in the model's name, a request is counted with the four
bundled vocabularies (cl100k_base, o200k_base, Qwen2.5, Llama 3): compacted to fit the heaviest,
forwarded when it fits any of them (the model may use that one), refused only when even the lightest
puts it over the window. A guess never refuses: not even a calibration learned from the upstream's
earlier reports of other text.

The ruler and the sized pastes are `tests/support/pastes.py` (the heaviest real count, as in
`benchmarks/counting/bench_margin.py`).
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from proxy.counting.modes import Counting
from proxy.counting.tokenizers import load_text_counter
from proxy.planning.planner import Planner
from proxy.settings import Settings
from tests.support.kinds import text_of_kind
from tests.support.pastes import RESERVE, WINDOW, lightest_size, paste, real_size
from tests.support.upstreams.openai_counting import proxy_and_openai


def planner() -> Planner:
    return Planner(Settings(_env_file=None, window=WINDOW, upstream_kind="openai"))  # type: ignore[call-arg]


# The requests `python -m benchmarks.counting.bench_margin` found refused at 16efdaf-957c7e4 though they fit
# the heaviest vocabulary with the reply's room (80-90% of the window by it): 11 of 408.
BAND = [("Chinese", 0.85), ("Japanese", 0.8), ("Japanese", 0.85), ("code", 0.85), ("parse tree", 0.9)]


@pytest.mark.parametrize(("kind", "fraction"), BAND)
async def test_what_fits_every_vocabulary_with_room_for_the_reply_is_not_refused(
    kind: str, fraction: float
) -> None:
    messages = paste(kind, fraction)
    assert real_size(messages) + RESERVE <= WINDOW
    plan = await planner().plan({"model": "m", "messages": messages})
    assert not plan.result.over_window, f"{kind} at {fraction:.0%} of the window was refused"
    assert plan.counted_by == Counting.HEAVIEST
    assert real_size(plan.result.messages) <= WINDOW


@pytest.mark.parametrize(("kind", "fraction"), [("Chinese", 1.1), ("Japanese", 1.1), ("parse tree", 1.06)])
async def test_what_only_the_heaviest_vocabulary_puts_over_the_window_is_forwarded(
    kind: str, fraction: float
) -> None:
    """Over the window by the heaviest, within it by a lighter one: forwarded as it came, counted by
    the heaviest vocabulary it fits, whatever the planner planned before (the same decision)."""
    messages = paste(kind, fraction)
    assert real_size(messages) > WINDOW >= lightest_size(messages)
    fresh = await planner().plan({"model": "m", "messages": messages})
    assert not fresh.result.over_window and fresh.guessed and fresh.result.messages == messages
    used = planner()
    await used.plan({"model": "m", "messages": paste("code", 0.9)})
    again = await used.plan({"model": "m", "messages": messages})
    assert again.result.messages == fresh.result.messages and not again.result.over_window


@pytest.mark.parametrize(("kind", "fraction"), [("Chinese", 2.0), ("code", 1.3), ("parse tree", 1.5)])
async def test_what_even_the_lightest_vocabulary_puts_over_the_window_is_refused(
    kind: str, fraction: float
) -> None:
    messages = paste(kind, fraction)
    assert lightest_size(messages) > WINDOW
    plan = await planner().plan({"model": "m", "messages": messages})
    assert plan.result.over_window


async def test_the_heaviest_count_is_a_setting_of_its_own() -> None:
    """`COMPACT_TOKENIZER=heaviest`: the four, never the upstream's count."""
    settings = Settings(_env_file=None, window=WINDOW, tokenizer="heaviest", upstream_kind="openai")  # type: ignore[call-arg]
    messages = paste("Chinese", 0.85)
    plan = await Planner(settings).plan({"model": "m", "messages": messages})
    assert plan.counted_by == Counting.HEAVIEST
    assert (
        real_size(messages) <= plan.result.tokens_before <= 1.02 * real_size(messages) + 3
    )  # the template's


async def test_reports_heavier_than_the_four_never_refuse_nor_move_a_plan() -> None:
    """The upstream said this model spends twice what the heaviest vocabulary counts (a vocabulary
    heavier than all four, as Llama 2's on Chinese): that says nothing sure of other text, so the
    next plans are the ones a fresh process makes (the same request, the same decision), and a paste
    that fits the four is not refused; the server judges it (the proxy retries by the count its
    error gives)."""
    p = planner()
    history = [{"role": "user", "content": text_of_kind("code", 10_000)}]
    first = await p.plan({"model": "m", "messages": history})
    p.read_report(first, 2 * first.result.tokens_after)
    again = await p.plan({"model": "m", "messages": history})
    assert again.result == first.result and again.factor == first.factor
    plan = await p.plan({"model": "m", "messages": paste("Chinese", 0.85)})
    assert not plan.result.over_window


async def test_what_the_reports_rule_out_lightens_only_the_text_it_counts_very_differently() -> None:
    """Qwen2.5 counts digits one a token, twice what a cl100k server reports: once the reports rule it
    out, number-heavy text is counted by the heaviest of the rest (the window used, issue 34 row 4),
    and prose exactly as before (its plans do not move, row 5)."""
    p = planner()
    table = "\n".join(f"{i:06d},{i * 7919 % 1000003:07d},{i * 31 % 99991:05d}" for i in range(300))
    numbers = {"model": "m", "messages": [{"role": "user", "content": table}]}
    prose = {"model": "m", "messages": [{"role": "user", "content": text_of_kind("code", 20_000)}]}
    before = (await p.plan(numbers), await p.plan(prose))
    cl100k = load_text_counter("cl100k_base")
    p.read_report(before[0], cl100k(table) + 8)
    after = (await p.plan(numbers), await p.plan(prose))
    assert after[0].counted_by == "heaviest-but:qwen2.5"
    assert after[0].result.tokens_before < 0.7 * before[0].result.tokens_before
    assert after[1].result.tokens_before == before[1].result.tokens_before


async def test_to_an_upstream_that_refuses_overflows_what_no_exact_count_puts_over_goes_for_its_verdict() -> (
    None
):
    """Anthropic's API (`COMPACT_UPSTREAM_REJECTS_OVERFLOW=auto`): a Chinese paste 10% over the window
    by cl100k, which a lighter vocabulary (Qwen's: 0.6 of it) fits, is forwarded (as anywhere), and so
    is one even the lightest of the four puts over the window (as it came: only the server can say);
    set to false, the proxy refuses the second."""
    settings = {"window": WINDOW, "upstream_url": "https://api.anthropic.com", "upstream_kind": "anthropic"}
    rejecting = Planner(Settings(_env_file=None, **settings))  # type: ignore[arg-type]
    over = paste("Chinese", 1.1)
    plan = await rejecting.plan({"model": "claude-sonnet-4-5", "messages": over})
    assert not plan.result.over_window and plan.result.messages == over
    far = paste("Chinese", 2.0)
    assert lightest_size(far) > WINDOW
    plan = await rejecting.plan({"model": "m", "messages": far})
    assert not plan.result.over_window and plan.result.overflow and plan.result.messages == far
    cutting = Planner(Settings(_env_file=None, upstream_rejects_overflow=False, **settings))  # type: ignore[arg-type]
    assert not (await cutting.plan({"model": "m", "messages": over})).result.over_window
    assert (await cutting.plan({"model": "m", "messages": far})).result.over_window


def proxy_and_upstream(counter: str, **env: str) -> Any:
    return proxy_and_openai(counter, WINDOW, **env)


def chat(base: str, messages: list[dict[str, Any]]) -> httpx.Response:
    return httpx.post(f"{base}/v1/chat/completions", json={"model": "m", "messages": messages}, timeout=60)


@pytest.mark.process
def test_the_real_process_forwards_a_japanese_paste_that_fits_and_refuses_one_that_does_not() -> None:
    """A local server without `/tokenize` (not known to refuse overflows): counted with the four; what
    even the lightest puts over the window is refused by the proxy."""
    fits, over = paste("Japanese", 0.85), paste("Japanese", 2.0)
    assert lightest_size(over) > WINDOW
    with proxy_and_upstream("cl100k_base") as (base, upstream):
        answer = chat(base, fits)
        assert answer.status_code == 200, answer.text
        assert [body["messages"] for body in upstream.bodies] == [fits], "forwarded as it came"
        refused = chat(base, over)
        assert refused.status_code == 400
        assert refused.json()["error"]["code"] == "context_length_exceeded"
        assert len(upstream.bodies) == 1, "refused by the proxy, not sent"


@pytest.mark.process
def test_the_real_process_lets_an_upstream_that_refuses_overflows_judge_the_uncertain_ones() -> None:
    """`COMPACT_UPSTREAM_REJECTS_OVERFLOW=true`: a Chinese paste 10% over the window by cl100k reaches
    a Qwen model (0.6 of that) and is answered; a Japanese one the same size reaches a cl100k model,
    which refuses it, and its refusal reaches the client as OpenAI worded it."""
    chinese, japanese = paste("Chinese", 1.1), paste("Japanese", 1.1)
    env = {"COMPACT_UPSTREAM_REJECTS_OVERFLOW": "true"}
    with proxy_and_upstream("qwen2.5", **env) as (base, upstream):
        answer = chat(base, chinese)
        assert answer.status_code == 200, answer.text
        assert [body["messages"] for body in upstream.bodies] == [chinese]
    with proxy_and_upstream("cl100k_base", **env) as (base, upstream):
        refused = chat(base, japanese)
        assert refused.status_code == 400, refused.text
        error = refused.json()["error"]
        assert error["code"] == "context_length_exceeded" and "resulted in" in error["message"]
        assert upstream.bodies and all(body["messages"] == japanese for body in upstream.bodies)
