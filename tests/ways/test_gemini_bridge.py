"""The Gemini bridge (in process, over a mock Chat Completions upstream): a Gemini API request sent
as a chat (the path's model, the system instruction, calls with ids and their results linked,
function declarations as tools, the reply limit, the key as a bearer token and no query), and the
chat answer translated back into the Gemini API's, whole and streamed (as `@google/genai` splits
and reads the events), errors in Google's shape."""

from __future__ import annotations

import json
from typing import Any

import httpx
import orjson

from proxy.server.app import create_app
from tests.support.fakes import ClosingStream, RecordingUpstream, make_settings, proxy_client
from tests.support.gemini_chats import STREAM, WHOLE, genai_events, history
from tests.support.upstreams.ollama import FakeOllama

TOOL_SCHEMA = {"type": "object", "properties": {"file_path": {"type": "string"}}, "required": ["file_path"]}
CHAT_ANSWER = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "model": "qwen",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "content": "Reading it.",
                "reasoning_content": "I should read.",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "read_file", "arguments": '{"file_path": "a.py"}'},
                    }
                ],
            },
            "finish_reason": "tool_calls",
        }
    ],
    "usage": {"prompt_tokens": 321, "completion_tokens": 9, "total_tokens": 330},
}


def chunk(delta: dict[str, Any] | None, finish: str | None = None, **extra: Any) -> bytes:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    body = {
        "id": "chatcmpl-2",
        "object": "chat.completion.chunk",
        "model": "qwen",
        "choices": choices,
        **extra,
    }
    return b"data: " + orjson.dumps(body) + b"\n\n"


CHAT_STREAM = [
    chunk({"role": "assistant", "content": ""}),
    chunk({"content": "Let me "}),
    chunk({"content": "look."}),
    chunk(
        {
            "tool_calls": [
                {
                    "index": 0,
                    "id": "call_a",
                    "type": "function",
                    "function": {"name": "grep_search", "arguments": ""},
                }
            ]
        }
    ),
    chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"pattern": '}}]}),
    chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"def "}'}}]}),
    chunk(
        {
            "tool_calls": [
                {
                    "index": 1,
                    "id": "call_b",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": '{"file_path": "b.py"}'},
                }
            ]
        }
    ),
    chunk({}, "tool_calls"),
    chunk(None, usage={"prompt_tokens": 400, "completion_tokens": 20, "total_tokens": 420}),
    b"data: [DONE]\n\n",
]


async def test_the_request_goes_as_a_chat_with_calls_and_results_linked() -> None:
    upstream = RecordingUpstream(respond=lambda r: httpx.Response(200, json=CHAT_ANSWER))
    body = {
        **history(2),
        "generationConfig": {"maxOutputTokens": 1000, "temperature": 0.5, "stopSequences": ["END"]},
    }
    async with proxy_client(upstream, window=100000) as client:
        response = await client.post(WHOLE + "?key=q-key", json=body)
    assert response.status_code == 200, response.text
    sent = upstream.last_json()
    assert str(upstream.last.url) == "http://upstream.test/v1/chat/completions"  # no alt=sse, no key
    assert upstream.last.headers["authorization"] == "Bearer q-key"
    assert sent["model"] == "gemini-2.5-pro"
    assert (sent["max_tokens"], sent["temperature"], sent["stop"]) == (1000, 0.5, ["END"])
    assert "stream" not in sent
    messages = sent["messages"]
    assert messages[0] == {"role": "system", "content": body["systemInstruction"]["parts"][0]["text"]}
    assert messages[1]["role"] == "user"
    assert [m["role"] for m in messages[2:]] == ["assistant", "tool", "tool"] * 2
    for turn in (2, 5):
        calls = messages[turn]["tool_calls"]
        assert [c["function"]["name"] for c in calls] == ["run_shell_command", "read_file"]
        assert messages[turn]["reasoning_content"].startswith("thinking about round")
        assert [m["tool_call_id"] for m in messages[turn + 1 : turn + 3]] == [c["id"] for c in calls]
        assert json.loads(calls[1]["function"]["arguments"]) == {"file_path": f"g{(turn - 2) // 3}"}
    assert messages[3]["content"].startswith("result 0: line0_0")
    assert [t["function"]["name"] for t in sent["tools"]] == ["read_file", "grep_search", "run_shell_command"]
    assert sent["tools"][0]["function"]["parameters"]["type"] == "object"


