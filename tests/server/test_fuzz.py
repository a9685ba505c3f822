"""Fuzzing: random bodies at the endpoints, random histories at the engine, and the OpenAPI schema.

- The endpoints, in-process (`httpx.ASGITransport`, the upstream a `RecordingUpstream`): any body,
  however wrong (any JSON type for any field, deep nesting, integers past 64 bits, lone surrogates,
  invalid UTF-8, nothing at all), gets an answer that is never a 500; a 4xx always carries a JSON
  error in OpenAI's shape.
- The engine, `compact`: any list of message objects (unknown roles, missing fields, tool results
  without a call, calls without results, content of any type) is compacted without raising.
- schemathesis against the app's own OpenAPI schema, with its "not a server error" check.

Examples are bounded (`max_examples`) and no deadline is enforced (a noisy two-core machine).
"""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.counting.tokens import RequestCounter, count_chars4
from proxy.engine.compaction import compact
from proxy.engine.index import Budget, Policy
from proxy.server.app import create_app
from tests.support.fakes import RecordingUpstream, completion, make_settings

FUZZ = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)

# Any text: NUL, control characters and lone surrogates included.
any_text = st.text(st.characters(), max_size=40)
huge_int = st.one_of(st.integers(), st.integers(min_value=2**63, max_value=2**200), st.just(-(2**64)))
scalars = st.one_of(
    st.none(), st.booleans(), huge_int, st.floats(allow_nan=False, allow_infinity=False), any_text
)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(any_text, inner, max_size=4)),
    max_leaves=20,
)

ROLES = ["system", "developer", "user", "assistant", "tool", "function", "ipython", "", "USER"]
roles = st.one_of(st.sampled_from(ROLES), json_values)
content = st.one_of(
    any_text,
    st.text(max_size=3000),  # big enough to be worth truncating
    st.none(),
    huge_int,
    json_values,
    st.lists(
        st.one_of(
            st.fixed_dictionaries({"type": st.just("text"), "text": st.one_of(any_text, json_values)}),
            st.fixed_dictionaries(
                {"type": st.sampled_from(["image_url", "input_audio"]), "image_url": json_values}
            ),
            json_values,
        ),
        max_size=3,
    ),
)
call_ids = st.one_of(st.sampled_from(["call_1", "call_2", "call_3"]), json_values)
tool_calls = st.one_of(
    st.lists(
        st.fixed_dictionaries(
            {"id": call_ids},
            optional={
                "type": st.just("function"),
                "function": st.one_of(
                    st.fixed_dictionaries(
                        {"name": st.one_of(st.sampled_from(["get_order", "pay"]), json_values)},
                        optional={"arguments": st.one_of(any_text, json_values)},
                    ),
                    json_values,
                ),
            },
        ),
        max_size=3,
    ),
    json_values,
)


def message(strict_role: bool, any_role: bool = True) -> st.SearchStrategy[dict[str, Any]]:
    """A message object. `strict_role`: always a string role; else a role that may be missing
    and, with `any_role`, of any JSON type."""
    role = st.sampled_from(ROLES) if strict_role or not any_role else roles
    if not strict_role and not any_role:
        role = st.one_of(role, any_text)
    base = {"role": role} if strict_role else {}
    optional: dict[str, st.SearchStrategy[Any]] = {
        "content": content,
        "tool_calls": tool_calls,
        "tool_call_id": call_ids,
        "name": st.one_of(st.sampled_from(["get_order", "pay"]), json_values),
        "x_unknown": json_values,
    }
    if not strict_role:
        optional["role"] = role
    return st.fixed_dictionaries(base, optional=optional)


messages = st.one_of(
    st.lists(message(strict_role=True), max_size=12),
    st.lists(st.one_of(message(strict_role=False), json_values), max_size=8),
    json_values,
)
bodies = st.fixed_dictionaries(
    {},
    optional={
        "model": st.one_of(st.sampled_from(["m", "gpt-4o", ""]), json_values),
        "messages": messages,
        "stream": st.one_of(st.booleans(), json_values),
        "max_tokens": st.one_of(st.integers(-5, 10**6), huge_int, json_values),
        "max_completion_tokens": st.one_of(st.integers(0, 500), json_values),
        "tools": json_values,
        "stream_options": json_values,
        "options": json_values,
    },
).flatmap(
    lambda body: st.dictionaries(any_text, json_values, max_size=3).map(lambda extra: {**extra, **body})
)


