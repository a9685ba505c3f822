from __future__ import annotations

import json
import logging
import logging.config

import httpx
import pytest

from proxy.server.logs import (
    AccessFormatter,
    JsonFormatter,
    RequestIdFilter,
    TextFormatter,
    log_config,
    request_id,
)
from tests.support.conversations import bike_shop_chat
from tests.support.fakes import RecordingUpstream, proxy_client

SECRET = "sk-very-secret-key"


async def test_metrics_count_requests_compactions_and_tokens() -> None:
    upstream = RecordingUpstream()
    async with proxy_client(upstream, window=8000) as client:
        await client.post("/v1/chat/completions", json={"model": "m", "messages": bike_shop_chat()})
        await client.post("/v1/chat/completions", json={"model": "m", "messages": bike_shop_chat(items=5)})
        await client.get("/v1/models")
        text = (await client.get("/metrics")).text
    assert 'compacting_proxy_requests_total{route="chat",status="200"} 2.0' in text
    assert 'compacting_proxy_requests_total{route="passthrough",status="200"} 1.0' in text
    assert 'compacting_proxy_compactions_total{level="1"} 1.0' in text
    assert (
        "compacting_proxy_tokens_saved_total" in text
        and "compacting_proxy_upstream_latency_seconds_bucket" in text
    )
    assert "compacting_proxy_streams_open 0.0" in text


async def test_upstream_errors_are_counted() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused")

    async with proxy_client(RecordingUpstream(respond=refuse)) as client:
        await client.post("/v1/chat/completions", json={"model": "m", "messages": []})
        text = (await client.get("/metrics")).text
    assert 'compacting_proxy_upstream_errors_total{kind="upstream_unreachable"} 1.0' in text
    assert 'compacting_proxy_requests_total{route="chat",status="502"} 1.0' in text


async def test_request_id_is_honoured_passed_upstream_and_returned() -> None:
    upstream = RecordingUpstream()
    async with proxy_client(upstream) as client:
        given = await client.get("/v1/models", headers={"x-request-id": "abc-123"})
        made = await client.get("/v1/models")
    assert given.headers["x-request-id"] == "abc-123"
    assert upstream.requests[0].headers["x-request-id"] == "abc-123"
    generated = made.headers["x-request-id"]
    assert len(generated) == 32 and upstream.requests[1].headers["x-request-id"] == generated


async def test_api_keys_guard_the_proxy_and_are_not_forwarded() -> None:
    upstream = RecordingUpstream()
    async with proxy_client(upstream, api_keys="key-one,key-two", upstream_api_key="sk-upstream") as client:
        missing = await client.post("/v1/chat/completions", json={"model": "m", "messages": []})
        wrong = await client.get("/v1/models", headers={"authorization": "Bearer nope"})
        right = await client.get("/v1/models", headers={"authorization": "Bearer key-two"})
        health = await client.get("/healthz")
    assert missing.status_code == wrong.status_code == 401
    assert missing.json()["error"]["code"] == "invalid_api_key"
    assert right.status_code == 200 and health.status_code == 200
    assert len(upstream.requests) == 1
    assert upstream.last.headers.get_list("authorization") == ["Bearer sk-upstream"]


async def test_api_keys_without_an_upstream_key_forward_no_credentials() -> None:
    upstream = RecordingUpstream()
    async with proxy_client(upstream, api_keys="key-one") as client:
        await client.get("/v1/models", headers={"authorization": "Bearer key-one"})
    assert "authorization" not in upstream.last.headers


async def test_readyz_follows_the_upstream() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused")

    async with proxy_client(RecordingUpstream()) as client:
        ready = await client.get("/readyz")
    async with proxy_client(RecordingUpstream(respond=refuse)) as client:
        down = await client.get("/readyz")
    assert ready.status_code == 200 and down.status_code == 503


async def test_readyz_can_ignore_the_upstream() -> None:
    """`COMPACT_READY_NEEDS_UPSTREAM=false`: replicas stay in the load balancer while a shared
    upstream is down, and answer each request with the upstream error in the client's protocol."""

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused")

    async with proxy_client(RecordingUpstream(respond=refuse), ready_needs_upstream=False) as client:
        ready = await client.get("/readyz")
    assert ready.status_code == 200


