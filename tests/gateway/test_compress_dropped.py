"""What becomes of the dropped messages on `/v1/compress` (`proxy/gateway/removal.py`): a stub in
each one's row by default (LiteLLM's guardrail refuses another count), one marker for each dropped
run (`merge`) or nothing (`remove`) for a caller that takes the list back whole (Kong, Portkey, a
plain HTTP caller), asked in the body, a header or the path. Without a stub a message, the fit holds
for histories of hundreds to thousands of messages at 4k-128k, in Chat Completions and Anthropic
bodies, where one stub a message passes a small window's line by itself."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.support.compress_calls import calls_answered_anthropic, calls_answered_chat, compress, never_empty
from tests.support.fakes import RecordingUpstream, proxy_client
from tests.support.format_chats import as_anthropic
from tests.support.long_histories import long_history

Message = dict[str, Any]
MARKER = "[Earlier conversation dropped"  # the engine's words for a dropped run


def body_of(chat: list[Message], window: int, *, anthropic: bool, **fields: Any) -> dict[str, Any]:
    if anthropic:
        system, messages = as_anthropic(chat)
        return {"model": "m", "system": system, "messages": messages, "window": window, **fields}
    return {"model": "m", "messages": chat, "window": window, **fields}


def check_whole_fit(body: dict[str, Any], out: dict[str, Any], dropped: str) -> None:
    rows, sent = out["messages"], body["messages"]
    assert out["fits"] is True and out["tokens_after"] <= out["limit"], (len(sent), out["tokens_after"])
    assert out["window"] == body["window"] and out["dropped"] == dropped
    assert rows[0] == sent[0] and rows[-1] == sent[-1]  # the first request (or system), the latest one
    (calls_answered_anthropic if "system" in body else calls_answered_chat)(rows)
    never_empty(rows)
    markers = [r for r in rows if MARKER in str(r["content"])]
    assert (markers != []) == (dropped == "merge" and len(rows) < len(sent))


@pytest.mark.parametrize("anthropic", [False, True], ids=["chat", "anthropic"])
@pytest.mark.parametrize("dropped", ["merge", "remove"])
async def test_a_history_far_past_the_stub_floor_comes_back_fitting(dropped: str, anthropic: bool) -> None:
    """700 messages at 4,096 tokens: a stub a message is over the line by itself (`fits: false`,
    the floor), one marker a run or none fits."""
    chat = long_history(700, steps=6, seed=3)
    floor = (await compress(body_of(chat, 4096, anthropic=anthropic))).json()
    assert floor["fits"] is False and len(floor["messages"]) == len(
        body_of(chat, 4096, anthropic=anthropic)["messages"]
    )
    body = body_of(chat, 4096, anthropic=anthropic, dropped=dropped)
    first = await compress(body)
    out = first.json()
    check_whole_fit(body, out, dropped)
    assert len(out["messages"]) < len(body["messages"]) // 10
    assert "dropped_messages" in " ".join(out["transforms_applied"])
    assert (await compress(body)).content == first.content  # byte-stable


@pytest.mark.parametrize(
    ("path", "headers"),
    [("/remove/v1/compress", {}), ("/v1/compress", {"x-compaction-dropped": "remove"})],
    ids=["path", "header"],
)
async def test_a_url_or_a_header_asks_as_the_field_does(path: str, headers: dict[str, str]) -> None:
    """Kong's `compressor_url` and Portkey's proxy URL are all those callers can set: the path asks."""
    chat = long_history(300, steps=4, seed=5)
    async with proxy_client(RecordingUpstream()) as client:
        by_field = await client.post(
            "/v1/compress", json=body_of(chat, 4096, anthropic=False, dropped="remove")
        )
        asked = await client.post(path, json=body_of(chat, 4096, anthropic=False), headers=headers)
        overridden = await client.post(
            path, json=body_of(chat, 4096, anthropic=False, dropped="stub"), headers=headers
        )
    assert asked.status_code == 200 and asked.content == by_field.content
    assert len(asked.json()["messages"]) < len(chat) // 10 and asked.json()["dropped"] == "remove"
    assert len(overridden.json()["messages"]) == len(chat)  # the body's own field wins


async def test_an_unknown_mode_is_a_400_naming_it() -> None:
    response = await compress(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], "dropped": "drop"}
    )
    assert response.status_code == 400 and response.json()["error"]["param"] == "dropped"


async def test_merged_markers_name_the_id_of_their_run_and_removed_runs_keep_none() -> None:
    """With originals kept, a merged run's marker names its id (in `ccr_hashes`); a removed run has
    nowhere to name one, so its original is not kept."""
    chat = long_history(200, steps=4, seed=7)
    merged = (await compress(body_of(chat, 4096, anthropic=False, dropped="merge"), retrieve=True)).json()
    removed = (await compress(body_of(chat, 4096, anthropic=False, dropped="remove"), retrieve=True)).json()
    named = [
        h
        for h in merged["ccr_hashes"]
        if any(h in str(r["content"]) and MARKER in str(r["content"]) for r in merged["messages"])
    ]
    assert named and set(removed["ccr_hashes"]) < set(merged["ccr_hashes"])
    assert not any(MARKER in str(r["content"]) for r in removed["messages"])


@pytest.mark.slow
@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(
    messages=st.integers(200, 3000),
    steps=st.sampled_from([0, 2, 6, 40]),
    seed=st.integers(0, 10_000),
    window=st.sampled_from([4096, 8192, 32768, 131072]),
    anthropic=st.booleans(),
    dropped=st.sampled_from(["merge", "remove"]),
)
@example(messages=3000, steps=6, seed=0, window=131072, anthropic=True, dropped="merge")
@example(messages=2000, steps=40, seed=1, window=4096, anthropic=False, dropped="remove")
async def test_any_long_history_comes_back_fitting(
    messages: int, steps: int, seed: int, window: int, anthropic: bool, dropped: str
) -> None:
    """Whatever its length (hundreds to thousands of messages: plain turns, turns of tool calls,
    one long agent loop), in either body, at any window from 4k to 128k: fitting, paired, never
    empty, the first and latest requests as they came, the same bytes again."""
    chat = long_history(messages, steps=steps, seed=seed)
    body = body_of(chat, window, anthropic=anthropic, dropped=dropped)
    first = await compress(body)
    out = first.json()
    if out["tokens_before"] <= out["limit"]:  # under the line: nothing to do, as it came
        assert out["messages"] == body["messages"]
    else:
        check_whole_fit(body, out, dropped)
    assert (await compress(body)).content == first.content