def encode(value: Any) -> bytes:
    """JSON bytes as a client might send them: lone surrogates escaped, huge integers exact."""
    return json.dumps(value, ensure_ascii=True).encode()


def deep(depth: int) -> bytes:
    return b'{"model":"m","messages":' + b"[" * depth + b"]" * depth + b"}"


raw_bodies = st.one_of(
    bodies.map(encode),
    st.binary(max_size=200),  # empty, invalid UTF-8, anything
    bodies.map(encode).flatmap(lambda raw: st.integers(0, len(raw)).map(lambda cut: raw[:cut])),
    bodies.map(encode).map(lambda raw: raw.replace(b'"', b'"\xff', 1)),  # invalid UTF-8 inside a string
    st.sampled_from([b"", b"null", b"[]", b'"messages"', b"1e999999", b"NaN", deep(2000), deep(100_000)]),
)

ENDPOINTS = ["/v1/chat/completions", "/compact", "/v1/embeddings"]


@pytest.fixture(scope="module")
def small_window_client(runner: asyncio.Runner) -> Iterator[httpx.AsyncClient]:
    """The app with a window small enough that most fuzzed chats are compacted."""
    upstream = RecordingUpstream()
    app = create_app(
        make_settings(window=300, reply_reserve=16, keep_recent_turns=1, protected_tools=("pay",)),
        transport=httpx.MockTransport(upstream),
    )
    # A server error must come back as a 500 response to check, not as an exception in the test.
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    client = httpx.AsyncClient(transport=transport, base_url="http://proxy.test")
    yield client
    runner.run(client.aclose())


def check_answer(response: httpx.Response) -> None:
    assert response.status_code < 500, (response.status_code, response.text[:500])
    if response.status_code >= 400:
        assert response.headers["content-type"].startswith("application/json")
        error = response.json()["error"]
        assert set(error) >= {"message", "type", "param", "code"}, error
        assert isinstance(error["message"], str) and error["message"]
        assert isinstance(error["type"], str)


@pytest.mark.slow  # hundreds of examples: seconds, more than the fast tier's share
@FUZZ
@given(raw=raw_bodies, path=st.sampled_from(ENDPOINTS))
def test_no_body_makes_a_server_error(
    runner: asyncio.Runner, small_window_client: httpx.AsyncClient, raw: bytes, path: str
) -> None:
    response = runner.run(
        small_window_client.post(path, content=raw, headers={"content-type": "application/json"})
    )
    check_answer(response)


@pytest.mark.slow  # hundreds of examples: seconds, more than the fast tier's share
@FUZZ
@given(body=bodies)
def test_no_chat_makes_a_server_error(
    runner: asyncio.Runner, small_window_client: httpx.AsyncClient, body: dict[str, Any]
) -> None:
    for path in ("/v1/chat/completions", "/compact"):
        check_answer(runner.run(small_window_client.post(path, content=encode(body))))


def test_a_lone_surrogate_in_a_compacted_chat_is_not_a_server_error(
    runner: asyncio.Runner, small_window_client: httpx.AsyncClient
) -> None:
    """JSON may escape a lone surrogate (`"\\ud800"`); the standard library parses it, as the proxy
    does for bodies with integers past 64 bits, and neither orjson nor UTF-8 can write it back."""
    chat = [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "x" * 2000},
        {"role": "user", "content": "second"},
        {"role": "assistant", "content": "y" * 2000},
        {"role": "user", "content": "third \ud800"},  # kept: the recent part is never compacted
    ]
    raw = encode({"model": "m", "messages": chat, "seed": 2**70})
    for path in ("/v1/chat/completions", "/compact"):
        check_answer(runner.run(small_window_client.post(path, content=raw)))


# The engine.

# The engine's input is what `validated_messages` lets through: objects whose role, where there is
# one, is a string (any string). Everything else in a message may be anything.
engine_messages = st.lists(message(strict_role=False, any_role=False), max_size=16)


