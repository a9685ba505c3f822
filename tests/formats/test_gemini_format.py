"""The Gemini API format (in process, over a mock upstream): a Gemini CLI history compacted with
function calls and their responses kept in pairs, `thoughtSignature`s kept on what is kept, the
system instruction and tools never touched; the overflow refused in the Gemini API's own words and
shape; the key header and `?key=` forwarded to a Gemini upstream; the other methods passed through;
errors in Google's shape. Histories are shaped as Gemini CLI 0.61 sends them (its first call of a
turn without an `id`, the results with ids of the CLI's own making)."""

from __future__ import annotations

import itertools
import json
import re
from typing import Any

import httpx
import orjson
from hypothesis import given
from hypothesis import strategies as st

from proxy.formats.gemini import Gemini
from tests.support.fakes import ClosingStream, RecordingUpstream, make_settings, proxy_client
from tests.support.gemini_chats import STREAM, WHOLE, answer, history, pairs_intact


async def test_a_gemini_cli_history_is_compacted_with_its_calls_and_results_in_pairs() -> None:
    upstream = RecordingUpstream(respond=lambda r: httpx.Response(200, json=answer()))
    body = history(24)
    async with proxy_client(upstream, window=16000, gemini_upstream="native") as client:
        response = await client.post(WHOLE, json=body, headers={"x-goog-api-key": "k-123"})
    assert response.status_code == 200, response.text
    assert response.json() == answer()
    sent = upstream.last_json()
    assert str(upstream.last.url) == "http://upstream.test/v1beta/models/gemini-2.5-pro:generateContent"
    assert upstream.last.headers["x-goog-api-key"] == "k-123"
    assert len(json.dumps(sent)) < len(json.dumps(body)) / 2
    # The fixed part and everything but `contents` as it came.
    assert {k: v for k, v in sent.items() if k != "contents"} == {
        k: v for k, v in body.items() if k != "contents"
    }
    contents = sent["contents"]
    assert pairs_intact(contents)
    assert contents[0] == body["contents"][0]  # the task
    assert contents[-2:] == body["contents"][-2:]  # the latest round as it came
    original_calls = [p for c in body["contents"] for p in c["parts"] if "functionCall" in p]
    kept_calls = [p for c in contents for p in c["parts"] if "functionCall" in p]
    assert kept_calls and all(p in original_calls for p in kept_calls)  # signatures and all, unchanged
    signed = [p for p in kept_calls if p["functionCall"]["name"] == "run_shell_command"]
    assert signed and all(p["thoughtSignature"].startswith("sig-") for p in signed)
    roles = [c["role"] for c in contents]
    assert all(a != b for a, b in itertools.pairwise(roles)), roles


async def test_a_noted_result_keeps_its_id_and_name() -> None:
    upstream = RecordingUpstream(respond=lambda r: httpx.Response(200, json=answer()))
    body = history(3, result_words=3000)
    async with proxy_client(upstream, window=16000, gemini_upstream="native") as client:
        response = await client.post(WHOLE, json=body)
    assert response.status_code == 200, response.text
    sent = upstream.last_json()
    results = [p["functionResponse"] for c in sent["contents"] for p in c["parts"] if "functionResponse" in p]
    originals = [
        p["functionResponse"] for c in body["contents"] for p in c["parts"] if "functionResponse" in p
    ]
    by_id = {o["id"]: o for o in originals}
    noted = [r for r in results if r != by_id[r["id"]]]
    assert noted, "no result was noted"
    for result in results:
        assert result["name"] == by_id[result["id"]]["name"]
        assert set(result["response"]) == {"output"}
    assert pairs_intact(sent["contents"])


async def test_under_the_window_the_request_goes_byte_for_byte_with_its_query() -> None:
    upstream = RecordingUpstream(respond=lambda r: httpx.Response(200, json=answer()))
    content = json.dumps(history(2), indent=1).encode()
    async with proxy_client(upstream, window=100000, gemini_upstream="native") as client:
        response = await client.post(STREAM + "?alt=sse&key=q-456", content=content)
    assert response.status_code == 200
    assert upstream.last.content == content
    assert upstream.last.url.params["key"] == "q-456" and upstream.last.url.params["alt"] == "sse"


