"""`POST /v1/compress` in Headroom's contract (`proxy/gateway/compress.py`), in-process over a
recording upstream that must never be called: the fit on Chat Completions and Anthropic bodies at
4k-128k (64k and 128k in the slow tier), one message out for each one in, pairing kept, the system prompt and latest request as
they came, the same bytes for the same input, bypass, audit, failing open, errors, metrics."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.support.compress_calls import compress, never_empty
from tests.support.conversations import agent_chat
from tests.support.fakes import RecordingUpstream, proxy_client
from tests.support.format_chats import as_anthropic

Message = dict[str, Any]
# The largest two take seconds each: in the slow tier, the rest in the fast one.
WINDOWS = (4096, 8192, 16384, 32768, *(pytest.param(w, marks=pytest.mark.slow) for w in (65536, 131072)))


def chat_over(window: int) -> list[Message]:
    """An agent's chat about twice `window` (the pattern's four characters a token), ending on a
    user request."""
    turns = 2
    while True:
        chat = agent_chat(turns, seed=turns, result_items=40)
        if len(json.dumps(chat)) // 4 > 2 * window:
            return [*chat, {"role": "user", "content": "So which orders are still open?"}]
        turns = turns * 3 // 2 + 1


def paired_chat(rows: list[Message]) -> None:
    """Every tool result answers a call of the assistant message before its run of results."""
    calls: set[str] = set()
    for row in rows:
        if row["role"] == "assistant":
            calls = {c["id"] for c in row.get("tool_calls") or ()}
        elif row["role"] == "tool":
            assert row["tool_call_id"] in calls, row


def paired_anthropic(rows: list[Message]) -> None:
    uses: set[str] = set()
    for row in rows:
        blocks = row["content"] if isinstance(row["content"], list) else []
        if row["role"] == "assistant":
            uses = {b["id"] for b in blocks if b.get("type") == "tool_use"}
        for block in blocks:
            if block.get("type") == "tool_result":
                assert block["tool_use_id"] in uses, row


@pytest.mark.parametrize("window", WINDOWS)
async def test_a_chat_completions_history_comes_back_fitting_row_for_row(window: int) -> None:
    chat = chat_over(window)
    response = await compress({"model": "m", "messages": chat, "window": window})
    assert response.status_code == 200
    out = response.json()
    rows = out["messages"]
    assert [r["role"] for r in rows] == [m["role"] for m in chat]
    assert rows[0] == chat[0] and rows[-1] == chat[-1]  # the system prompt, the latest request
    paired_chat(rows)
    never_empty(rows)
    assert out["window"] == window and out["fits"] is True
    assert out["tokens_after"] <= out["limit"] < out["tokens_before"]
    assert out["tokens_saved"] == out["tokens_before"] - out["tokens_after"]
    assert out["compression_ratio"] == round(out["tokens_after"] / out["tokens_before"], 4)
    assert out["ccr_hashes"] == []  # nothing kept: no id to redeem
    again = await compress({"model": "m", "messages": chat, "window": window})
    assert again.content == response.content


@pytest.mark.parametrize("window", WINDOWS)
async def test_an_anthropic_history_comes_back_fitting_block_for_block(window: int) -> None:
    system, messages = as_anthropic(chat_over(window))
    body = {"model": "claude", "system": system, "messages": messages, "window": window}
    response = await compress(body)
    assert response.status_code == 200
    out = response.json()
    rows = out["messages"]
    assert [r["role"] for r in rows] == [m["role"] for m in messages]
    assert rows[0] == messages[0] and rows[-1] == messages[-1]
    paired_anthropic(rows)
    never_empty(rows)
    assert out["fits"] is True and out["tokens_after"] <= out["limit"] < out["tokens_before"]
    assert "system" not in out  # counted, never returned
    assert (await compress(body)).content == response.content


async def test_the_window_comes_from_the_models_settings_and_a_target_caps_it() -> None:
    chat = chat_over(8192)
    out = (await compress({"model": "small", "messages": chat}, model_windows="small=8192")).json()
    assert out["window"] == 8192 and out["tokens_after"] <= out["limit"]
    capped = (await compress({"model": "small", "messages": chat, "target": 3000})).json()
    assert capped["tokens_after"] <= 3000 < out["tokens_after"]


async def test_results_a_gateway_sent_without_their_calls_are_cut_one_by_one() -> None:
    """LiteLLM's guardrail holds back the system prompt, every assistant message and the latest
    turn: the tool results arrive alone, and come back noted or stubbed, row for row."""
    chat = chat_over(4096)
    rows = [m for m in chat if m["role"] not in ("system", "assistant")][:-1]
    out = (await compress({"model": "m", "messages": rows, "window": 4096})).json()
    assert len(out["messages"]) == len(rows)
    assert [r.get("tool_call_id") for r in out["messages"]] == [r.get("tool_call_id") for r in rows]
    assert out["fits"] is True and out["tokens_after"] <= out["limit"] < out["tokens_before"]


async def test_bypass_returns_the_messages_untouched() -> None:
    chat = chat_over(4096)
    response = await compress({"model": "m", "messages": chat, "window": 4096}, {"x-headroom-bypass": "true"})
    assert response.json() == {
        "messages": chat,
        "tokens_before": 0,
        "tokens_after": 0,
        "tokens_saved": 0,
        "compression_ratio": 1.0,
        "transforms_applied": [],
        "ccr_hashes": [],
    }


@pytest.mark.parametrize("asked", ["header", "setting"])
async def test_audit_returns_them_untouched_with_what_would_be_cut(asked: str) -> None:
    chat = chat_over(4096)
    headers = {"x-compaction-audit": "true"} if asked == "header" else {}
    settings = {"audit": True} if asked == "setting" else {}
    out = (await compress({"model": "m", "messages": chat, "window": 4096}, headers, **settings)).json()
    assert out["messages"] == chat
    assert out["tokens_after"] == out["tokens_before"] and out["tokens_saved"] == 0
    would = out["audit"]
    assert would["tokens_after"] < out["tokens_before"] and would["dropped"] + would["noted"] > 0


async def test_an_internal_failure_fails_open_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    """A bug inside (forced here: the one way to make one) never costs the caller its request."""
    from proxy.gateway import compress as module

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a bug")

    monkeypatch.setattr(module, "write_rows", broken)
    chat = chat_over(4096)
    out = (await compress({"model": "m", "messages": chat, "window": 4096})).json()
    assert out["messages"] == chat and out["compression_skipped"] is True
    assert out["skip_reason"] == "internal_error: RuntimeError"


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"model": "m"}, "messages"),
        ({"model": 3, "messages": []}, "model"),
        ({"messages": [], "window": -1}, "window"),
        ({"messages": [], "format": "gemini"}, "format"),
        ({"messages": ["not a message"]}, "messages[0]"),
    ],
)
async def test_bad_input_is_a_400_in_the_contracts_shape(body: dict[str, Any], field: str) -> None:
    response = await compress(body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request" and error["param"] == field and error["message"]


async def test_not_json_is_a_400_too() -> None:
    upstream = RecordingUpstream()
    async with proxy_client(upstream) as client:
        response = await client.post(
            "/v1/compress", content=b"{not json", headers={"content-type": "application/json"}
        )
    assert response.status_code == 400 and response.json()["error"]["type"] == "invalid_request"


async def test_metrics_count_every_call_by_outcome() -> None:
    chat = chat_over(4096)
    upstream = RecordingUpstream()
    async with proxy_client(upstream) as client:
        await client.post("/v1/compress", json={"model": "m", "messages": chat, "window": 4096})
        await client.post("/v1/compress", json={"model": "m", "messages": chat[:2]})
        await client.post("/v1/compress", json={"messages": chat}, headers={"x-headroom-bypass": "true"})
        await client.post("/v1/compress", json={})
        text = (await client.get("/metrics")).text
    for outcome in ("compressed", "unchanged", "bypass", "invalid"):
        assert f'compacting_proxy_compress_calls_total{{outcome="{outcome}"}} 1.0' in text
    assert 'compacting_proxy_requests_total{route="compress",status="200"} 3.0' in text


async def test_the_live_page_shows_each_call() -> None:
    chat = chat_over(4096)
    async with proxy_client(RecordingUpstream()) as client:
        await client.post("/v1/compress", json={"model": "m", "messages": chat, "window": 4096})
        listed = (await client.get("/ui/conversations")).json()
    (conversation,) = listed["conversations"]
    assert conversation["format"] == "compress" and conversation["last"]["window"] == 4096
    assert conversation["last"]["after"] < conversation["last"]["before"]


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(
    turns=st.integers(1, 30),
    seed=st.integers(0, 10_000),
    window=st.sampled_from([4096, 8192, 16384]),
    anthropic=st.booleans(),
    subset=st.booleans(),
)
@example(turns=30, seed=0, window=4096, anthropic=True, subset=False)  # the floor's edge, whole
@example(turns=30, seed=1, window=4096, anthropic=False, subset=True)  # and as LiteLLM sends it
@example(turns=3, seed=0, window=4096, anthropic=False, subset=True)  # its last row a tool result
async def test_any_history_comes_back_row_for_row_paired_and_fitting(
    turns: int, seed: int, window: int, anthropic: bool, subset: bool
) -> None:
    """Whatever the history (whole, or only the rows LiteLLM sends), its size and the window, up to
    about 150 messages: past that, at 4,096, one stub a message passes the line by itself (Limits)."""
    chat = [*agent_chat(turns, seed=seed, result_items=30), {"role": "user", "content": "And now?"}]
    if subset:
        chat = [m for m in chat if m["role"] not in ("system", "assistant")][:-1] or chat[1:2]
    body: dict[str, Any] = {"model": "m", "messages": chat, "window": window}
    if anthropic and not subset:
        system, messages = as_anthropic(chat)
        body = {"model": "m", "system": system, "messages": messages, "window": window}
    first = await compress(body)
    out = first.json()
    rows, sent = out["messages"], body["messages"]
    assert [r["role"] for r in rows] == [m["role"] for m in sent]
    assert [r.get("tool_call_id") for r in rows] == [m.get("tool_call_id") for m in sent]
    if sent[-1]["role"] == "user" and not subset:
        assert rows[-1] == sent[-1]  # the latest request (in a subset, LiteLLM holds it back)
    if not subset:
        (paired_anthropic if "system" in body else paired_chat)(rows)
    never_empty(rows)
    assert out["fits"] is True and out["tokens_after"] <= out["limit"]
    assert (await compress(body)).content == first.content
