"""Hostile bodies against the real process (issue 23, rows 1-4, 7-9 and 11), one section per row.

The real `compacting-proxy` runs on loopback in front of `Hostile` (`tests/server/test_redteam.py`: an
upstream in a thread of this process that records every request as it came). Where a row is about
freezing the proxy, `/healthz` is polled while the heavy request runs and must answer within 50 ms
plus the idle noise measured first in the same test (`tests/support/health.py`). The property test of
`context_management` runs in-process (`httpx.ASGITransport`). The anthropic SDK is imported by the
process test that uses it: the fast tier runs this file without its second of import.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.bodies.jsonbody import dump_json, parse_json_object
from proxy.counting.cache import LruCache
from proxy.server.app import create_app
from tests.support.fakes import make_settings
from tests.support.health import (
    answer_all,
    anthropic_message,
    parse_time,
    responsive_during,
    rss_limit_kb,
    upstream_and_proxy,
)
from tests.support.hostile import (
    Proxy,
    counting_upstream,
    function_calls,
    hostile_upstream,
    proxy_for,
)

# --- 1: odd context edits are a 400 naming the field, never a 500 --------------------------------


def tool_history(turns: int, result: str = "result text " * 20) -> list[dict[str, Any]]:
    """An Anthropic history of `turns` tool calls, each answered, then a question."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "start"}]
    for i in range(turns):
        messages.append(
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": f"toolu_{i}", "name": "read", "input": {"n": i}}],
            }
        )
        messages.append(
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": result}],
            }
        )
    messages.append({"role": "user", "content": "and now?"})
    return messages


CLEAR = "clear_tool_uses_20250919"
ODD_EDITS: list[tuple[dict[str, Any], str]] = [
    ({"type": CLEAR, "exclude_tools": 5}, "exclude_tools"),
    ({"type": CLEAR, "exclude_tools": True}, "exclude_tools"),
    ({"type": CLEAR, "exclude_tools": 1.5}, "exclude_tools"),
    ({"type": CLEAR, "exclude_tools": [["read"]]}, "exclude_tools.0"),
    ({"type": CLEAR, "exclude_tools": [{"name": "read"}]}, "exclude_tools.0"),
    ({"type": CLEAR, "clear_tool_inputs": [["read"]]}, "clear_tool_inputs.0"),
    ({"type": CLEAR, "clear_tool_inputs": {"read": True}}, "clear_tool_inputs"),
    ({"type": CLEAR, "trigger": {"type": "tool_uses", "value": "1"}}, "trigger.value"),
    ({"type": CLEAR, "keep": {"type": "tool_uses", "value": 1.5}}, "keep.value"),
    ({"type": CLEAR, "clear_at_least": 7}, "clear_at_least"),
    ({"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": True}}, "keep.value"),
]


@pytest.mark.process
def test_1_odd_context_edits_are_400_naming_the_field() -> None:
    import anthropic

    with upstream_and_proxy() as (hostile, proxy):
        client = anthropic.Anthropic(base_url=proxy.base_url, api_key="k", max_retries=0)
        for edit, where in ODD_EDITS:
            with pytest.raises(anthropic.BadRequestError) as raised:
                client.messages.create(
                    model="m",
                    max_tokens=16,
                    messages=tool_history(5),  # type: ignore[arg-type]
                    extra_body={"context_management": {"edits": [{"type": "clear_thinking_20251015"}, edit]}},
                )
            error = raised.value.body["error"]  # type: ignore[index]
            assert error["type"] == "invalid_request_error", (edit, error)
            assert f"context_management.edits.1.{where}:" in error["message"], (edit, error)
        assert not [s for s in hostile.seen if s.path == "/v1/messages"]
        # A right one still works, and is applied.
        reply = client.messages.create(
            model="m",
            max_tokens=16,
            messages=tool_history(5),  # type: ignore[arg-type]
            extra_body={
                "context_management": {
                    "edits": [
                        {
                            "type": CLEAR,
                            "trigger": {"type": "tool_uses", "value": 1},
                            "exclude_tools": ["write"],
                            "clear_tool_inputs": ["read"],
                        }
                    ]
                }
            },
        )
        assert reply.content[0].type == "text"
        sent = json.loads(hostile.seen[-1].body)
        assert "[Tool result cleared" in json.dumps(sent["messages"][2])
        assert "Traceback" not in proxy.log


leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False),
    st.text(max_size=12),
    st.sampled_from(["read", "write", "all", "input_tokens", "tool_uses", "thinking_turns"]),
)
odd = st.recursive(
    leaf,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)
setting = st.one_of(
    odd,
    st.fixed_dictionaries(
        {"type": st.sampled_from(["input_tokens", "tool_uses", "thinking_turns", "x"]), "value": odd}
    ),
    st.fixed_dictionaries(
        {"type": st.sampled_from(["input_tokens", "tool_uses"]), "value": st.integers(0, 2**64)}
    ),
)
edit_fields = {
    "trigger": setting,
    "keep": st.one_of(setting, st.just("all")),
    "clear_at_least": setting,
    "exclude_tools": st.one_of(odd, st.lists(st.one_of(st.sampled_from(["read", "write"]), odd), max_size=5)),
    "clear_tool_inputs": st.one_of(odd, st.lists(st.one_of(st.just("read"), odd), max_size=5)),
}
edits = st.one_of(
    odd,
    st.lists(
        st.one_of(
            odd,
            st.fixed_dictionaries(
                {"type": st.sampled_from([CLEAR, "clear_thinking_20251015", "compact_20260112"])},
                optional=edit_fields,
            ),
        ),
        max_size=20,
    ),
)
management = st.one_of(odd, st.fixed_dictionaries({"edits": edits}))


@pytest.fixture(scope="module")
def runner() -> Iterator[asyncio.Runner]:
    with asyncio.Runner() as loop:
        yield loop


@pytest.fixture(scope="module")
def anthropic_app(runner: asyncio.Runner) -> Iterator[httpx.AsyncClient]:
    """The app in-process, in front of an upstream that answers any Anthropic message."""
    app = create_app(
        make_settings(window=4096),
        transport=httpx.MockTransport(lambda request: httpx.Response(200, json=anthropic_message())),
    )
    # A server error must come back as a 500 response to check, not as an exception in the test.
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    client = httpx.AsyncClient(transport=transport, base_url="http://proxy.test")
    yield client
    runner.run(client.aclose())


@pytest.mark.slow  # 5,000 examples: a minute or two
@pytest.mark.timeout(900)
@settings(
    max_examples=5000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)
@given(value=management)
def test_1_any_context_management_is_never_a_500(
    runner: asyncio.Runner, anthropic_app: httpx.AsyncClient, value: Any
) -> None:
    body = {"model": "m", "max_tokens": 16, "messages": tool_history(4), "context_management": value}
    response = runner.run(anthropic_app.post("/v1/messages", content=dump_json(body)))
    assert response.status_code in (200, 400), (value, response.status_code, response.text[:500])
    if response.status_code == 400:
        assert response.json()["error"]["type"] == "invalid_request_error"


# --- 2: many edits are refused at once; a few cost one count of the body --------------------------


