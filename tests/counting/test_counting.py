"""Compacting at the right moment when four characters per token is far off: a Chinese chat and a
code-heavy chat against an upstream that counts with a real tokenizer (cl100k_base) and rejects
what does not fit, as a real server does."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.support.conversations import tool_call
from tests.support.corpus import GO_WORKER, JS_SERVER, PY_MODULE, ZH_BOOKSHOP, ZH_DATABASE, ZH_TEA
from tests.support.fakes import completion, proxy_client

tiktoken = pytest.importorskip("tiktoken")
WINDOW = 4000


class CountingUpstream:
    """Counts each prompt with cl100k_base, rejects it over the window, reports `usage` otherwise."""

    def __init__(self) -> None:
        from proxy.counting.tokenizers import load_text_counter

        self.count_text = load_text_counter("cl100k_base")
        self.seen: list[int] = []
        self.rejected = 0

    def real_tokens(self, messages: list[dict[str, Any]]) -> int:
        return sum(4 + self.count_text(json.dumps(m, ensure_ascii=False)) for m in messages)

    def __call__(self, request: httpx.Request) -> httpx.Response:
        messages = json.loads(request.content)["messages"]
        real = self.real_tokens(messages)
        if real > WINDOW:
            self.rejected += 1
            message = (
                f"This model's maximum context length is {WINDOW} tokens. "
                f"However, your messages resulted in {real} tokens."
            )
            error = {"message": message, "type": "invalid_request_error", "code": "context_length_exceeded"}
            return httpx.Response(400, json={"error": error})
        self.seen.append(real)
        return httpx.Response(200, json=completion("好的。", prompt_tokens=real))


def chinese_turns() -> list[str]:
    paragraphs = [
        p.strip() for text in (ZH_BOOKSHOP, ZH_DATABASE, ZH_TEA) for p in text.split("\n\n") if p.strip()
    ]
    return [f"第{i}个问题: {paragraphs[i % len(paragraphs)]}" for i in range(40)]


def code_turns() -> list[str]:
    sources = [PY_MODULE, JS_SERVER, GO_WORKER]
    return [sources[i % 3][(i * 700) % 3000 :][:1400] for i in range(40)]


async def replay(
    turns: list[str], *, as_tool_results: bool, **settings: Any
) -> tuple[CountingUpstream, list[tuple[int, bool]]]:
    """Send a growing chat turn by turn; return, per turn, the real size of the full history and
    whether the proxy compacted it."""
    upstream = CountingUpstream()
    history: list[dict[str, Any]] = [{"role": "system", "content": "你是一个乐于助人的助手。"}]
    log: list[tuple[int, bool]] = []
    async with proxy_client(upstream, window=WINDOW, **{"tokenizer": "estimate", **settings}) as client:
        for i, text in enumerate(turns):
            if as_tool_results:
                history.append({"role": "user", "content": f"Please review file {i}."})
                history.append(
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [tool_call(f"c{i}", "read_file", n=i)],
                    }
                )
                history.append({"role": "tool", "tool_call_id": f"c{i}", "content": text})
            else:
                history.append({"role": "user", "content": text})
            response = await client.post("/v1/chat/completions", json={"model": "m", "messages": history})
            assert response.status_code == 200, f"turn {i}: {response.text}"
            log.append((upstream.real_tokens(history), "x-compaction-tokens-before" in response.headers))
            history.append({"role": "assistant", "content": "好的。"})
    return upstream, log


@pytest.mark.parametrize(
    ("turns", "as_tool_results"), [(chinese_turns(), False), (code_turns(), True)], ids=["chinese", "code"]
)
async def test_compacts_at_the_right_moment(turns: list[str], as_tool_results: bool) -> None:
    upstream, log = await replay(turns, as_tool_results=as_tool_results)
    assert upstream.rejected == 0, "the proxy never relied on the upstream's rejection"
    compacted = [real for real, did in log if did]
    untouched = [real for real, did in log if not did]
    assert compacted, "the chat outgrew the window, so it must have been compacted"
    assert min(compacted) >= 0.6 * WINDOW, f"compacted too early: at {min(compacted)} real tokens"
    assert max(untouched) <= WINDOW, "a request over the window went out uncompacted"


async def test_the_pattern_estimate_alone_would_overflow() -> None:
    """The control: chars/4 without calibration sends a Chinese chat over the real window (the
    overflow retry then rescues it, which is the last line of defence, not the plan)."""
    upstream, _ = await replay(chinese_turns(), as_tool_results=False, tokenizer="chars4", calibrate=False)
    assert upstream.rejected > 0


async def test_a_local_tokenizer_counts_only_near_the_line() -> None:
    from tests.support.conversations import bike_shop_chat

    async with proxy_client(CountingUpstream(), window=WINDOW, tokenizer="cl100k_base") as client:
        short = (
            await client.post("/compact", json={"model": "m", "messages": bike_shop_chat(items=2)})
        ).json()
        long = (
            await client.post("/compact", json={"model": "m", "messages": bike_shop_chat(items=60)})
        ).json()
    assert short["report"]["counted_by"] == "estimate"
    assert long["report"]["counted_by"] == "cl100k_base"
    assert long["report"]["tokens_after"] <= long["report"]["limit"]


def test_every_backend_spec_is_a_valid_setting_and_nothing_else_is() -> None:
    from proxy.counting.tokenizers import BACKENDS, known_specs
    from proxy.settings import check_tokenizer

    for backend in BACKENDS:
        for spec in backend.specs or (backend.example,):
            assert check_tokenizer(spec) == spec
    with pytest.raises(ValueError) as refused:
        check_tokenizer("gpt2")
    assert all(spec in str(refused.value) for spec in known_specs())
    with pytest.raises(ValueError):
        check_tokenizer("hf:")
