"""The proxy's own "cannot fit" error, in each route's overflow language, through each official
client against the real proxy process: what the agent CLIs match to start their own compaction,
and the client's own field named as the culprit.

The strings matched are the clients' own:
- Claude Code 2.1.197 (npm `@anthropic-ai/claude-code-linux-x64`, the bundled binary): the regular
  expression `prompt is too long[^0-9]*(\\d+)\\s*tokens?\\s*>\\s*(\\d+)`; Claude Code 2.1.0 (npm
  `@anthropic-ai/claude-code`, `cli.js`): `A.message.toLowerCase().includes("prompt is too long")`.
- openai/codex (`codex-rs/codex-api/src/sse/responses.rs`, `is_context_window_error`): a
  `response.failed` event whose `error.code` is `context_length_exceeded`; a plain HTTP 400 is only
  an `InvalidRequest` there (`codex-rs/codex-api/src/api_bridge.rs`, `map_api_error`).
- opencode (sst/opencode, the `ProviderError` namespace's `OVERFLOW_PATTERNS`, found by content in
  the code index, which did not name its path; adapted there from pi-mono's
  `packages/ai/src/utils/overflow.ts`): `/exceeds the context window/i` (OpenAI, "Completions +
  Responses API message text"), `/maximum context length is \\d+ to/i`, `/reduce the length of the
  messages/i`, `/prompt is too long/i`.
- Ollama: `{"error": "..."}` (api/types.go `StatusError`), "input length exceeds maximum context length".
"""

from __future__ import annotations

import re
from typing import Any

import anthropic
import httpx
import ollama
import openai
import pytest

from tests.support.format_fixtures import WINDOW, recorded

pytestmark = pytest.mark.process  # starts the real proxy (and upstreams) on loopback

CLAUDE_CODE_2_1_197 = re.compile(r"prompt is too long[^0-9]*(\d+)\s*tokens?\s*>\s*(\d+)")
OPENAI_WORDING = re.compile(r"maximum context length is \d+ tokens", re.IGNORECASE)
OPENCODE_PATTERNS = [
    re.compile(p, re.IGNORECASE)
    for p in (
        r"prompt is too long",
        r"exceeds the context window",
        r"maximum context length is \d+ to",
        r"reduce the length of the messages",
    )
]


def opencode_sees_an_overflow(message: str) -> bool:
    return any(p.search(message) for p in OPENCODE_PATTERNS)


HUGE = "word " * (WINDOW * 2)  # a system prompt alone well over the window


def claude(base_url: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=base_url, api_key="sk-ant-test", max_retries=0, timeout=30)


def oai(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base_url}/v1", api_key="sk-test", max_retries=0, timeout=30)


def test_anthropic_overflow_speaks_claude_codes_language_and_names_system(
    upstream: str, proxy: str, fresh_record: None
) -> None:
    with pytest.raises(anthropic.BadRequestError) as caught:
        claude(proxy).messages.create(
            model="small",
            max_tokens=32000,
            system=HUGE,
            messages=[{"role": "user", "content": "hi"}],
        )
    error = caught.value.body["error"]  # type: ignore[index]
    assert error["type"] == "invalid_request_error"
    message = error["message"]
    assert "prompt is too long" in message.lower()  # Claude Code 2.1.0
    match = CLAUDE_CODE_2_1_197.search(message)  # Claude Code 2.1.197
    assert match and int(match.group(1)) > int(match.group(2)) == WINDOW
    assert "The largest part is system" in message and "messages[0]" not in message
    assert "shorten the system prompt" in message
    assert "max_tokens" not in message, "the prompt alone is over the window: the reply limit is not why"
    assert not recorded(upstream), "nothing is forwarded"


def test_openai_chat_overflow_names_the_message_in_the_clients_indexing(proxy: str) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        oai(proxy).chat.completions.create(
            model="small",
            messages=[
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "hello"},
                {"role": "user", "content": HUGE},
            ],
        )
    assert caught.value.code == "context_length_exceeded"
    assert OPENAI_WORDING.search(caught.value.message) and opencode_sees_an_overflow(caught.value.message)
    assert caught.value.param == "messages[3]"


def test_tool_schemas_that_do_not_fit_are_named(proxy: str) -> None:
    tools: list[Any] = [
        {
            "type": "function",
            "function": {"name": f"tool_{i}", "description": "does things " * 60, "parameters": {}},
        }
        for i in range(40)
    ]
    with pytest.raises(openai.BadRequestError) as caught:
        oai(proxy).chat.completions.create(
            model="small", messages=[{"role": "user", "content": "hi"}], tools=tools
        )
    assert caught.value.code == "context_length_exceeded"
    assert caught.value.param == "tools"
    assert "fewer tools" in caught.value.message


def test_responses_overflow_names_instructions(proxy: str) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        oai(proxy).responses.create(model="small", instructions=HUGE, input="hi")
    assert caught.value.code == "context_length_exceeded"
    assert OPENAI_WORDING.search(caught.value.message)
    assert "exceeds the context window" in caught.value.message  # OpenAI's Responses wording
    assert caught.value.param == "instructions"


def test_responses_overflow_names_the_input_item(proxy: str) -> None:
    items: list[Any] = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
        {"role": "user", "content": HUGE},
    ]
    with pytest.raises(openai.BadRequestError) as caught:
        oai(proxy).responses.create(model="small", input=items)
    assert caught.value.param == "input[2]"


def test_streamed_responses_overflow_fails_the_stream_as_codex_expects(proxy: str) -> None:
    """Codex starts its compaction on a `response.failed` event with `context_length_exceeded`."""
    events = list(oai(proxy).responses.create(model="small", instructions=HUGE, input="hi", stream=True))
    assert [e.type for e in events] == ["response.created", "response.failed"]
    failed = events[-1].response  # type: ignore[union-attr]
    assert failed.status == "failed" and failed.error is not None
    assert failed.error.code == "context_length_exceeded"


def test_ollama_overflow_in_ollamas_shape(proxy: str) -> None:
    client = ollama.Client(host=proxy, timeout=30)
    with pytest.raises(ollama.ResponseError) as caught:
        client.chat(model="small", messages=[{"role": "user", "content": HUGE}], stream=False)
    assert caught.value.status_code == 400
    assert caught.value.error.startswith("input length exceeds maximum context length")
    raw = httpx.post(
        f"{proxy}/api/chat",
        json={"model": "small", "messages": [{"role": "user", "content": HUGE}]},
    )
    assert raw.status_code == 400 and set(raw.json()) == {"error"}