@pytest.mark.process
@pytest.mark.slow
def test_2_thousands_of_edits_neither_freeze_nor_pass() -> None:
    history = tool_history(200, result="x" * 2000)  # ~420 KB
    trigger = {"type": "input_tokens", "value": 1}
    many = [{"type": CLEAR, "trigger": trigger, "keep": {"type": "tool_uses", "value": 1}}] * 2000
    # The most the proxy takes: each a walk of the tool blocks, the body counted once.
    most = [{**many[0], "keep": {"type": "tool_uses", "value": keep}} for keep in range(16, 0, -1)]
    body = {"model": "m", "max_tokens": 16, "messages": history}
    with upstream_and_proxy(COMPACT_WINDOW="1000000") as (hostile, proxy):
        url = proxy.base_url + "/v1/messages"
        attack = dump_json({**body, "context_management": {"edits": many}})  # not while /healthz is timed
        answers: list[httpx.Response] = []
        responsive_during(proxy, lambda: answers.extend(timed_post(url, attack)[0] for _ in range(20)))
        for refused in answers:
            assert refused.status_code == 400, refused.text[:300]
            assert "at most 16 edits" in refused.json()["error"]["message"]
        plain, edited = dump_json(body), dump_json({**body, "context_management": {"edits": most}})
        control = min(timed_post(url, plain)[1] for _ in range(3))
        took = min(timed_post(url, edited)[1] for _ in range(3))
        assert took <= 2 * control + 0.05, f"{took:.3f} s with 16 edits, {control:.3f} s without"
        sent = json.loads(hostile.seen[-1].body)
        assert sum("[Tool result cleared" in json.dumps(m) for m in sent["messages"]) == 199


# --- 3 and 4: huge numbers cost what ordinary ones do; integers past 64 bits are counted -----------


# One client for all posts: `httpx.post` builds a client and its TLS context each time, tens of ms
# of this process's GIL that the /healthz poller beside it would count against the proxy.
POSTER = httpx.Client(timeout=120, headers={"content-type": "application/json"})


def timed_post(url: str, content: bytes) -> tuple[httpx.Response, float]:
    started = time.perf_counter()
    response = POSTER.post(url, content=content)
    return response, time.perf_counter() - started


@pytest.mark.process
def test_3_huge_exponents_are_forwarded_as_sent_at_an_ordinary_cost() -> None:
    def body(number: bytes) -> bytes:
        numbers = b",".join([number] * 10_000)
        return (
            b'{"model":"m","messages":[{"role":"user","content":"hi"}],"x_vendor":{"weights":['
            + numbers
            + b"]}}"
        )

    huge, ordinary = body(b"1e4000"), body(b"1.5e30")  # 68 KB each
    with upstream_and_proxy() as (hostile, proxy):
        url = proxy.base_url + "/v1/chat/completions"
        control = min(timed_post(url, ordinary)[1] for _ in range(3))
        times: list[float] = []

        def send_huge() -> None:
            for _ in range(10):
                response, took = timed_post(url, huge)
                assert response.status_code == 200, response.text[:300]
                assert hostile.seen[-1].body == huge
                times.append(took)

        responsive_during(proxy, send_huge)
        took = min(times)
        assert took <= 3 * control + 0.1, f"{took:.3f} s for huge numbers, {control:.3f} s for ordinary ones"


@pytest.mark.process
@pytest.mark.parametrize("tokenizer", ["upstream", "cl100k_base"])
def test_4_integers_past_64_bits_are_counted_exactly_and_forwarded(tokenizer: str) -> None:
    big = 10**30
    history: list[dict[str, Any]] = [{"role": "system", "content": "You help."}]
    for turn in range(12):
        history.append({"role": "user", "content": f"question {turn} " + "about wheels " * 200})
        history.append({"role": "assistant", "content": f"answer {turn} " + "wheels are round " * 200})
    history.append({"role": "user", "content": "the last one", "x_ids": [big, -big]})
    raw = json.dumps({"model": "m", "messages": history, "seed": big, "max_tokens": 64}).encode()
    with hostile_upstream() as hostile:
        answer_all(hostile)
        counting_upstream(hostile)
        with proxy_for(hostile.url, COMPACT_WINDOW="4096", COMPACT_TOKENIZER=tokenizer) as proxy:
            response, _ = timed_post(proxy.base_url + "/v1/chat/completions", raw)
            assert response.status_code == 200, response.text[:500]
            assert response.headers.get("x-compaction-tokens-before"), response.headers
    sent = [s.body for s in hostile.seen if s.path == "/v1/chat/completions"][-1]
    assert b'"seed":1000000000000000000000000000000' in sent
    assert b'"x_ids":[1000000000000000000000000000000,-1000000000000000000000000000000]' in sent
    assert len(json.loads(sent)["messages"]) < len(history)  # compacted
    if tokenizer == "upstream":
        assert any(s.path == "/tokenize" for s in hostile.seen)


