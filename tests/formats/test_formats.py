"""The wire-format adapters (``proxy.formats``): property tests of the write-back on random tool
chats in every format, and in-process checks of what each format adds to the shared path
(calibration from its usage fields, the overflow retry on its server's error, its error shape,
the dry run)."""

from __future__ import annotations

import asyncio
import copy
import gzip
import json
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.counting.tokens import RequestCounter, count_chars4
from proxy.engine.index import Policy
from proxy.engine.notes import DROPPED_PREFIX
from proxy.engine.plan import plan_chat
from proxy.formats import ANTHROPIC, CHAT, RESPONSES, WireFormat
from tests.support.conversations import agent_chat, tool_call
from tests.support.fakes import RecordingUpstream, proxy_client
from tests.support.format_chats import ANTHROPIC as ANTHROPIC_SHAPE
from tests.support.format_chats import RESPONSES as RESPONSES_SHAPE
from tests.support.format_chats import as_anthropic, as_responses, check_compacted, posted_to, window_of

Message = dict[str, Any]
# Keys the adapters read, and a few they do not.
KEYS = [
    "role",
    "content",
    "type",
    "call_id",
    "output",
    "name",
    "arguments",
    "input",
    "id",
    "tool_use_id",
    "tool_calls",
    "text",
    "system",
    "instructions",
    "max_output_tokens",
    "cache_control",
    "x",
]
COUNTER = RequestCounter(count_chars4)


@st.composite
def tool_chats(draw: st.DrawFn) -> list[Message]:
    """A system prompt, then exchanges: a request, maybe calls (one or two) with their results,
    an answer; ending on a request."""
    messages: list[Message] = [{"role": "system", "content": "You are a shop assistant."}]
    call = 0
    for n in range(draw(st.integers(1, 8))):
        messages.append({"role": "user", "content": f"Question {n}: " + "q" * draw(st.integers(0, 300))})
        for _ in range(draw(st.integers(0, 2))):
            calls = [tool_call(f"call_{call + k}", "lookup") for k in range(1, draw(st.integers(1, 2)) + 1)]
            call += len(calls)
            messages.append({"role": "assistant", "content": None, "tool_calls": calls})
            for c in calls:
                size = draw(st.integers(0, 3000))
                messages.append(
                    {"role": "tool", "tool_call_id": c["id"], "content": f"result {c['id']} " + "r" * size}
                )
        messages.append({"role": "assistant", "content": "Answer " + "a" * draw(st.integers(0, 300))})
    messages.append({"role": "user", "content": "And now?"})
    return messages


def in_format(name: str, chat: list[Message]) -> dict[str, Any]:
    extra = {"model": "m", "temperature": 0.3, "metadata": {"k": "v"}, "unknown_field": [1, {"x": None}]}
    if name == "responses":
        instructions, items = as_responses(chat)
        return {"instructions": instructions, "input": items, "max_output_tokens": 100, **extra}
    if name == "messages":
        system, messages = as_anthropic(chat)
        return {"system": system, "messages": messages, "max_tokens": 100, **extra}
    return {"messages": chat, "max_tokens": 100, **extra}


def compacted(
    wire: WireFormat, body: dict[str, Any], window: int, policy: Policy | None = None, keep: int = 2
) -> tuple[dict[str, Any], bool, bool]:
    conversation = wire.read(body, {})
    assert conversation is not None
    plan = plan_chat(
        conversation.request,
        conversation.request["messages"],
        window_of(window, keep),
        COUNTER,
        policy or Policy(),
    )
    if not plan.result.changed:
        return body, False, plan.result.overflow
    return wire.write(body, conversation, plan), True, plan.result.overflow


FORMATS = {"chat": CHAT, "responses": RESPONSES, "messages": ANTHROPIC}
LISTS = {"chat": "messages", "responses": "input", "messages": "messages"}


