"""Never over the window by any real count, never refused by a guess (issues 24 and 34).

The estimate undercounts some text: cl100k spends 1.4-1.6x its count on Chinese and Japanese, Qwen
1.3-1.5x on base64, every vocabulary 1.3x on punctuation-dense parse trees. So an unnamed model with
no count from the upstream is counted with the four vocabularies it may use (cl100k_base, o200k_base,
Qwen2.5, Llama 3): compacted until it fits the heaviest, forwarded if it fits any of them (that one
may be the model's), refused only when even the lightest puts it over the window. What reaches the
upstream is within the window by the lightest real count, and whatever the heaviest fits is sent
within it by the heaviest; a server with a heavier vocabulary refuses the rest itself (OpenAI's
`context_length_exceeded`), which reaches the client as the server worded it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from proxy.counting.tokenizers import load_text_counter
from proxy.counting.tokens import MESSAGE_OVERHEAD, REPLY_PRIMER, text_of
from proxy.planning.planner import Planner
from proxy.settings import Settings
from tests.support.kinds import KINDS, text_of_kind
from tests.support.pastes import lightest_size, paste_chat
from tests.support.upstreams.openai_counting import OpenAICounting, proxy_and_openai

WINDOW = 8192
SPECS = ("cl100k_base", "o200k_base", "qwen2.5", "llama3")


def rulers() -> list[Callable[[str], int]]:
    found = []
    for spec in SPECS:
        try:
            found.append(load_text_counter(spec))
        except RuntimeError:
            continue
    if len(found) < 2:
        pytest.skip("the real tokenizers are not installed (the tokenizers extra)")
    return found


def real_size(messages: list[dict[str, Any]]) -> int:
    """The heaviest real count of the messages, with the template's markers."""
    return max(
        sum(count(text_of(m.get("content"))) + MESSAGE_OVERHEAD for m in messages) + REPLY_PRIMER
        for count in rulers()
    )


@pytest.mark.parametrize("history", [False, True], ids=["paste", "paste-after-history"])
@pytest.mark.parametrize("kind", list(KINDS))
async def test_the_default_count_never_forwards_over_the_window(kind: str, history: bool) -> None:
    """Pastes from 50% to 130% of the window by the heaviest real count: each is forwarded within the
    window by some vocabulary (within it by the heaviest where that fits) or refused when none fits;
    and one well under it is never refused."""
    planner = Planner(Settings(_env_file=None, window=WINDOW, upstream_kind="openai"))
    per_char = real_size(paste_chat(kind, 20_000, history=False)) / 20_000
    for fraction in (0.5, 0.7, 0.85, 0.95, 1.05, 1.15, 1.3):
        messages = paste_chat(kind, int(fraction * WINDOW / per_char), history=history)
        plan = await planner.plan({"model": "m", "messages": messages})
        if plan.result.over_window:
            assert lightest_size(messages) > WINDOW, f"{kind} at {fraction:.0%} of the window was refused"
            continue
        sent = lightest_size(plan.result.messages)
        assert sent <= WINDOW, f"{kind} at {fraction:.0%}: forwarded at {sent} real tokens"
        if fraction <= 0.95:
            heaviest = real_size(plan.result.messages)
            assert heaviest <= WINDOW, f"{kind} at {fraction:.0%}: forwarded at {heaviest} by the heaviest"


def test_parse_tree_output_is_undercounted_by_the_estimate_and_covered_by_the_margin() -> None:
    """The English shape of issue 24: nested reprs and S-expressions, 1.3x the estimate."""
    from proxy.counting.estimator import estimate_text_tokens
    from proxy.counting.margin import MarginMeter

    text = text_of_kind("parse tree", 30_000)
    real = real_size([{"content": text}]) - MESSAGE_OVERHEAD - REPLY_PRIMER
    estimate = estimate_text_tokens(text)
    assert real > 1.2 * estimate
    assert estimate * (1 + MarginMeter().margin([{"content": text}])) >= real


# --- the real process: a Chinese paste at COMPACT_WINDOW=8192 -------------------------------------


@pytest.fixture
def proxy_and_upstream() -> Iterator[tuple[str, type[OpenAICounting]]]:
    with proxy_and_openai("cl100k_base", WINDOW) as running_pair:
        yield running_pair


@pytest.mark.process
@pytest.mark.parametrize("history", [False, True], ids=["paste", "paste-after-history"])
def test_a_chinese_paste_at_8k_is_compacted_or_refused_never_sent_over(
    proxy_and_upstream: tuple[str, type[OpenAICounting]], history: bool
) -> None:
    """Issue 24's repro: a Chinese paste the estimate puts under 8,192 tokens, which cl100k counts at
    about 1.4x that. What fits Qwen's vocabulary is the server's to judge (a guess never refuses):
    what it answers is under the window by its tokenizer, what it refuses reaches the client as it
    worded it; the proxy refuses only what every vocabulary puts over the window."""
    base, upstream = proxy_and_upstream
    for chars in (4500, 5500, 6500, 7500):
        messages = paste_chat("Chinese", chars, history=history)
        response = httpx.post(
            f"{base}/v1/chat/completions", json={"model": "m", "messages": messages}, timeout=30
        )
        assert response.status_code in (200, 400), response.text
        if response.status_code == 400:
            error = response.json()["error"]
            assert error["code"] == "context_length_exceeded"
            if "resulted in" not in error["message"]:  # the proxy's own refusal, not the server's
                assert lightest_size(messages) > WINDOW, error
    assert upstream.answered, "some of them fit and were answered"
    for body in upstream.answered:
        assert real_size(body["messages"]) <= WINDOW
