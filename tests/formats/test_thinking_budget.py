"""A thinking budget kept valid beside a lowered reply limit (issue 24, item 4).

Claude Code with thinking on asks `max_tokens: 32000` and `thinking.budget_tokens: 31999` on every
request; at a 32k window the proxy lowers `max_tokens` to what the prompt leaves, and Anthropic
requires 1024 <= `budget_tokens` < `max_tokens` (strict servers refuse the pair otherwise). The two are
lowered together, and `x-compaction-max-tokens` says so. Responses' `reasoning`, Ollama's `think` and
Chat Completions' `reasoning_effort` carry no token budget, so no rule binds them to the reply limit:
they are forwarded as they came.
"""

from __future__ import annotations

import json
import threading
from http.server import ThreadingHTTPServer
from typing import Any, ClassVar

import pytest

from tests.support.fakes import RecordingUpstream, anthropic_message, proxy_client
from tests.support.json_handler import JsonHandler
from tests.support.processes import VENV_BIN, free_port, running

MIN_THINKING_BUDGET = 1024  # Anthropic: 1024 <= budget_tokens < max_tokens
MODEL = "claude-sonnet-4-5"


def anthropic_body(paste_words: int, *, max_tokens: int = 32000, budget: int = 31999) -> dict[str, Any]:
    """A Claude Code-like request: a long pasted document leaves a few thousand tokens of a 32k window."""
    text = " ".join(f"word{i % 97} value" for i in range(paste_words))
    return {
        "model": MODEL,
        "max_tokens": max_tokens,
        "thinking": {"type": "enabled", "budget_tokens": budget},
        "system": "You are Claude Code.",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Summarise:\n" + text}]}],
    }


async def post(body: dict[str, Any], **settings: Any) -> tuple[Any, dict[str, Any]]:
    import httpx

    upstream = RecordingUpstream(
        respond=lambda request: httpx.Response(200, json=anthropic_message(model=MODEL))
    )
    async with proxy_client(upstream, window=32768, clamp_max_tokens=True, **settings) as client:
        response = await client.post("/v1/messages", json=body)
    assert response.status_code == 200, response.text
    return response, upstream.last_json()


async def test_the_thinking_budget_is_lowered_with_a_clamped_max_tokens() -> None:
    response, sent = await post(anthropic_body(9000))
    max_tokens, budget = sent["max_tokens"], sent["thinking"]["budget_tokens"]
    assert max_tokens < 32000, "the reply limit was lowered to what the prompt leaves"
    assert MIN_THINKING_BUDGET <= budget < max_tokens, "the pair Anthropic accepts"
    assert sent["thinking"]["type"] == "enabled"
    assert response.headers["x-compaction-max-tokens"] == f"{max_tokens}; budget_tokens={budget}"


async def test_thinking_is_turned_off_when_no_valid_budget_fits() -> None:
    # A prompt that leaves 1,024 tokens or less of the window for the reply.
    response, sent = await post(anthropic_body(9900))
    assert sent["max_tokens"] <= MIN_THINKING_BUDGET
    assert sent["thinking"] == {"type": "disabled"}
    assert response.headers["x-compaction-max-tokens"] == f"{sent['max_tokens']}; thinking=disabled"


async def test_a_budget_already_under_the_clamped_limit_is_left_alone() -> None:
    response, sent = await post(anthropic_body(9000, budget=2000))
    assert sent["thinking"] == {"type": "enabled", "budget_tokens": 2000}
    assert response.headers["x-compaction-max-tokens"] == str(sent["max_tokens"])


@pytest.mark.parametrize(
    ("asked", "limit", "expected"),
    [(31999, 4000, 3000), (31999, 1100, 1024), (31999, 1024, 0), (2000, 4000, 2000), (3000, 3000, 2250)],
)
def test_the_budget_rule(asked: int, limit: int, expected: int) -> None:
    from proxy.engine.plan import thinking_budget

    got = thinking_budget(asked, limit)
    assert got == expected
    assert got == 0 or MIN_THINKING_BUDGET <= got < limit


# --- the real process, the Anthropic SDK, an upstream that enforces Anthropic's rule ----------------


class _Anthropic(JsonHandler):
    """Anthropic's Messages API as far as this rule goes (its documented validation of extended
    thinking): `thinking.budget_tokens` must be >= 1024 and < `max_tokens`, else 400
    `invalid_request_error`; otherwise a one-word answer. Every request body is recorded."""

    bodies: ClassVar[list[dict[str, Any]]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        type(self).bodies.append(body)
        thinking = body.get("thinking") or {}
        if thinking.get("type") == "enabled":
            budget = thinking.get("budget_tokens", 0)
            problem = (
                "thinking.budget_tokens: Input should be greater than or equal to 1024"
                if budget < MIN_THINKING_BUDGET
                else "`max_tokens` must be greater than `thinking.budget_tokens`"
                if budget >= body["max_tokens"]
                else None
            )
            if problem:
                self._send(
                    400, {"type": "error", "error": {"type": "invalid_request_error", "message": problem}}
                )
                return
        self._send(200, anthropic_message(model=MODEL))


@pytest.mark.process
def test_claude_code_with_thinking_through_the_real_proxy() -> None:
    """Claude Code's pair (32,000 / 31,999) at a 32k window: the SDK gets its answer, and what the
    upstream received is a valid pair under the window."""
    import anthropic  # here, not at the top: the fast tier runs this file without it (a second of import)

    handler = type("Anthropic", (_Anthropic,), {"bodies": []})
    server = ThreadingHTTPServer(("127.0.0.1", free_port()), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = free_port()
    env = {
        "COMPACT_UPSTREAM_URL": f"http://127.0.0.1:{server.server_port}",
        "COMPACT_UPSTREAM_KIND": "anthropic",
        "COMPACT_WINDOW": "32768",
    }
    args = [str(VENV_BIN / "compacting-proxy"), "--port", str(port), "--no-access-log"]
    try:
        with running(args, ready_url=f"http://127.0.0.1:{port}/healthz", env=env):
            client = anthropic.Anthropic(base_url=f"http://127.0.0.1:{port}", api_key="test", max_retries=0)
            body = anthropic_body(6000)
            raw = client.messages.with_raw_response.create(
                model=body["model"],
                max_tokens=body["max_tokens"],
                thinking=body["thinking"],
                system=body["system"],
                messages=body["messages"],
                timeout=60,  # as Claude Code streams; else the SDK asks to stream a 32k reply
            )
            answer = raw.parse()
    finally:
        server.shutdown()
        server.server_close()
    assert answer.content[0].type == "text"
    sent = handler.bodies[-1]
    assert MIN_THINKING_BUDGET <= sent["thinking"]["budget_tokens"] < sent["max_tokens"] < 32000
    header = raw.headers["x-compaction-max-tokens"]
    assert header == f"{sent['max_tokens']}; budget_tokens={sent['thinking']['budget_tokens']}"