async def test_too_many_messages_is_a_400() -> None:
    upstream = RecordingUpstream()
    messages = [{"role": "user", "content": "x"}] * 11
    async with proxy_client(upstream, max_messages=10) as client:
        response = await client.post("/v1/chat/completions", json={"model": "m", "messages": messages})
    assert response.status_code == 400 and response.json()["error"]["code"] == "too_many_messages"
    assert upstream.requests == []


async def test_logs_carry_no_contents_or_secrets(caplog: pytest.LogCaptureFixture) -> None:
    upstream = RecordingUpstream()
    chat = bike_shop_chat()
    async with proxy_client(upstream, window=8000) as client:
        with caplog.at_level(logging.DEBUG):
            await client.post(
                "/v1/chat/completions",
                json={"model": "m", "messages": chat},
                headers={"authorization": f"Bearer {SECRET}"},
            )
    text = "\n".join(record.getMessage() for record in caplog.records)
    assert "Context optimized" in text
    assert SECRET not in text and "bent front wheel" not in text and "BW-" not in text


def test_json_log_lines_carry_the_request_id() -> None:
    token = request_id.set("rid-7")
    try:
        record = logging.LogRecord("proxy", logging.INFO, __file__, 1, "Context optimized: %s", ("x",), None)
        config = log_config("info", "json")  # what the command hands uvicorn, without applying it here
        assert config["formatters"]["default"]["()"] is JsonFormatter
        assert config["filters"]["request_id"]["()"] is RequestIdFilter
        assert RequestIdFilter().filter(record)
        line = json.loads(JsonFormatter().format(record))
    finally:
        request_id.reset(token)
    assert (
        line["request_id"] == "rid-7"
        and line["message"] == "Context optimized: x"
        and line["level"] == "info"
    )


async def test_log_bodies_is_opt_in(caplog: pytest.LogCaptureFixture) -> None:
    async with proxy_client(RecordingUpstream(), window=8000, log_bodies=True) as client:
        with caplog.at_level(logging.INFO, logger="proxy"):
            await client.post("/v1/chat/completions", json={"model": "m", "messages": bike_shop_chat()})
    assert "bent front wheel" in "\n".join(r.getMessage() for r in caplog.records)


async def test_the_upstreams_own_request_id_is_not_duplicated() -> None:
    upstream = RecordingUpstream(
        respond=lambda r: httpx.Response(200, json={}, headers={"x-request-id": "req_up"})
    )
    async with proxy_client(upstream) as client:
        response = await client.get("/v1/models", headers={"x-request-id": "mine"})
    assert response.headers.get_list("x-request-id") == ["req_up"]
    assert upstream.last.headers["x-request-id"] == "mine"


def test_log_lines_are_stamped_as_the_standard_formatter_stamps_them() -> None:
    """The stamp is written once a second (`StampedFormatter`): every line still carries its own
    second and milliseconds."""
    text, stamped = logging.Formatter("%(asctime)s %(message)s"), TextFormatter("%(asctime)s %(message)s")
    for created in (1_700_000_000.001, 1_700_000_000.999, 1_700_000_001.5, 1_700_000_000.25):
        record = logging.LogRecord("proxy", logging.INFO, __file__, 1, "line", (), None)
        record.created, record.msecs = created, (created - int(created)) * 1000
        assert stamped.format(record) == text.format(record)


def test_the_access_line_is_uvicorns_in_plain_text_and_survives_another_shape() -> None:
    fmt = log_config("info", "text")["formatters"]["access"]["fmt"]
    formatter = AccessFormatter(fmt)
    args = ("127.0.0.1:5", "GET", "/v1beta/models?key=AIza-secret", "1.1", 404)
    record = logging.LogRecord(
        "uvicorn.access", logging.INFO, __file__, 1, '%s - "%s %s HTTP/%s" %d', args, None
    )
    RequestIdFilter().filter(record)
    assert formatter.format(record).endswith(
        '127.0.0.1:5 "GET /v1beta/models?key=*** HTTP/1.1" 404 Not Found'
    )
    other = logging.LogRecord("uvicorn.access", logging.INFO, __file__, 1, "%s served", ("x",), None)
    RequestIdFilter().filter(other)
    assert formatter.format(other).endswith('- "x served" -'), "another uvicorn's call is logged, not raised"
