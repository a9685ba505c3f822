"""The proxy attacked, and in front of a hostile upstream (issue 18), one section per finding.

Where the finding depends on sockets, sizes or timing, the real `compacting-proxy` process runs on
loopback in front of `Hostile`, an upstream in a thread of this process that answers what a test
scripts (by path) and records every request it gets, headers as they came. Clients are the official
SDKs (`openai`, `anthropic`, `ollama`) and raw sockets. Findings of pure logic run in-process.
Each SDK is imported by the process tests that use it: the fast tier runs this file without them
(over a second of imports).
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
import zlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import suppress
from typing import Any

import httpx
import pytest

from proxy.settings import Settings
from tests.support.fakes import RecordingUpstream, anthropic_message, completion, proxy_client
from tests.support.hostile import (
    Hostile,
    Proxy,
    ScriptedHandler,
    Seen,
    counting_upstream,
    hostile_upstream,
    proxy_for,
)
from tests.support.processes import VENV_BIN, free_port, running

CLIENT_KEY = "client-secret-for-the-proxy"
UPSTREAM_KEY = "upstream-secret"


# --- the hostile upstream and the proxy in front of it: tests/support/hostile.py ----------------


def sse(*events: dict[str, Any], named: bool = False) -> list[bytes]:
    out = []
    for event in events:
        head = f"event: {event['type']}\n".encode() if named else b""
        out.append(head + b"data: " + json.dumps(event).encode() + b"\n\n")
    return out


def long_history(turns: int, size: int = 1200) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    for turn in range(turns):
        messages.append(
            {"role": "user", "content": f"question {turn}: " + "tell me about wheels. " * (size // 22)}
        )
        messages.append(
            {"role": "assistant", "content": f"answer {turn}: " + "wheels are round. " * (size // 18)}
        )
    messages.append({"role": "user", "content": "and the last question?"})
    return messages


# --- 2: the proxy's own requests carry the upstream key, never the client's ----------------------


def scripted_for_probes(hostile: Hostile) -> None:
    """Ollama's probes answered (a model of 2,048 tokens), and each API's chat with a small answer."""
    ollama_answer = {
        "model": "m",
        "message": {"role": "assistant", "content": "ok"},
        "done": True,
        "done_reason": "stop",
        "prompt_eval_count": 10,
        "eval_count": 1,
    }
    show = {"parameters": "", "model_info": {"llama.context_length": 2048}}
    hostile.routes.update(
        {
            "/api/version": lambda h, s: h.json(200, {"version": "0.33.0"}),
            "/api/show": lambda h, s: h.json(200, show),
            "/api/ps": lambda h, s: h.json(200, {"models": []}),
            "/v1/models": lambda h, s: h.json(200, {"object": "list", "data": []}),
            "/v1/chat/completions": lambda h, s: h.json(200, completion("- the summary")),
            "/v1/messages": lambda h, s: h.json(200, anthropic_message()),
            "/api/chat": lambda h, s: h.json(200, ollama_answer),
        }
    )
    counting_upstream(hostile)


@pytest.mark.process
def test_2_no_outgoing_request_carries_the_clients_key() -> None:
    import anthropic
    import ollama
    import openai

    with hostile_upstream() as hostile:
        scripted_for_probes(hostile)
        env = {
            "COMPACT_API_KEYS": CLIENT_KEY,
            "COMPACT_UPSTREAM_API_KEY": UPSTREAM_KEY,
            "COMPACT_WINDOW": "auto",
            "COMPACT_TOKENIZER": "upstream",
            "COMPACT_SUMMARIZE": "true",
            "COMPACT_SUMMARY_TOKENS": "64",
        }
        with proxy_for(hostile.url, **env) as proxy:
            history = long_history(8)
            chat = openai.OpenAI(base_url=proxy.base_url + "/v1", api_key=CLIENT_KEY, max_retries=0)
            chat.chat.completions.create(model="bridged", messages=history)  # type: ignore[arg-type]
            claude = anthropic.Anthropic(base_url=proxy.base_url, api_key=CLIENT_KEY, max_retries=0)
            reply = claude.messages.with_raw_response.create(
                model="probed",
                max_tokens=64,
                messages=[m for m in history if m["role"] != "system"],  # type: ignore[misc]
            )
            assert reply.headers.get("x-compaction-summarized"), proxy.log[-2000:]
            assert httpx.get(proxy.base_url + "/readyz", timeout=5).status_code == 200
            native = ollama.Client(host=proxy.base_url, headers={"authorization": f"Bearer {CLIENT_KEY}"})
            native.chat(model="native", messages=history, options={"num_ctx": 2048})
    kinds = {(s.method, s.path) for s in hostile.seen}
    expected = {
        ("GET", "/v1/models"),  # window probe and readiness
        ("GET", "/props"),
        ("GET", "/api/ps"),
        ("POST", "/api/show"),  # the window detector's and the Ollama bridge's
        ("GET", "/api/version"),
        ("POST", "/tokenize"),
        ("POST", "/apply-template"),
        ("POST", "/v1/chat/completions"),  # summaries
        ("POST", "/v1/messages"),
        ("POST", "/api/chat"),
    }
    assert expected <= kinds, expected - kinds
    for seen in hostile.seen:
        values = " ".join(f"{k}: {v}" for k, v in seen.headers)
        assert CLIENT_KEY not in values, (seen.method, seen.path, values)
        credentials = {k.lower(): v for k, v in seen.headers if k.lower() in ("authorization", "x-api-key")}
        assert credentials in (
            {"authorization": f"Bearer {UPSTREAM_KEY}"},
            {"x-api-key": UPSTREAM_KEY},
        ), (seen.method, seen.path, credentials)


# --- 3: slow clients are closed within the limits; /healthz keeps answering ----------------------


def closed_by_server(sock: socket.socket) -> bool:
    try:
        return sock.recv(4096, socket.MSG_DONTWAIT) == b"" or True
    except BlockingIOError:
        return False
    except OSError:
        return True


@pytest.mark.process
def test_3_slowloris_heads_idle_bodies_and_idle_connections_are_closed_in_time() -> None:
    limits = {"COMPACT_HEADER_TIMEOUT": "2", "COMPACT_BODY_TIMEOUT": "2", "COMPACT_KEEP_ALIVE_TIMEOUT": "2"}
    with hostile_upstream() as hostile, proxy_for(hostile.url, COMPACT_WINDOW="8192", **limits) as proxy:
        port = int(proxy.base_url.rsplit(":", 1)[1])
        head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: p\r\nContent-Length: 1000\r\n\r\n"
        slow_heads = [socket.create_connection(("127.0.0.1", port)) for _ in range(200)]
        idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(50)]
        slow_bodies = [socket.create_connection(("127.0.0.1", port)) for _ in range(50)]
        for sock in slow_bodies:
            sock.sendall(head + b'{"model": "m", ')
        started = time.monotonic()
        healthz: list[float] = []
        sent = 0
        with httpx.Client(base_url=proxy.base_url, timeout=5) as client:
            while time.monotonic() - started < 4.5:  # a byte every 0.25 s: never a whole head
                for sock in slow_heads:
                    with suppress(OSError):
                        sock.send(head[sent : sent + 1])
                sent += 1
                asked = time.monotonic()
                assert client.get("/healthz").status_code == 200
                healthz.append(time.monotonic() - asked)
                time.sleep(0.25)
        for group, name in ((slow_heads, "slow heads"), (idle, "idle"), (slow_bodies, "idle bodies")):
            still_open = [s for s in group if not closed_by_server(s)]
            assert not still_open, f"{len(still_open)} {name} connections still open after 4.5 s"
        for sock in slow_heads + idle + slow_bodies:
            sock.close()
        assert max(healthz) < 2.0, healthz  # generous: the machine is shared
        assert sent < len(head)  # the heads were never complete


@pytest.mark.process
def test_3_connections_past_the_cap_get_503_and_the_proxy_recovers() -> None:
    with (
        hostile_upstream() as hostile,
        proxy_for(
            hostile.url,
            COMPACT_WINDOW="8192",
            COMPACT_MAX_CLIENT_CONNECTIONS="20",
            COMPACT_HEADER_TIMEOUT="2",
        ) as proxy,
    ):
        port = int(proxy.base_url.rsplit(":", 1)[1])
        held = [socket.create_connection(("127.0.0.1", port)) for _ in range(20)]
        time.sleep(0.2)
        extra = socket.create_connection(("127.0.0.1", port))
        extra.settimeout(2)
        extra.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: p\r\nContent-Length: 2\r\n\r\n{}")
        assert extra.recv(4096).startswith(b"HTTP/1.1 503 ")  # past the cap only probes are answered
        time.sleep(2.5)  # the held ones pass their head timeout
        assert httpx.get(proxy.base_url + "/healthz", timeout=5).status_code == 200
        for sock in [*held, extra]:
            sock.close()


# --- 4: memory stays flat however many distinct model names arrive -------------------------------


@pytest.mark.process
@pytest.mark.timeout(600)
def test_4_memory_is_flat_after_10000_distinct_model_names() -> None:
    """Each distinct name costs a window probe (the stub's `/v1/models` has one entry, which answers
    for any name) and a calibration entry; 8 KB names make any unbounded table show in the RSS."""
    stub_port = free_port()
    stub = [str(VENV_BIN / "python"), "-m", "proxy.stub", "--port", str(stub_port)]
    with (
        running(stub, ready_url=f"http://127.0.0.1:{stub_port}/v1/models"),
        proxy_for(f"http://127.0.0.1:{stub_port}/v1", COMPACT_WINDOW="auto") as proxy,
    ):
        filler = "m" * 8192

        def run(start: int, stop: int) -> None:
            with httpx.Client(base_url=proxy.base_url, timeout=30) as client:
                for i in range(start, stop):
                    body = {
                        "model": f"{i}-{filler}",
                        "messages": [{"role": "user", "content": "hi " * 100}],
                    }
                    assert client.post("/v1/chat/completions", json=body).status_code == 200

        def batch(start: int, count: int, workers: int = 4) -> None:
            step = count // workers
            with ThreadPoolExecutor(workers) as pool:
                list(pool.map(lambda w: run(start + w * step, start + (w + 1) * step), range(workers)))

        batch(0, 2000)
        warm = proxy.rss_kb()
        batch(2000, 8000)
        after = proxy.rss_kb()
        windows = proxy.metric('compacting_proxy_table_entries{table="windows"}')
        calibration = proxy.metric('compacting_proxy_table_entries{table="calibration"}')
    print(f"RSS after 2,000 names {warm // 1024} MB, after 10,000 {after // 1024} MB")
    assert after - warm < 16 * 1024, f"RSS grew {warm // 1024} -> {after // 1024} MB"
    assert 0 < windows <= 1024 and calibration <= 1024


# --- 5: a broken stream ends in the route's own error event, and every official client raises ----


def broken_streams(hostile: Hostile) -> None:
    chat = sse(
        *[
            {
                "id": "c",
                "object": "chat.completion.chunk",
                "created": 1,
                "model": "m",
                "choices": [{"index": 0, "delta": {"content": w}, "finish_reason": None}],
            }
            for w in ("Hel", "lo")
        ]
    )
    message = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 5, "output_tokens": 0},
    }
    claude = sse(
        {"type": "message_start", "message": message},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hel"}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "lo"}},
        named=True,
    )
    response = {
        "id": "resp_1",
        "object": "response",
        "created_at": 1,
        "model": "m",
        "status": "in_progress",
        "output": [],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
    }
    responses = sse(
        {"type": "response.created", "response": response, "sequence_number": 0},
        {
            "type": "response.output_text.delta",
            "item_id": "m1",
            "output_index": 0,
            "content_index": 0,
            "delta": "Hel",
            "logprobs": [],
            "sequence_number": 1,
        },
        named=True,
    )
    lines = [
        json.dumps({"model": "m", "message": {"role": "assistant", "content": w}, "done": False}).encode()
        + b"\n"
        for w in ("Hel", "lo")
    ]
    hostile.routes.update(
        {
            "/v1/chat/completions": lambda h, s: h.chunked_then_cut("text/event-stream", chat),
            "/v1/messages": lambda h, s: h.chunked_then_cut("text/event-stream", claude),
            "/v1/responses": lambda h, s: h.chunked_then_cut("text/event-stream", responses),
            "/api/chat": lambda h, s: h.chunked_then_cut("application/x-ndjson", lines),
            "/v1/files": lambda h, s: h.chunked_then_cut("application/octet-stream", [b"abc", b"def"]),
        }
    )


@pytest.fixture(scope="module")
def broken() -> Iterator[Proxy]:
    with hostile_upstream() as hostile:
        broken_streams(hostile)
        with proxy_for(hostile.url, COMPACT_WINDOW="8192", COMPACT_UPSTREAM_KIND="openai") as proxy:
            yield proxy


HI: Any = [{"role": "user", "content": "Hi!"}]


@pytest.mark.process
def test_5_anthropic_sdk_raises_on_a_broken_stream(broken: Proxy) -> None:
    import anthropic

    client = anthropic.Anthropic(base_url=broken.base_url, api_key="k", max_retries=0)
    with (
        pytest.raises(anthropic.APIStatusError, match="broke off"),
        client.messages.stream(model="m", max_tokens=16, messages=HI) as stream,
    ):
        stream.get_final_message()


@pytest.mark.process
def test_5_openai_sdk_raises_on_broken_chat_and_responses_streams(broken: Proxy) -> None:
    import openai

    client = openai.OpenAI(base_url=broken.base_url + "/v1", api_key="k", max_retries=0)
    with pytest.raises(openai.APIError, match="broke off"):
        list(client.chat.completions.create(model="m", messages=HI, stream=True))
    with pytest.raises(openai.APIError, match="broke off"):
        list(client.responses.create(model="m", input="Hi!", stream=True))


@pytest.mark.process
def test_5_ollama_client_raises_on_a_broken_stream(broken: Proxy) -> None:
    import ollama

    client = ollama.Client(host=broken.base_url)
    with pytest.raises(ollama.ResponseError, match="broke off"):
        list(client.chat(model="m", messages=HI, stream=True))


@pytest.mark.process
def test_14_a_broken_stream_is_one_warning_without_a_traceback(broken: Proxy) -> None:
    with (
        pytest.raises(httpx.HTTPError),
        httpx.stream("GET", broken.base_url + "/v1/files/f/content", timeout=5) as response,
    ):
        response.read()
    time.sleep(0.3)
    log = broken.log
    assert "Traceback" not in log and " ERROR " not in log, log[-3000:]
    assert "WARNING proxy.upstream" in log and "stream failed" in log


# --- 6 and 7: no 500 with summaries on, nor at any nesting depth -------------------------------


class Summarising(RecordingUpstream):
    def __init__(self) -> None:
        super().__init__(respond=lambda request: httpx.Response(200, json=completion("- summary")))


@pytest.mark.parametrize(
    "odd",
    [
        {
            "role": "assistant",
            "content": "order 123456789012345678901234567890",
            "n": 123456789012345678901234567890,
        },
        {
            "role": "assistant",
            "content": json.loads("[" * 300 + '{"type": "text", "text": "deep"}' + "]" * 300),
        },
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "function": "f"}]},
    ],
    ids=["30-digit-integer", "nested-300", "function-as-string"],
)
async def test_6_odd_dropped_messages_do_not_fail_summaries(odd: dict[str, Any]) -> None:
    messages = long_history(10)
    messages.insert(2, odd)
    if odd.get("tool_calls"):
        messages.insert(3, {"role": "tool", "tool_call_id": "c1", "content": "result"})
    async with proxy_client(Summarising(), window=4000, summarize=True, summary_tokens=64) as client:
        response = await client.post(
            "/v1/chat/completions", content=json.dumps({"model": "m", "messages": messages})
        )
    assert response.status_code == 200, response.text
    assert response.headers.get("x-compaction-dropped")


async def test_7_deep_nesting_is_a_clear_400_never_a_500() -> None:
    async with proxy_client(Summarising(), window=4000, summarize=True) as client:
        for depth in (*range(500, 520, 3), *range(970, 1040, 3), 5000):
            content = "[" * depth + '"x"' + "]" * depth
            body = '{"model": "m", "messages": [{"role": "user", "content": ' + content + "}]}"
            response = await client.post("/v1/chat/completions", content=body)
            expected = 200 if depth <= 509 else 400
            assert response.status_code == expected, (depth, response.text[:200])
            if expected == 400:
                assert response.json()["error"]["code"] == "invalid_json"


# --- 8: everything read from the upstream is bounded, compressed or not --------------------------


def gzip_bomb(size: int) -> bytes:
    packer = zlib.compressobj(1, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    zeros = b"\0" * (1 << 20)
    return b"".join(packer.compress(zeros) for _ in range(size >> 20)) + packer.flush()


@pytest.mark.process
def test_8_bombs_and_huge_answers_from_the_upstream_are_bounded() -> None:
    bomb = gzip_bomb(1 << 30)  # 1 GiB of zeros in about 1 MB

    def send_bomb(h: ScriptedHandler, seen: Seen) -> None:
        h.raw(200, bomb, "application/json", {"content-encoding": "gzip"})

    def chat(h: ScriptedHandler, seen: Seen) -> None:
        if b"compress the earlier part" in seen.body:
            send_bomb(h, seen)  # the summariser
        else:  # a non-streamed answer of 512 MB
            h.endless("application/json", b'{"id": "x", "pad": "', b"a" * (1 << 20), 512 << 20)

    def native_chat(h: ScriptedHandler, seen: Seen) -> None:
        if b'"stream":true' in seen.body:  # one NDJSON line of 300 MB
            h.endless("application/x-ndjson", b'{"message": {"content": "', b"a" * (1 << 20), 300 << 20)
        else:
            send_bomb(h, seen)

    with hostile_upstream() as hostile:
        hostile.routes.update(
            {
                "/v1/models": send_bomb,
                "/props": send_bomb,
                "/api/ps": send_bomb,
                "/api/show": send_bomb,
                "/api/version": lambda h, s: h.json(200, {"version": "0.33.0"}),
                "/v1/chat/completions": chat,
                "/api/chat": native_chat,
            }
        )
        env = {"COMPACT_WINDOW": "auto", "COMPACT_SUMMARIZE": "true", "COMPACT_UPSTREAM_KIND": "ollama"}
        with proxy_for(hostile.url, **env) as proxy:
            base = proxy.rss_kb("VmHWM")
            with httpx.Client(base_url=proxy.base_url, timeout=60) as client:
                for _ in range(3):
                    assert client.get("/readyz").status_code == 200
                    time.sleep(2.1)
                # window probes (/v1/models, /props, /api/ps, /api/show) and the bridge's /api/show
                bridged = {"model": "a", "messages": long_history(30, 2000)}
                answer = client.post("/v1/chat/completions", json=bridged)
                assert answer.status_code == 502, answer.text[:300]
                streamed = client.post("/v1/chat/completions", json={**bridged, "stream": True})
                assert b"upstream_stream_error" in streamed.content
                direct = {
                    "model": "b",
                    "messages": long_history(30, 2000),
                    "frequency_penalty": 0.0,
                    "n": 1,
                    "logprobs": True,
                }  # not bridged: /v1/chat/completions, summaries, a 512 MB answer
                assert client.post("/v1/chat/completions", json=direct).status_code == 502
            peak = proxy.rss_kb("VmHWM")
            log = proxy.log
    print(f"peak RSS {base // 1024} MB before, {peak // 1024} MB after the bombs")
    assert peak - base < 200 * 1024, f"peak RSS {base // 1024} -> {peak // 1024} MB"
    assert "Traceback" not in log, log[-3000:]


# --- 9: a COMPACT_API_KEYS that holds no key refuses to start -----------------------------------


@pytest.mark.process
@pytest.mark.parametrize("value", [",", " ", " , ,"])
def test_9_api_keys_without_a_key_refuse_to_start(value: str) -> None:
    with pytest.raises(ValueError, match="holds no key"):
        Settings(api_keys=value)
    command = [str(VENV_BIN / "compacting-proxy"), "--port", str(free_port())]
    done = subprocess.run(
        command, env={"COMPACT_API_KEYS": value, "PATH": "/usr/bin:/bin"}, capture_output=True, timeout=30
    )
    assert done.returncode == 2 and b"COMPACT_API_KEYS" in done.stderr, done.stderr


# --- 10: a client's value cannot forge a log line -----------------------------------------------


@pytest.mark.process
def test_10_newlines_in_client_values_do_not_forge_log_lines() -> None:
    forged = "2026-01-01 00:00:00,000 WARNING proxy [-] FORGED"
    with hostile_upstream() as hostile:
        hostile.routes["/v1/chat/completions"] = lambda h, s: h.json(200, completion())
        hostile.routes["/v1/models"] = lambda h, s: h.json(200, {"data": []})
        with proxy_for(hostile.url, access_log=True, COMPACT_WINDOW="2048") as proxy:
            body = {"model": "m\n" + forged, "messages": long_history(6)}
            assert (
                httpx.post(proxy.base_url + "/v1/chat/completions", json=body, timeout=10).status_code == 200
            )
            httpx.get(proxy.base_url + "/v1/models%0A" + forged.replace(" ", "%20"), timeout=10)
            time.sleep(0.3)
            lines = proxy.log.splitlines()
    assert any("FORGED" in line for line in lines)  # it was logged, escaped
    assert not [line for line in lines if line.startswith("2026-01-01")], lines[-10:]


# --- 11: the proxy's own errors on Ollama's routes are Ollama's shape --------------------------


async def test_11_errors_on_api_chat_are_ollama_shaped() -> None:
    async with proxy_client(RecordingUpstream(), api_keys="k", max_body_bytes=2048) as client:
        unauthorized = await client.post("/api/chat", json={"model": "m", "messages": HI})
        bad = await client.post("/api/chat", content=b"{not json", headers={"authorization": "Bearer k"})
        large = await client.post("/api/chat", content=b"x" * 4096, headers={"authorization": "Bearer k"})
    refused = httpx.MockTransport(lambda request: (_ for _ in ()).throw(httpx.ConnectError("refused")))
    async with proxy_client(refused) as client:
        down = await client.post("/api/chat", json={"model": "m", "messages": HI})
    for response, status in ((unauthorized, 401), (bad, 400), (large, 413), (down, 502)):
        assert response.status_code == status
        assert list(response.json()) == ["error"] and isinstance(response.json()["error"], str), response.text


# --- 12: a 502 repeats neither the upstream's address nor its bytes -----------------------------


@pytest.mark.process
def test_12_a_502_does_not_show_the_upstream_url_or_its_garbage() -> None:
    def garbage(h: ScriptedHandler, seen: Seen) -> None:
        h.wfile.write(b"\x00\x16\x03\x01 this is not HTTP \xff\xfe\r\n\r\n")
        h.close_connection = True

    with hostile_upstream() as hostile:
        hostile.routes["/v1/chat/completions"] = garbage
        with proxy_for(hostile.url, COMPACT_WINDOW="8192") as proxy:
            answer = httpx.post(proxy.base_url + "/v1/chat/completions", json={"model": "m", "messages": HI})
    closed = free_port()
    with proxy_for(f"http://127.0.0.1:{closed}/v1", COMPACT_WINDOW="8192") as proxy:
        unreachable = httpx.post(proxy.base_url + "/v1/chat/completions", json={"model": "m", "messages": HI})
    for response, port in ((answer, hostile.port), (unreachable, closed)):
        assert response.status_code == 502
        assert str(port) not in response.text and "127.0.0.1" not in response.text, response.text
        assert "not HTTP" not in response.text and "\\x" not in response.text, response.text


# --- 13: valid JSON that orjson refuses is forwarded as it came ---------------------------------


@pytest.mark.parametrize(
    "value",
    ["1e400", "1" + "0" * 400, '"\\ud800"', "-1e400"],
    ids=["1e400", "10**400", "lone-surrogate", "-1e400"],
)
async def test_13_valid_json_is_forwarded_byte_for_byte(value: str) -> None:
    upstream = RecordingUpstream()
    body = (
        '{"model": "m", "x_extra": ' + value + ', "messages": [{"role": "user", "content": "hi"}]}'
    ).encode()
    async with proxy_client(upstream) as client:
        response = await client.post("/v1/chat/completions", content=body)
    assert response.status_code == 200, response.text
    assert upstream.last.content == body


# --- 14: hop-by-hop headers named by Connection stay on their hop; /readyz is cached -----------


async def test_14_headers_named_in_connection_are_not_forwarded() -> None:
    upstream = RecordingUpstream()
    headers = [("connection", "keep-alive, x-hop-secret"), ("x-hop-secret", "1"), ("x-kept", "2")]
    async with proxy_client(upstream) as client:
        await client.get("/v1/models", headers=headers)
    assert "x-hop-secret" not in upstream.last.headers and upstream.last.headers["x-kept"] == "2"


@pytest.mark.process
def test_14_readyz_sends_at_most_one_upstream_request_a_second() -> None:
    with hostile_upstream() as hostile:
        hostile.routes["/v1/models"] = lambda h, s: h.json(200, {"data": []})
        with proxy_for(hostile.url, COMPACT_WINDOW="8192") as proxy:
            started = time.monotonic()
            with httpx.Client(base_url=proxy.base_url, timeout=5) as client:
                for _ in range(100):
                    assert client.get("/readyz").status_code == 200
            elapsed = time.monotonic() - started
    asked = [s for s in hostile.seen if s.path == "/v1/models"]
    assert len(asked) <= 1 + elapsed, (len(asked), elapsed)