def loop_check(rounds: int) -> dict[str, Any]:
    """Gemini CLI 0.61's loop check: its recent history, the last model turn's calls not answered
    yet (its turn is about to run them), then the question, asking for JSON."""
    body = history(rounds)
    calls = [p["functionCall"] for p in body["contents"][-2]["parts"] if "functionCall" in p]
    body["contents"] = body["contents"][:-1]  # the results of the last turn are not in yet
    body["contents"].append({"role": "user", "parts": [{"text": "Is this a loop? Answer in JSON."}]})
    body["generationConfig"] = {"responseMimeType": "application/json"}
    assert len(calls) == 2
    return body


async def test_a_call_no_response_answers_goes_with_a_tool_message_saying_so() -> None:
    """Google's API takes a `functionCall` nothing answers; a chat server refuses an assistant
    `tool_calls` no `tool` message answers (OpenAI's 400): each gets one saying no result came."""
    upstream = RecordingUpstream(respond=lambda r: httpx.Response(200, json=CHAT_ANSWER))
    async with proxy_client(upstream, window=100000) as client:
        response = await client.post(
            WHOLE.replace("gemini-2.5-pro", "gemini-3-flash-preview"), json=loop_check(3)
        )
    assert response.status_code == 200, response.text
    messages = upstream.last_json()["messages"]
    last_calls = next(i for i in range(len(messages) - 1, -1, -1) if messages[i].get("tool_calls"))
    ids = [c["id"] for c in messages[last_calls]["tool_calls"]]
    answers = messages[last_calls + 1 : last_calls + 3]
    assert [(m["role"], m["tool_call_id"]) for m in answers] == [("tool", i) for i in ids]
    assert all("no result" in m["content"] for m in answers)
    assert messages[last_calls + 3]["role"] == "user", "the question after them"
    answered = [m for m in messages if m["role"] == "tool" and "no result" not in m["content"]]
    assert len(answered) == 4, "the answered calls keep their own results"


async def test_with_a_model_set_every_bridged_call_asks_for_it() -> None:
    """`COMPACT_GEMINI_MODEL`: the CLI's side calls name Google's models whatever `-m` says."""
    upstream = RecordingUpstream(respond=lambda r: httpx.Response(200, json=CHAT_ANSWER))
    async with proxy_client(upstream, window=100000, gemini_model="qwen3-coder") as client:
        for path in (WHOLE, WHOLE.replace("gemini-2.5-pro", "gemini-3-flash-preview")):
            response = await client.post(path, json=history(1))
            assert response.status_code == 200, response.text
            assert upstream.last_json()["model"] == "qwen3-coder"


async def test_a_whole_chat_answer_comes_back_as_the_gemini_apis() -> None:
    upstream = RecordingUpstream(respond=lambda r: httpx.Response(200, json=CHAT_ANSWER))
    async with proxy_client(upstream, window=100000) as client:
        response = await client.post(WHOLE, json=history(1), headers={"x-goog-api-key": "h-key"})
    assert upstream.last.headers["authorization"] == "Bearer h-key"
    assert "x-goog-api-key" not in upstream.last.headers
    answer = response.json()
    candidate = answer["candidates"][0]
    assert candidate["content"] == {
        "role": "model",
        "parts": [
            {"text": "I should read.", "thought": True},
            {"text": "Reading it."},
            {"functionCall": {"id": "call_1", "name": "read_file", "args": {"file_path": "a.py"}}},
        ],
    }
    assert candidate["finishReason"] == "STOP"
    assert answer["usageMetadata"] == {
        "promptTokenCount": 321,
        "candidatesTokenCount": 9,
        "totalTokenCount": 330,
    }