async def test_the_overflow_is_refused_in_the_gemini_apis_words_and_shape() -> None:
    upstream = RecordingUpstream()
    body = {**history(2), "systemInstruction": {"parts": [{"text": "rule " * 12000}]}}
    async with proxy_client(upstream, window=8000, gemini_upstream="native") as client:
        whole = await client.post(WHOLE, json=body)
        streamed = await client.post(STREAM + "?alt=sse", json=body)
    for response in (whole, streamed):
        assert response.status_code == 400
        error = response.json()["error"]
        assert set(error) == {"code", "message", "status"}
        assert (error["code"], error["status"]) == (400, "INVALID_ARGUMENT")
        assert re.match(
            r"The input token count \(\d+\) exceeds the maximum number of tokens allowed \(8000\)\. ",
            error["message"],
        ), error["message"]
        assert "systemInstruction" in error["message"]  # the client's own field for what cannot be cut
    assert not upstream.forwarded


async def test_other_methods_pass_through_and_errors_come_in_googles_shape() -> None:
    upstream = RecordingUpstream(respond=lambda r: httpx.Response(200, json={"totalTokens": 7}))
    async with proxy_client(upstream, gemini_upstream="native", max_body_bytes=200_000) as client:
        counted = await client.post("/v1beta/models/gemini-2.5-pro:countTokens", json={"contents": []})
        bad = await client.post(WHOLE, json={"contents": "not a list"})
        too_large = await client.post(WHOLE, content=b"{" + b" " * 300_000 + b"}")
    assert counted.json() == {"totalTokens": 7}
    assert str(upstream.last.url) == "http://upstream.test/v1beta/models/gemini-2.5-pro:countTokens"
    assert bad.status_code == 400
    assert (
        bad.json()["error"]["status"] == "INVALID_ARGUMENT" and "contents" in bad.json()["error"]["message"]
    )
    assert too_large.status_code == 413 and too_large.json()["error"]["code"] == 413


async def test_a_broken_stream_ends_with_an_error_event_genai_raises_on() -> None:
    events = [
        b"data: " + orjson.dumps(answer("Hel")) + b"\r\n\r\n",
        b"data: " + orjson.dumps(answer("lo")) + b"\r\n\r\n",
    ]
    stream = ClosingStream(events, fail_after=1)
    upstream = RecordingUpstream(
        respond=lambda r: httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=stream)
    )
    async with proxy_client(upstream, window=100000, gemini_upstream="native") as client:
        response = await client.post(STREAM + "?alt=sse", json=history(1))
    assert response.content.startswith(events[0])
    last = [e for e in re.split(rb"\r?\n\r?\n", response.content) if e.strip()][-1]
    error = orjson.loads(last.strip().removeprefix(b"data: "))["error"]
    assert error["code"] >= 400 and "broke off" in error["message"]  # @google/genai throws ApiError


async def test_the_proxys_own_key_can_come_in_googles_header_and_is_not_forwarded() -> None:
    upstream = RecordingUpstream(respond=lambda r: httpx.Response(200, json=answer()))
    async with proxy_client(upstream, gemini_upstream="native", api_keys=["proxy-key"]) as client:
        refused = await client.post(WHOLE, json=history(1))
        allowed = await client.post(WHOLE, json=history(1), headers={"x-goog-api-key": "proxy-key"})
    assert refused.status_code == 401 and refused.json()["error"]["status"] == "UNAUTHENTICATED"
    assert allowed.status_code == 200
    assert "x-goog-api-key" not in upstream.last.headers


def test_the_stream_is_the_paths_and_the_prompt_size_is_the_usage_metadatas() -> None:
    tail = b'data: {"candidates": [], "usageMetadata": {"promptTokenCount": 1234, "totalTokenCount": 1300}}\r\n\r\n'
    assert Gemini(stream=True).streamed({}) and not Gemini(stream=False).streamed({"stream": True})
    assert Gemini(stream=True).reported_prompt_tokens(tail) == 1234


def test_make_settings_is_not_native_by_default() -> None:
    from proxy.ways.gemini.choice import gemini_native

    assert not gemini_native(make_settings())
    assert gemini_native(make_settings(upstream_url="https://generativelanguage.googleapis.com"))
    assert gemini_native(make_settings(gemini_upstream="native"))


def test_each_result_is_linked_to_the_call_it_answers_also_when_the_call_had_no_id() -> None:
    """Gemini CLI gives its own id to the result of a call that came without one: the result is
    linked to that call by its name, so a pair is dropped or kept as one."""
    conversation = Gemini(stream=False).read(history(3), {"model": "gemini-2.5-pro"})
    messages = conversation.request["messages"]
    assert messages[0]["role"] == "system"
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        calls = message["tool_calls"]
        results = messages[i + 1 : i + 1 + len(calls)]
        assert [r["role"] for r in results] == ["tool"] * len(calls)
        assert [r["tool_call_id"] for r in results] == [c["id"] for c in calls]
        assert [r["name"] for r in results] == [c["function"]["name"] for c in calls]