@pytest.mark.parametrize("name", sorted(FORMATS))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(chat=tool_chats(), window=st.integers(1500, 12000))
def test_the_write_back_keeps_every_invariant(name: str, chat: list[Message], window: int) -> None:
    wire, key = FORMATS[name], LISTS[name]
    body = in_format(name, chat)
    before = copy.deepcopy(body)
    out, changed, overflow = compacted(wire, body, window)
    assert body == before, "the original body is never mutated"
    if not changed:
        return
    assert {k: v for k, v in out.items() if k != key} == {k: v for k, v in body.items() if k != key}
    assert list(out) == list(body), "the fields keep their order"
    if name == "chat":
        return  # the engine's own tests cover the chat messages
    shape = RESPONSES_SHAPE if name == "responses" else ANTHROPIC_SHAPE
    check_compacted(shape, body[key], out[key])
    if name == "messages":  # the markers never outnumber the request's
        assert json.dumps(out).count("cache_control") <= json.dumps(body).count("cache_control")
    if not overflow:
        again, changed_again, _ = compacted(wire, out, window)
        assert not changed_again and again == out, "compacting a compacted request changes nothing"


def test_a_dropped_run_inside_a_split_user_message_keeps_the_results_whole() -> None:
    """An Anthropic user message with tool results and text is two neutral messages; a run that
    starts at its text leaves the results (answering the call before, kept: its tool is protected)
    in place, the marker after them."""
    big = "x" * 4000
    body = {
        "model": "m",
        "max_tokens": 10,
        "messages": [
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "ok"},
                    {"type": "text", "text": "second"},
                ],
            },
            {"role": "assistant", "content": "answer " + big},
            {"role": "user", "content": "third"},
            {"role": "assistant", "content": "a3"},
            {"role": "user", "content": "fourth"},
        ],
    }
    out, changed, _ = compacted(ANTHROPIC, body, 1000, Policy(protected_tools=("f",)), keep=1)
    assert changed
    messages = out["messages"]
    assert messages[2] == {"role": "user", "content": [body["messages"][2]["content"][0]]}
    assert messages[3]["content"].startswith(DROPPED_PREFIX)
    assert messages[4:] == body["messages"][4:]