@pytest.mark.slow  # hundreds of examples: seconds, more than the fast tier's share
@FUZZ
@given(
    chat=engine_messages,
    limit=st.integers(0, 3000),
    target_share=st.floats(0, 1),
    fixed=st.integers(0, 500),
    keep=st.integers(1, 4),
    preview=st.integers(0, 200),
)
def test_compact_never_raises(
    chat: list[dict[str, Any]], limit: int, target_share: float, fixed: int, keep: int, preview: int
) -> None:
    counter = RequestCounter(count_chars4)
    budget = Budget(limit=limit, target=int(limit * target_share), fixed=fixed)
    policy = Policy(keep_recent_turns=keep, protected_tools=("pay", "get_*"), preview_chars=preview)
    result = compact(chat, budget, counter.message, policy)
    assert isinstance(result.messages, list)
    assert all(isinstance(m, dict) for m in result.messages)
    assert set(result.dropped).isdisjoint(result.truncated)
    assert all(0 <= i < len(chat) for i in (*result.dropped, *result.truncated))
    if not result.changed:
        assert result.messages == chat


# schemathesis, against the schema FastAPI publishes for the app.

try:
    import schemathesis
except ImportError:  # an optional test extra: the rest of this module runs without it
    schemathesis = None  # type: ignore[assignment]


def schema_app() -> Any:
    # An upstream that answers everything with a completion: the recording fake parses every
    # */chat/completions body as JSON, and a passthrough path may end that way with any body.
    upstream = RecordingUpstream(respond=lambda request: httpx.Response(200, json=completion()))
    return create_app(
        make_settings(window=300, reply_reserve=16),
        transport=httpx.MockTransport(upstream),
    )


# FastAPI publishes no request body for the chat routes (they read the raw request, so that a shape
# the upstream accepts is never refused by a model), which leaves schemathesis only paths, queries
# and headers to vary. The schema below adds what a chat body looks like, so it also generates
# valid chats (positive mode) and near-misses of every field (negative mode).
MESSAGE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["role"],
    "properties": {
        "role": {"type": "string", "enum": ["system", "developer", "user", "assistant", "tool"]},
        "content": {
            "anyOf": [{"type": "string"}, {"type": "null"}, {"type": "array", "items": {"type": "object"}}]
        },
        "tool_calls": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "id": {"type": "string"},
                    "type": {"type": "string", "enum": ["function"]},
                    "function": {
                        "type": "object",
                        "properties": {"name": {"type": "string"}, "arguments": {"type": "string"}},
                    },
                },
            },
        },
        "tool_call_id": {"type": "string"},
        "name": {"type": "string"},
    },
}
CHAT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["model", "messages"],
    "properties": {
        "model": {"type": "string"},
        "messages": {"type": "array", "items": MESSAGE_SCHEMA, "maxItems": 12},
        "stream": {"type": "boolean"},
        "max_tokens": {"type": "integer"},
        "tools": {"type": "array", "items": {"type": "object"}},
    },
}


def schema_with_bodies(app: Any) -> dict[str, Any]:
    spec: dict[str, Any] = copy.deepcopy(app.openapi())
    body = {"required": True, "content": {"application/json": {"schema": CHAT_SCHEMA}}}
    for path in ("/v1/chat/completions", "/compact"):
        spec["paths"][path]["post"]["requestBody"] = body
    return spec


def openai_error_shape(ctx: Any, response: Any, case: Any) -> bool | None:
    """A 4xx from the proxy carries OpenAI's error object."""
    if 400 <= response.status_code < 500:
        error = response.json()["error"]
        assert set(error) >= {"message", "type", "param", "code"}, error
    return None


if schemathesis is not None:
    schema = schemathesis.openapi.from_asgi("/openapi.json", schema_app())

    @schema.parametrize()
    @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
    def test_the_openapi_schema_holds_no_server_error(case: Any) -> None:
        case.call_and_validate(checks=[schemathesis.checks.not_a_server_error])

    bodies_app = schema_app()
    chat_schema = schemathesis.openapi.from_dict(schema_with_bodies(bodies_app))
    chat_schema.app = bodies_app

    @pytest.mark.slow  # hundreds of examples: seconds, more than the fast tier's share
    @chat_schema.include(method="POST").parametrize()
    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
    def test_chat_bodies_from_the_schema_hold_no_server_error(case: Any) -> None:
        case.call_and_validate(checks=[schemathesis.checks.not_a_server_error, openai_error_shape])

else:

    @pytest.mark.skip(reason="schemathesis is not installed (pip install 'schemathesis>=4.32')")
    def test_the_openapi_schema_holds_no_server_error() -> None:
        pass