# --- 8: notes on huge JSON results are bounded like text notes -------------------------------------


def chat_with_result(result: str, later: str = "") -> bytes:
    """A chat whose tool result is `result`, then four more turns, the first of them saying `later`."""
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "a task"},
        {"role": "assistant", "content": "on it"},
        {"role": "user", "content": "read it"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "dump", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "c1", "content": result},
    ]
    for turn in range(4):
        messages.append({"role": "user", "content": f"next {turn} {later if turn == 0 else ''}"})
        messages.append({"role": "assistant", "content": f"done {turn}"})
    return json.dumps({"model": "m", "messages": messages}).encode()


@pytest.mark.process
@pytest.mark.slow
@pytest.mark.parametrize(
    ("result", "window", "later"),
    [
        ("[" + ",".join(["[]"] * 1_333_000) + "]", 4_000_000, 580_000),  # 4 MB, 1.7M tokens
        # A flat 1 MB object: 877,780 tokens by the heaviest of the four vocabularies (the estimate's
        # 807,491), under the line of 1.6M's window when it comes.
        (json.dumps({f"key{i}": i for i in range(60_000)}), 1_600_000, 150_000),
    ],
    ids=["4MB-empty-lists", "1MB-flat-object"],
)
def test_8_notes_on_huge_json_results_do_not_freeze_the_proxy(result: str, window: int, later: int) -> None:
    # The result fits the window when it comes; a long message after it does not: it is noted.
    content = chat_with_result(result, later="a long message. " * later)
    floor = parse_time(content)
    with upstream_and_proxy(COMPACT_WINDOW=str(window), COMPACT_KEEP_RECENT_TURNS="1") as (hostile, proxy):

        def send() -> None:
            response, _ = timed_post(proxy.base_url + "/v1/chat/completions", content)
            assert response.status_code == 200, response.text[:300]

        responsive_during(proxy, send, floor)
        sent = json.loads(hostile.seen[-1].body)
        assert sent["messages"][4]["content"].startswith("[Truncated"), sent["messages"][4]["content"][:200]


# --- 9: 200,000 items are read and planned off the event loop --------------------------------------


@pytest.mark.process
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_9_two_hundred_thousand_function_calls_do_not_freeze_the_proxy() -> None:
    content = function_calls(100_000)  # 200,000 items, ~15 MB
    # A window the body stays well under by the pessimistic count (3.8M): planned, then forwarded as it came.
    env = {"COMPACT_MAX_MESSAGES": "300000", "COMPACT_WINDOW": "16000000"}
    with upstream_and_proxy(**env) as (hostile, proxy):

        def send() -> None:
            response, _ = timed_post(proxy.base_url + "/v1/responses", content)
            assert response.status_code == 200, response.text[:300]

        # No parse floor: the body is parsed in a child process and handed back in pieces
        # (`split_parse.py`), so no single call holds the GIL for the whole parse.
        responsive_during(proxy, send)
        assert hostile.seen[-1].body == content


# --- 7: memos are bounded by bytes ------------------------------------------------------------------