def test_custom_tool_calls_pair_with_their_outputs_and_reasoning_stays_with_them() -> None:
    big = "y" * 5000
    body: dict[str, Any] = {
        "model": "m",
        "input": [
            {"role": "user", "content": "first"},
            {"type": "reasoning", "id": "rs_1", "summary": []},
            {"type": "custom_tool_call", "call_id": "c1", "name": "patch", "input": "*** Begin Patch"},
            {"type": "custom_tool_call_output", "call_id": "c1", "output": big},
            {"type": "message", "role": "assistant", "content": "done"},
            {"role": "user", "content": "second"},
            {"type": "computer_call", "call_id": "c2", "action": {"type": "screenshot"}},
            {
                "type": "computer_call_output",
                "call_id": "c2",
                "output": {"type": "computer_screenshot", "image_url": big},
            },
            {"role": "user", "content": "third"},
            {"role": "user", "content": "fourth"},
        ],
    }
    conversation = RESPONSES.read(body, {})
    assert conversation is not None
    roles = [m["role"] for m in conversation.request["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant", "user", "assistant", "tool", "user", "user"]
    assert conversation.request["messages"][1]["tool_calls"][0]["id"] == "c1"
    out, changed, _ = compacted(RESPONSES, body, 2000)
    assert changed
    noted = [i for i in out["input"] if i.get("type") == "custom_tool_call_output"]
    assert noted and noted[0]["output"].startswith("[Truncated")
    screenshot = [i for i in out["input"] if i.get("type") == "computer_call_output"]
    assert screenshot == [body["input"][7]], "a screenshot is never noted"


@pytest.mark.parametrize(
    ("wire", "body"),
    [
        (RESPONSES, {"input": [{"role": "user", "content": "x"}], "previous_response_id": "resp_1"}),
        (RESPONSES, {"prompt": {"id": "pmpt_1"}}),
    ],
)
def test_requests_the_server_compacts_are_left_alone(wire: WireFormat, body: dict[str, Any]) -> None:
    assert wire.read(body, {}) is None


def test_each_format_reads_its_usage() -> None:
    assert (
        RESPONSES.reported_prompt_tokens(
            b'"usage":{"input_tokens":812,"input_tokens_details":{"cached_tokens":0}}'
        )
        == 812
    )
    tail = b'"usage":{"input_tokens":5,"cache_creation_input_tokens":100,"cache_read_input_tokens":700,"output_tokens":9}}'
    assert (
        ANTHROPIC.reported_prompt_tokens(b'event: message_delta\ndata: {"type":"message_delta",' + tail)
        == 805
    )
    assert ANTHROPIC.reported_prompt_tokens(b'"usage":{"output_tokens":9}}') is None
    assert CHAT.reported_prompt_tokens(b'"usage":{"prompt_tokens":77}') == 77


# --- in-process: the shared path with each format ----------------------------------------------


def anthropic_answer(input_tokens: int) -> httpx.Response:
    usage = {"input_tokens": input_tokens, "output_tokens": 3}
    content = [{"type": "text", "text": "ok"}]
    return httpx.Response(
        200, json={"type": "message", "role": "assistant", "content": content, "usage": usage}
    )


async def test_an_anthropic_overflow_is_retried_harder() -> None:
    answers = iter(
        [
            httpx.Response(
                400,
                json={
                    "type": "error",
                    "error": {
                        "type": "invalid_request_error",
                        "message": "prompt is too long: 9000 tokens > 4000 maximum",
                    },
                },
            ),
            anthropic_answer(3000),
        ]
    )
    upstream = RecordingUpstream(respond=lambda request: next(answers))
    system, messages = as_anthropic(tool_chat_for_app())
    body = {"model": "m", "max_tokens": 50, "system": system, "messages": messages}
    async with proxy_client(upstream, window=8000) as client:
        response = await client.post("/v1/messages", json=body)
        metrics = (await client.get("/metrics")).text
    assert response.status_code == 200
    first, second = (json.loads(r.content) for r in upstream.requests)
    assert len(json.dumps(second)) < len(json.dumps(first))
    assert 'compacting_proxy_overflow_retries_total{outcome="retried"} 1.0' in metrics
    assert all(str(r.url) == "http://upstream.test/v1/messages" for r in upstream.requests)


def tool_chat_for_app() -> list[Message]:
    from tests.support.upstreams.chats import support_chat

    return support_chat(10, result_items=20)


async def test_calibration_learns_from_each_formats_usage() -> None:
    upstream = RecordingUpstream(respond=lambda request: anthropic_answer(2000))
    async with proxy_client(upstream, window=100000) as client:
        app = client._transport.app  # type: ignore[attr-defined]
        body = {"model": "m", "max_tokens": 50, "messages": [{"role": "user", "content": "word " * 800}]}
        assert (await client.post("/v1/messages", json=body)).status_code == 200
        factor = app.state.planner.calibrator.factor("m")
    assert factor > 1.5, "2000 reported tokens for about 1000 estimated"


async def test_anthropic_routes_answer_errors_in_anthropics_shape() -> None:
    async with proxy_client(RecordingUpstream(), max_body_bytes=100) as client:
        too_large = await client.post("/v1/messages", content=b"{" + b" " * 200 + b"}")
        invalid = await client.post(
            "/v1/messages/count_tokens", content=b"x" * 10, headers={"content-length": "1000"}
        )
        chat = await client.post("/v1/chat/completions", content=b"{" + b" " * 200 + b"}")
    assert too_large.status_code == 413
    assert too_large.json() == {
        "type": "error",
        "error": {"type": "request_too_large", "message": too_large.json()["error"]["message"]},
    }
    assert invalid.json()["type"] == "error"
    assert chat.json()["error"]["code"] == "request_too_large"


@pytest.mark.parametrize("how", ["field", "path"])
async def test_the_dry_run_takes_every_format(how: str) -> None:
    system, messages = as_anthropic(tool_chat_for_app())
    body: dict[str, Any] = {"model": "m", "max_tokens": 50, "system": system, "messages": messages}
    async with proxy_client(RecordingUpstream(), window=4000) as client:
        if how == "field":
            response = await client.post("/compact", json={**body, "format": "messages"})
        else:
            response = await client.post("/compact/v1/messages", json=body)
    answer = response.json()
    assert answer["report"]["compacted"] is True
    assert answer["body"]["system"] == system and "format" not in answer["body"]
    check_compacted(ANTHROPIC_SHAPE, messages, answer["body"]["messages"])


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=300),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(KEYS), inner, max_size=5),
    max_leaves=30,
)


