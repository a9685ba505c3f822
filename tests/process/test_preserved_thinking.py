"""Anthropic's preserved thinking through the real proxy process: a Claude-Code-shaped loop (system
blocks and the last message marked for the prompt cache, one tool, adaptive thinking with
`context_management`, streamed, each answer's blocks sent back as they came) grows past a 16k
window, in front of a server that binds each thinking block to the conversation it was made in,
as Anthropic's API does for Claude Fable 5.1 and later (`tests.support.upstreams.preserved_thinking`)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import pytest

from tests.support.format_fixtures import running_proxy
from tests.support.processes import free_port, running

pytestmark = pytest.mark.process
MODEL = "claude-opus-5-5"
WINDOW = 16_000
STEPS = 24
TOOL = {
    "name": "Read",
    "description": "Read a file from the local filesystem.",
    "input_schema": {"type": "object", "properties": {"file_path": {"type": "string"}}},
}
SYSTEM = [
    {"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude."},
    {"type": "text", "text": "Read files before you change them.", "cache_control": {"type": "ephemeral"}},
]


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    port = free_port()
    args = [sys.executable, "-m", "tests.support.upstreams.preserved_thinking", "--port", str(port)]
    args += ["--steps", str(STEPS)]
    with running(args, ready_url=f"http://127.0.0.1:{port}/v1/models"):
        yield f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def proxy(upstream: str) -> Iterator[str]:
    with running_proxy(upstream, COMPACT_WINDOW=str(WINDOW)) as url:
        yield url


def received(upstream: str) -> list[dict[str, Any]]:
    answer: list[dict[str, Any]] = httpx.get(f"{upstream}/_recorded", timeout=10).json()
    return answer


def result(step: int) -> dict[str, Any]:
    """A file read, as Claude Code sends its result: the last block marked for the prompt cache."""
    text = "\n".join(f"{n:6}\tdef handler_{step}_{n}(request): return request.json()" for n in range(90))
    block = {"type": "tool_result", "tool_use_id": f"toolu_{step:04d}", "content": text}
    return {"role": "user", "content": [{**block, "cache_control": {"type": "ephemeral"}}]}


def unmarked(message: dict[str, Any]) -> dict[str, Any]:
    """Claude Code moves the cache marker to the newest message: an older one loses it."""
    content = message["content"]
    if not isinstance(content, list):
        return message
    return {**message, "content": [{k: v for k, v in b.items() if k != "cache_control"} for b in content]}


def ask(client: anthropic.Anthropic, messages: list[dict[str, Any]], system: Any = SYSTEM) -> Any:
    """One streamed request as Claude Code makes it (adaptive thinking, `context_management`)."""
    with client.messages.stream(
        model=MODEL,
        max_tokens=4000,
        system=system,
        tools=[TOOL],  # type: ignore[list-item]
        thinking={"type": "adaptive"},  # type: ignore[typeddict-item]
        messages=messages,
        extra_body={"context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]}},
    ) as stream:
        return stream.get_final_message()


def test_a_claude_code_loop_past_the_window_keeps_every_thinking_block_it_sends_valid(
    proxy: str, upstream: str
) -> None:
    client = anthropic.Anthropic(base_url=proxy, api_key="sk-ant-test", max_retries=0)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Survey the handlers and fix the bug."}]
    before = len(received(upstream))
    for step in range(1, STEPS + 2):
        answer = ask(client, messages)  # raises on the server's 400
        blocks = [b.model_dump(mode="json", exclude_none=True) for b in answer.content]
        messages = [*map(unmarked, messages), {"role": "assistant", "content": blocks}]
        if answer.stop_reason != "tool_use":
            break
        messages.append(result(step))
    assert step == STEPS + 1, "the loop ran to its end"
    seen = received(upstream)[before:]
    assert not [r for r in seen if r["refused"]], seen
    assert len(seen) == STEPS + 1, "no request needed sending twice"
    # Request k carries the thinking of the k answers before it, unless the proxy took some out.
    dropped = [k for k, r in enumerate(seen) if r["thinking_sent"] < k]
    assert dropped, f"the loop outgrew {WINDOW:,} tokens and the proxy compacted it: {seen}"
    assert max(r["tokens"] for r in seen) < WINDOW
    assert all(r["thinking_sent"] == k for k, r in enumerate(seen[: dropped[0]])), "as they came till then"


def test_a_request_refused_for_a_bound_block_goes_once_more_without_thinking(
    proxy: str, upstream: str
) -> None:
    """A client that changed its own history (its system prompt, the date in it) under the window:
    the proxy forwards it as it came, the server refuses it, the proxy sends it again without its
    thinking blocks (what `drop_block` would drop), and the client gets the answer."""
    client = anthropic.Anthropic(base_url=proxy, api_key="sk-ant-test", max_retries=0)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "What is in handlers.py?"}]
    first = ask(client, messages)
    blocks = [b.model_dump(mode="json", exclude_none=True) for b in first.content]
    messages += [{"role": "assistant", "content": blocks}, result(1)]
    before = len(received(upstream))
    answer = ask(client, messages, system=[*SYSTEM, {"type": "text", "text": "Today is 2026-12-07."}])
    assert answer.stop_reason == "tool_use"
    seen = received(upstream)[before:]
    assert [(r["refused"], r["thinking_sent"]) for r in seen] == [(True, 1), (False, 0)]