def loop_with_result(result: str) -> bytes:
    """An agent loop's call whose latest tool result, not yet read by the model, is `result`."""
    call = {"id": "c1", "type": "function", "function": {"name": "build", "arguments": "{}"}}
    messages = [
        {"role": "user", "content": "build it"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": result},
    ]
    return json.dumps({"model": "m", "messages": messages}).encode()


@pytest.mark.process
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_7_many_distinct_large_results_at_a_1m_window_add_little_to_the_idle_rss() -> None:
    """Each request's latest tool result is a distinct 4.4 MB log, capped to about the 1M window:
    the cap memo kept each capped text (3.5 MB) up to 4,096 of them."""
    with upstream_and_proxy(COMPACT_WINDOW="1000000", COMPACT_KEEP_RECENT_TURNS="1") as (hostile, proxy):
        start_kb = proxy.rss_kb()
        for n in range(90):
            line = f"request {n}: step ok, value {n * 7919} and some words of a log line\n"
            content = loop_with_result(line * (4_400_000 // len(line)))
            response, _ = timed_post(proxy.base_url + "/v1/chat/completions", content)
            assert response.status_code == 200, response.text[:300]
            hostile.seen.clear()
        memo_bytes = proxy.metric('compacting_proxy_table_bytes{table="notes"}')
        rss_mb = proxy.rss_kb() / 1024
    print(f"row 7: RSS {start_kb / 1024:.0f} -> {rss_mb:.0f} MB, notes memo {memo_bytes / 2**20:.1f} MiB")
    assert memo_bytes <= 64 * 1024 * 1024
    limit_mb = rss_limit_kb(proxy) / 1024  # the 300 MB against an idle 71: what it may add
    assert rss_mb < limit_mb, (
        f"RSS {rss_mb:.0f} MB after 90 distinct 4.4 MB results (from {start_kb / 1024:.0f} MB, limit {limit_mb:.0f})"
    )


# --- 11: paths reach the upstream as the client encoded them ---------------------------------------


def raw_get(proxy: Proxy, path: str) -> int:
    port = int(proxy.base_url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nhost: proxy\r\nconnection: close\r\n\r\n".encode())
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    return int(answer.split(b" ", 2)[1])


@pytest.mark.process
def test_11_percent_encoded_paths_reach_the_upstream_as_sent() -> None:
    with upstream_and_proxy() as (hostile, proxy):
        for path in ["/v1/files/dep%2e%2e/x", "/v1/files/a%/b", "/v1/files/a%zz", "/v1/files/a%2Fb%2e"]:
            assert raw_get(proxy, path) == 200, path
            assert hostile.seen[-1].path == path
        hostile.seen.clear()
        for path in ["/v1/%2e%2e/admin", "/v1/files/%2E%2E/x", "/v1/../admin"]:  # traversal stays refused
            assert raw_get(proxy, path) == 400, path
        assert not hostile.seen


# --- in-process checks of the pieces ----------------------------------------------------------------


def test_3_kept_numbers_are_written_back_as_sent_beside_a_lone_surrogate() -> None:
    raw = b'{"a":"\\ud800","n":[1e4000,-1E+999],"m":100000000000000000000000,"f":1.5}'
    body = parse_json_object(raw)
    assert dump_json(body) == raw
    assert dump_json({**body, "a": "x"}) == raw.replace(b"\\ud800", b"x")


def test_7_a_memo_is_bounded_by_bytes() -> None:
    memo = LruCache(4096, max_bytes=1024 * 1024)
    for n in range(100):
        memo.put(("cap", n, "tool"), f"{n}" + "x" * 100_000)
    assert memo.bytes <= 1024 * 1024
    assert len(memo) == 10
    assert memo.get(("cap", 99, "tool")) is not None and memo.get(("cap", 0, "tool")) is None
    memo.put("huge", "y" * 2 * 1024 * 1024)  # larger than the whole bound: not kept
    assert memo.get("huge") is None and memo.bytes <= 1024 * 1024


def test_9_dismantle_frees_only_what_nothing_else_holds() -> None:
    shared = {"kept": [1, 2, 3]}
    body = {"input": [{"a": [1, 2]}, shared], "model": "m"}
    from proxy.bodies.offload import dismantle  # here: the process tests also run on older code

    dismantle([body])
    assert shared == {"kept": [1, 2, 3]}  # still referred to here: left whole