@pytest.mark.slow  # a long property run: seconds, not milliseconds
@pytest.mark.parametrize("path", ["/v1/responses", "/v1/messages", "/openai/deployments/d/chat/completions"])
@settings(max_examples=50, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    items=st.lists(json_values, max_size=12),
    extra=st.dictionaries(st.sampled_from(KEYS), json_values, max_size=3),
)
def test_no_body_of_any_shape_makes_a_server_error(
    path: str, items: list[Any], extra: dict[str, Any]
) -> None:
    key = "input" if path == "/v1/responses" else "messages"
    body = {"model": "m", "max_tokens": 20, **extra, key: items}

    async def post() -> httpx.Response:
        async with proxy_client(
            RecordingUpstream(respond=lambda r: anthropic_answer(5)), window=300
        ) as client:
            return await client.post(path, json=body)

    response = asyncio.run(post())
    assert response.status_code < 500, response.text
    if response.status_code >= 400:
        payload = response.json()
        error = payload["error"]
        assert isinstance(error["message"], str) and error["message"]
        if path == "/v1/messages":
            assert payload["type"] == "error"


@pytest.mark.parametrize(
    ("path", "upstream_url"),
    [
        (
            "/openai/deployments/d/embeddings?api-version=1",
            "http://upstream.test/openai/deployments/d/embeddings?api-version=1",
        ),
        (
            "/deployments/d/embeddings?api-version=1",
            "http://upstream.test/v1/deployments/d/embeddings?api-version=1",
        ),
    ],
)
async def test_azures_other_routes_are_forwarded_as_they_are(path: str, upstream_url: str) -> None:
    upstream = RecordingUpstream(respond=lambda request: httpx.Response(200, json={"data": []}))
    async with proxy_client(upstream) as client:
        response = await client.post(path, content=b'{"input": "hi"}')
    assert response.status_code == 200
    assert str(upstream.last.url) == upstream_url and upstream.last.content == b'{"input": "hi"}'


@pytest.mark.parametrize("path", ["/v1/responses", "/v1/messages"])
async def test_a_gzipped_history_in_any_format_is_decoded_compacted_and_sent_plain(path: str) -> None:
    body = posted_to(path, tool_chat_for_app(), max_tokens=50)
    upstream = RecordingUpstream(respond=lambda request: anthropic_answer(10))
    headers = {"content-type": "application/json", "content-encoding": "gzip"}
    async with proxy_client(upstream, window=4000) as client:
        response = await client.post(path, content=gzip.compress(json.dumps(body).encode()), headers=headers)
    assert response.status_code == 200 and "x-compaction-tokens-after" in response.headers
    assert "content-encoding" not in upstream.last.headers
    sent = upstream.last_json()
    assert len(json.dumps(sent)) < len(json.dumps(body))


async def test_a_rejected_responses_request_names_its_own_reply_field() -> None:
    """The reply limit took the room (a 1,300-token prompt under a line of 1,100 it pushed down from
    1,600): lowering it is the remedy, named by the client's own field."""
    body = {"model": "m", "input": [{"role": "user", "content": "x" * 5_200}], "max_output_tokens": 900}
    async with proxy_client(
        RecordingUpstream(), window=2000, overflow="reject", clamp_max_tokens=False
    ) as client:
        response = await client.post("/v1/responses", json=body)
    assert response.status_code == 400
    assert "max_output_tokens=900" in response.json()["error"]["message"]


async def test_lowering_the_reply_limit_is_not_advised_when_it_would_not_help() -> None:
    body = {"model": "m", "input": [{"role": "user", "content": "x" * 20_000}], "max_output_tokens": 900}
    async with proxy_client(RecordingUpstream(), window=2000, overflow="reject") as client:
        response = await client.post("/v1/responses", json=body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert "max_output_tokens" not in error["message"] and error["param"] == "input[0]"


async def test_the_neutral_chat_request_holds_only_what_the_planner_reads() -> None:
    body = {
        "model": "gpt-4o",
        "messages": agent_chat(12, seed=3),
        "tools": [{"type": "function", "function": {"name": "get_order", "parameters": {}}}],
        "max_completion_tokens": 500,
        "logit_bias": {"1734": -100},
        "vendor_extension": {"cache": "ephemeral"},
        "stream_options": {"include_usage": True},
    }
    request = CHAT.read(body, {}).request
    assert set(request) == {"model", "messages", "tools", "max_completion_tokens"}
    assert request["messages"] is body["messages"]
    upstream = RecordingUpstream()
    async with proxy_client(upstream, window=3000) as client:
        response = await client.post("/v1/chat/completions", json=body)
    assert response.status_code == 200 and response.headers["x-compaction-dropped"] != "0"
    sent = json.loads(upstream.last.content)
    assert {k: v for k, v in sent.items() if k != "messages"} == {
        k: v for k, v in body.items() if k != "messages"
    }
