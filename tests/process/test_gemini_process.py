"""The Gemini API through the real `compacting-proxy` process over real sockets, in front of the
scripted Gemini API server (tests/support/upstreams/gemini_model.py): the stream comes through as
`@google/genai` splits and reads it, and the key, in `x-goog-api-key` or `?key=`, is in no line the
proxy logs (its access line shows the path and query), in either log format; and through the Gemini
bridge to a Chat Completions server's stream."""

from __future__ import annotations

import tempfile
from pathlib import Path

import httpx
import pytest

from tests.support.agent_clis import lay_out_tree, model_server
from tests.support.gemini_chats import genai_events, history
from tests.support.gemini_cli import gemini_model
from tests.support.processes import free_port
from tests.support.upstreams.proxy_server import running_proxy

pytestmark = [pytest.mark.process, pytest.mark.timeout(120)]
QUERY_KEY = "AIzaQueryKey0123456789"
HEADER_KEY = "AIzaHeaderKey9876543210"


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_the_stream_comes_through_and_the_key_is_never_logged(log_format: str) -> None:
    body = history(2)
    with tempfile.TemporaryDirectory(prefix="gemini-process-") as tmp:
        tree = lay_out_tree(Path(tmp))
        with (
            gemini_model(100_000, 5, tree) as server,
            running_proxy(server, 100_000, gemini_upstream="native", log_format=log_format) as proxy,
            httpx.Client(base_url=proxy.base_url, timeout=30) as client,
        ):
            path = "/v1beta/models/gemini-2.5-flash:streamGenerateContent"
            with client.stream("POST", f"{path}?alt=sse&key={QUERY_KEY}", json=body) as streamed:
                raw = b"".join(streamed.iter_raw())
            whole = client.post(
                "/v1beta/models/gemini-2.5-flash:generateContent",
                json=body,
                headers={"x-goog-api-key": HEADER_KEY},
            )
            counted = client.post(f"/v1beta/models/gemini-2.5-flash:countTokens?key={QUERY_KEY}", json=body)
            received = httpx.get(f"{server}/_recorded").json()
            log = proxy.log_path.read_text()
    assert streamed.status_code == 200 and streamed.headers["content-type"].startswith("text/event-stream")
    events = genai_events(raw)
    parts = [p for e in events for p in e["candidates"][0]["content"]["parts"]]
    assert parts[0]["text"].startswith("Step 1")
    assert [p["functionCall"]["name"] for p in parts[1:]] == ["run_shell_command", "read_file"]
    assert parts[1]["thoughtSignature"] == "sig-step-1"
    assert events[-1]["candidates"][0]["finishReason"] == "STOP" and "usageMetadata" in events[-1]
    assert whole.status_code == 200 and whole.json()["candidates"][0]["finishReason"] == "STOP"
    assert counted.status_code == 200 and counted.json()["totalTokens"] > 0
    assert [r["key_in"] for r in received] == ["query", "header"]  # the keys reached the server
    assert "streamGenerateContent" in log and "countTokens" in log  # the access lines are there
    assert "key=***" in log
    assert QUERY_KEY not in log and HEADER_KEY not in log


def test_the_bridge_streams_a_chat_servers_tool_calls_as_gemini_events() -> None:
    """Through the real process to a Chat Completions server (the scripted agent model's chat, which
    streams its tool calls in deltas): the Gemini events a genai client reads, the calls whole."""
    body = history(1)
    with tempfile.TemporaryDirectory(prefix="gemini-bridge-") as tmp:
        tree = lay_out_tree(Path(tmp))
        with (
            model_server(100_000, 5, tree, free_port(), None) as server,
            running_proxy(f"{server}/v1", 100_000) as proxy,
            httpx.Client(base_url=proxy.base_url, timeout=30) as client,
        ):
            path = "/v1beta/models/agent-model:streamGenerateContent"
            with client.stream("POST", f"{path}?alt=sse&key={QUERY_KEY}", json=body) as streamed:
                raw = b"".join(streamed.iter_raw())
            received = httpx.get(f"{server}/_recorded").json()["received"]
    assert streamed.status_code == 200, raw
    assert received[-1]["format"] == "chat" and received[-1]["stream"] is True
    events = genai_events(raw)
    assert b"[DONE]" not in raw
    last = events[-1]["candidates"][0]
    calls = [p["functionCall"] for p in last["content"]["parts"]]
    assert [c["id"] for c in calls] == [f"call_s1_{k}" for k in range(len(calls))] and calls
    assert all(c["name"] == "run_shell_command" and c["args"]["command"] for c in calls)
    assert last["finishReason"] == "STOP" and events[-1]["usageMetadata"]["promptTokenCount"] > 0