async def test_a_chat_stream_comes_back_as_gemini_events_with_the_calls_assembled() -> None:
    stream = ClosingStream(CHAT_STREAM)
    upstream = RecordingUpstream(
        respond=lambda r: httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=stream)
    )
    async with proxy_client(upstream, window=100000) as client:
        response = await client.post(STREAM + "?alt=sse", json=history(1))
    sent = upstream.last_json()
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}
    assert response.headers["content-type"].startswith("text/event-stream")
    assert b"[DONE]" not in response.content and b"event:" not in response.content
    events = genai_events(response.content)
    text = "".join(p.get("text", "") for e in events for p in e["candidates"][0]["content"]["parts"])
    assert text == "Let me look."
    last = events[-1]
    assert last["candidates"][0]["finishReason"] == "STOP"
    assert last["candidates"][0]["content"]["parts"] == [
        {"functionCall": {"id": "call_a", "name": "grep_search", "args": {"pattern": "def "}}},
        {"functionCall": {"id": "call_b", "name": "read_file", "args": {"file_path": "b.py"}}},
    ]
    assert last["usageMetadata"]["promptTokenCount"] == 400
    assert all("finishReason" not in e["candidates"][0] for e in events[:-1])
    assert stream.closed


async def test_chat_errors_come_back_in_googles_shape_with_their_status() -> None:
    overflow = {
        "error": {
            "code": 400,
            "message": "the request exceeds the available context size (4096 tokens), try increasing it",
            "type": "exceed_context_size_error",
            "n_prompt_tokens": 5000,
            "n_ctx": 4096,
        }
    }
    upstream = RecordingUpstream(respond=lambda r: httpx.Response(400, json=overflow))
    async with proxy_client(upstream, window=100000) as client:
        whole = await client.post(WHOLE, json=history(1))
        streamed = await client.post(STREAM + "?alt=sse", json=history(1))
    for response in (whole, streamed):
        assert response.status_code == 400
        assert response.json() == {
            "error": {"code": 400, "message": overflow["error"]["message"], "status": "INVALID_ARGUMENT"}
        }


async def test_a_broken_chat_stream_ends_with_a_gemini_error_event() -> None:
    stream = ClosingStream(CHAT_STREAM, fail_after=3)
    upstream = RecordingUpstream(
        respond=lambda r: httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=stream)
    )
    async with proxy_client(upstream, window=100000) as client:
        response = await client.post(STREAM + "?alt=sse", json=history(1))
    events = genai_events(response.content)
    assert "error" in events[-1] and events[-1]["error"]["code"] >= 400
    assert all("error" not in e for e in events[:-1])


async def test_for_ollama_the_bridge_goes_to_its_native_api_with_the_window_set() -> None:
    """Ollama's `/v1` ignores `num_ctx`: a Gemini request for Ollama goes to `/api/chat` through both
    bridges, and its answer comes back as Gemini's, whole and streamed."""
    fake = FakeOllama()
    settings = {"upstream_url": "http://ollama.test/v1", "upstream_kind": "auto", "window": "auto"}
    app = create_app(make_settings(**settings), transport=httpx.ASGITransport(app=fake.app()))
    asked = {
        "contents": [{"role": "user", "parts": [{"text": "Read a.py"}]}],
        "tools": [{"functionDeclarations": [{"name": "read_file", "parametersJsonSchema": TOOL_SCHEMA}]}],
        "generationConfig": {"maxOutputTokens": 500, "topK": 40},
    }
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://proxy.test"
    ) as client:
        whole = await client.post("/v1beta/models/llama3.2:3b:generateContent", json=asked)
        streamed = await client.post(
            "/v1beta/models/llama3.2:3b:streamGenerateContent?alt=sse", json=history(1)
        )
    routes = [path for path, _ in fake.requests if "chat" in path]
    assert routes == ["/api/chat", "/api/chat"], fake.requests
    native = [body for path, body in fake.requests if path == "/api/chat"]
    assert native[0]["options"]["num_ctx"] == 32768 and native[0]["options"]["top_k"] == 40
    assert native[0]["options"]["num_predict"] == 500 and native[0]["stream"] is False
    assert whole.status_code == 200, whole.text
    parts = whole.json()["candidates"][0]["content"]["parts"]
    assert [p["functionCall"]["name"] for p in parts] == ["read_file"]
    assert streamed.status_code == 200, streamed.text
    events = genai_events(streamed.content)
    text = "".join(p.get("text", "") for e in events for p in e["candidates"][0]["content"]["parts"])
    assert text.startswith("Noted: I read")
    assert events[-1]["candidates"][0]["finishReason"] == "STOP"
    assert events[-1]["usageMetadata"]["promptTokenCount"] == fake.answers[-1].prompt_eval_count