async def test_the_window_is_the_gemini_models_input_token_limit() -> None:
    """With no window configured, the Gemini API's model resource says it (asked with the client's key)."""

    def respond(request: httpx.Request) -> httpx.Response:
        if request.method == "GET" and request.url.path == "/v1beta/models/gemini-2.5-pro":
            if request.headers.get("x-goog-api-key") != "k-1":
                return httpx.Response(
                    403, json={"error": {"code": 403, "message": "no key", "status": "PERMISSION_DENIED"}}
                )
            return httpx.Response(200, json={"name": "models/gemini-2.5-pro", "inputTokenLimit": 16000})
        if request.method == "GET":
            return httpx.Response(
                404, json={"error": {"code": 404, "message": "not found", "status": "NOT_FOUND"}}
            )
        return httpx.Response(200, json=answer())

    upstream = RecordingUpstream(respond=respond)
    body = history(24)
    async with proxy_client(upstream, window="auto", gemini_upstream="native") as client:
        response = await client.post(WHOLE, json=body, headers={"x-goog-api-key": "k-1"})
    assert response.status_code == 200, response.text
    after = int(response.headers["x-compaction-tokens-after"])
    assert int(response.headers["x-compaction-tokens-before"]) > 16000 > after > 8192  # not the fallback


async def test_a_clamped_reply_limit_keeps_the_thinking_budget_under_it() -> None:
    upstream = RecordingUpstream(respond=lambda r: httpx.Response(200, json=answer()))
    body = history(2)
    body["generationConfig"] = {"maxOutputTokens": 60000, "thinkingConfig": {"thinkingBudget": 30000}}
    async with proxy_client(upstream, window=16000, gemini_upstream="native") as client:
        response = await client.post(WHOLE, json=body)
    assert response.status_code == 200, response.text
    config = upstream.last_json()["generationConfig"]
    limit = int(response.headers["x-compaction-max-tokens"])
    assert config["maxOutputTokens"] == limit < 16000
    assert config["thinkingConfig"] == {"thinkingBudget": limit // 2}


def _matched_as_before(contents: list[dict[str, Any]]) -> list[str]:
    """The ids results were linked to by the first, quadratic rule (e02f76e): scan the open calls for
    the result's id, else its name in the latest model content that has one, else the oldest."""
    open_calls: list[tuple[int, str, str, str | None]] = []
    linked = []
    for index, content in enumerate(contents):
        for j, part in enumerate(content["parts"]):
            if call := part.get("functionCall"):
                own = call.get("id") or None
                open_calls.append((index, own or f"gemini-call-{index}-{j}", call.get("name") or "", own))
            elif response := part.get("functionResponse"):
                own = response.get("id")
                matched = [k for k, e in enumerate(open_calls) if own and e[3] == own]
                named = [k for k, e in enumerate(open_calls) if e[2] == response.get("name")]
                if not matched and named:
                    latest = open_calls[named[-1]][0]
                    matched = [next(k for k in named if open_calls[k][0] == latest)]
                if not matched and open_calls:
                    matched = [0]
                linked.append(
                    open_calls.pop(matched[0])[1] if matched else own or f"gemini-result-{index}-{j}"
                )
    return linked


_NAMES = st.sampled_from(["a", "b", ""])
_IDS = st.one_of(st.none(), st.sampled_from(["x", "y", "z"]))
_CALL = st.builds(lambda n, i: {"functionCall": {"name": n, **({"id": i} if i else {})}}, _NAMES, _IDS)
_RESULT = st.builds(
    lambda n, i: {"functionResponse": {"name": n, "response": {"output": "r"}, **({"id": i} if i else {})}},
    _NAMES,
    _IDS,
)
_CONTENTS = st.lists(
    st.one_of(
        st.builds(lambda p: {"role": "model", "parts": p}, st.lists(_CALL, min_size=1, max_size=4)),
        st.builds(lambda p: {"role": "user", "parts": p}, st.lists(_RESULT, min_size=1, max_size=4)),
    ),
    max_size=8,
)


@given(_CONTENTS)
def test_results_are_linked_to_the_calls_the_first_rule_linked_them_to(
    contents: list[dict[str, Any]],
) -> None:
    """The indexed matching (linear: 8,000 calls and results froze the proxy for seconds with the
    scans) links every result where the scans did."""
    messages = Gemini(stream=False).read({"contents": contents}, {"model": "m"}).request["messages"]
    assert [m["tool_call_id"] for m in messages if m["role"] == "tool"] == _matched_as_before(contents)
