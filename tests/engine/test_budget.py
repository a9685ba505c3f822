"""What a request is allowed: the reply room, the margin for the estimate's error, the
`x-compaction-*` counts, and the server-side context management the proxy must honour or apply
(issues 16 and 19). In-process through `httpx.ASGITransport`, for the logic."""

from __future__ import annotations

import json
import random
import urllib.parse
from typing import Any

import httpx
import pytest

from proxy.counting.margin import MarginMeter, calibrated_margin
from proxy.counting.tokenizers import load_text_counter
from proxy.counting.tokens import MESSAGE_OVERHEAD, REPLY_PRIMER, RequestCounter, text_of
from proxy.engine.plan import budget_for
from proxy.formats import ANTHROPIC, RESPONSES, WireFormat
from proxy.formats.anthropic_context_edits import CLEARED_RESULT
from proxy.settings import Settings
from tests.support.fakes import RecordingUpstream, completion, proxy_client
from tests.support.loops import PYTEST, one_request_loop, step


async def test_capped_is_a_count_like_truncated_and_dropped() -> None:
    loop = one_request_loop(3, lines=80)
    log = "\n".join(f"2026-12-03 07:{k % 60:02}:00 INFO step {k} ok" for k in range(9000))
    step(loop, 99, [("bash", log + "\n" + PYTEST)])
    upstream = RecordingUpstream()
    async with proxy_client(upstream, window=32000) as client:
        response = await client.post("/v1/chat/completions", json={"model": "m", "messages": loop})
        report = (await client.post("/compact", json={"model": "m", "messages": loop})).json()["report"]
    assert response.status_code == 200
    assert report["capped"] == [len(loop) - 1], "the indices stay in /compact's report"
    assert response.headers["x-compaction-capped"] == "1"
    for name in ("truncated", "dropped", "capped"):
        assert response.headers[f"x-compaction-{name}"].isdigit()


# --- context_management: honoured where the server implements it, applied by the proxy elsewhere --


def thinking_loop(turns: int) -> list[dict[str, Any]]:
    """An Anthropic tool loop: each user request answered by thinking + a tool call, its result,
    then thinking + text."""
    messages: list[dict[str, Any]] = []
    for t in range(turns):
        messages.append({"role": "user", "content": f"request {t}"})
        messages.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": f"plan {t}", "signature": "s"},
                    {
                        "type": "tool_use",
                        "id": f"tu_{t}",
                        "name": "Read" if t % 2 else "Bash",
                        "input": {"n": t},
                    },
                ],
            }
        )
        messages.append(
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": f"tu_{t}", "content": "x" * 400}],
            }
        )
        messages.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": f"done {t}", "signature": "s"},
                    {"type": "text", "text": f"answer {t}"},
                ],
            }
        )
    return messages


def thinking_turns(messages: list[dict[str, Any]]) -> list[int]:
    """Which requests' answers still hold thinking."""
    return sorted(
        {
            i // 4
            for i, m in enumerate(messages)
            if m["role"] == "assistant" and any(b["type"] == "thinking" for b in m["content"])
        }
    )


def edited(messages: list[dict[str, Any]], *edits: dict[str, Any]) -> list[dict[str, Any]]:
    body = {"model": "m", "messages": messages, "context_management": {"edits": list(edits)}}
    out = ANTHROPIC.context_edits(body)
    assert "context_management" not in out, "applied by the proxy, the field is not forwarded"
    result: list[dict[str, Any]] = out["messages"]
    return result


def test_clear_thinking_keep_all_as_claude_code_sends_it_changes_nothing() -> None:
    messages = thinking_loop(4)
    body = {
        "model": "m",
        "messages": messages,
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
    }
    assert ANTHROPIC.context_edits(body) == {k: v for k, v in body.items() if k != "context_management"}


def test_clear_thinking_keeps_the_last_turns_thinking_by_default_and_keep_turns() -> None:
    messages = thinking_loop(4)
    assert thinking_turns(edited(messages, {"type": "clear_thinking_20251015"})) == [3]
    kept = edited(
        messages, {"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 2}}
    )
    assert thinking_turns(kept) == [2, 3]
    assert [b["type"] for b in kept[1]["content"]] == ["tool_use"], "the call stays, its thinking goes"
    assert kept[2] == messages[2] and len(kept) == len(messages)


def results(messages: list[dict[str, Any]]) -> list[str]:
    return [
        "cleared" if b["content"] == CLEARED_RESULT else "kept"
        for m in messages
        if isinstance(m["content"], list)
        for b in m["content"]
        if b["type"] == "tool_result"
    ]


def test_clear_tool_uses_clears_all_but_the_last_keep_once_triggered() -> None:
    messages = thinking_loop(5)
    tokens = {"type": "input_tokens", "value": 100}
    assert edited(messages, {"type": "clear_tool_uses_20250919"}) == messages, "below the default 100k"
    out = edited(
        messages,
        {"type": "clear_tool_uses_20250919", "trigger": tokens, "keep": {"type": "tool_uses", "value": 2}},
    )
    assert results(out) == ["cleared", "cleared", "cleared", "kept", "kept"]
    assert out[1]["content"][1]["input"] == {"n": 0}, "inputs stay unless clear_tool_inputs"
    spared = edited(
        messages, {"type": "clear_tool_uses_20250919", "trigger": tokens, "exclude_tools": ["Read"]}
    )
    assert results(spared) == ["cleared", "kept", "kept", "kept", "kept"]  # tu_1 is a Read; the last 3 kept
    inputs = edited(
        messages,
        {
            "type": "clear_tool_uses_20250919",
            "trigger": tokens,
            "keep": {"type": "tool_uses", "value": 1},
            "clear_tool_inputs": True,
        },
    )
    assert inputs[1]["content"][1]["input"] == {} and inputs[-3]["content"][1]["input"] == {"n": 4}
    too_little = {"type": "input_tokens", "value": 10**6}
    assert (
        edited(
            messages, {"type": "clear_tool_uses_20250919", "trigger": tokens, "clear_at_least": too_little}
        )
        == messages
    )


@pytest.mark.parametrize(
    ("url", "kind", "wire", "body", "honoured"),
    [
        ("http://localhost:8080/v1", "auto", ANTHROPIC, {"context_management": {"edits": []}}, False),
        ("http://localhost:8080/v1", "anthropic", ANTHROPIC, {"context_management": {"edits": []}}, True),
        ("https://api.anthropic.com/v1", "auto", ANTHROPIC, {"context_management": {"edits": []}}, True),
        ("https://api.anthropic.com/v1", "auto", ANTHROPIC, {}, False),
        (
            "http://localhost:8000/v1",
            "auto",
            RESPONSES,
            {"context_management": [{"type": "compaction"}]},
            False,
        ),
        (
            "https://api.openai.com/v1",
            "auto",
            RESPONSES,
            {"context_management": [{"type": "compaction"}]},
            True,
        ),
        ("https://api.openai.com/v1", "auto", RESPONSES, {"input": [{"type": "compaction"}]}, True),
        ("http://localhost:8000/v1", "auto", RESPONSES, {"input": [{"type": "compaction"}]}, False),
    ],
)
def test_server_side_context_management_is_honoured_only_where_the_server_does_it(
    url: str, kind: str, wire: WireFormat, body: dict[str, Any], honoured: bool
) -> None:
    host = (urllib.parse.urlsplit(url).hostname or "").lower()
    assert wire.server_manages_context(body, upstream_host=host, upstream_kind=kind) is honoured


# --- the reply room: a huge max_tokens must not leave an agent only its last exchange -------------


def claude_code_request(exchanges: int) -> dict[str, Any]:
    """A Claude Code request at a 32k window: a fixed part (system prompt and tool schemas) of
    about 17.5k tokens, a tool loop, and the `max_tokens` it asks for."""
    tools = [
        {
            "name": f"Tool{i}",
            "description": "Reads files and runs commands. " * 170,
            "input_schema": {"type": "object"},
        }
        for i in range(12)
    ]
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Fix the failing test in src/."}]
    for i in range(exchanges):
        use = {"type": "tool_use", "id": f"t{i}", "name": "Tool0", "input": {"i": i}}
        result = {"type": "tool_result", "tool_use_id": f"t{i}", "content": f"line {i}: ok\n" * 160}
        messages += [{"role": "assistant", "content": [use]}, {"role": "user", "content": [result]}]
    return {
        "model": "m",
        "max_tokens": 32000,
        "system": "You are Claude Code. " * 500,
        "tools": tools,
        "messages": messages,
    }


async def test_a_32k_max_tokens_keeps_the_line_and_is_clamped_for_a_server_that_refuses() -> None:
    """vLLM and OpenAI refuse prompt + max_tokens over the window: by default the reply limit is
    clamped to what is left (and said so), and the history is not compacted for the reply's sake."""
    upstream = RecordingUpstream(
        respond=lambda r: httpx.Response(200, json={"type": "message", "content": []})
    )
    body = claude_code_request(6)
    async with proxy_client(upstream, window=32768, tokenizer="estimate") as client:
        response = await client.post("/v1/messages", json=body)
        report = (await client.post("/compact/v1/messages", json=body)).json()["report"]
    assert 17_000 < report["tokens_before"] < int(32768 * 0.8), report
    sent = upstream.last_json()
    assert sent["messages"] == body["messages"], "under the line: nothing compacted for the reply"
    clamped = int(response.headers["x-compaction-max-tokens"])
    assert sent["max_tokens"] == clamped < 32768 - report["tokens_before"]


async def test_a_32k_max_tokens_is_left_alone_for_a_server_that_stops_at_the_window() -> None:
    """llama.cpp and Ollama end a reply at the window's end: nothing to clamp, and a modest reply
    room only (the history keeps its notes)."""
    upstream = RecordingUpstream(
        respond=lambda r: httpx.Response(200, json={"type": "message", "content": []})
    )
    body = claude_code_request(6)
    raw = json.dumps(body).encode()
    async with proxy_client(upstream, window=32768, tokenizer="estimate", upstream_kind="ollama") as client:
        response = await client.post(
            "/v1/messages", content=raw, headers={"content-type": "application/json"}
        )
    assert upstream.last.content == raw
    assert not any(name.startswith("x-compaction") for name in response.headers)


async def test_over_the_line_a_32k_max_tokens_costs_notes_not_the_history() -> None:
    upstream = RecordingUpstream(
        respond=lambda r: httpx.Response(200, json={"type": "message", "content": []})
    )
    body = claude_code_request(16)
    async with proxy_client(upstream, window=32768, tokenizer="estimate") as client:
        response = await client.post("/v1/messages", json=body)
    assert int(response.headers["x-compaction-truncated"]) > 0
    assert response.headers["x-compaction-dropped"] == "0", "notes first: every exchange stays"
    assert len(upstream.last_json()["messages"]) == len(body["messages"])


# --- never over the window on the proxy's own estimate, and no false 400s -----------------------


def strings_output(lines: int, seed: int) -> str:
    """What `strings` prints for a binary: symbols, versions, paths and hex. The estimate counts it
    about 12% under cl100k (issue 19: 7,672 estimated, 8,641 real)."""
    rnd = random.Random(seed)
    choices = [
        lambda: f"GLIBC_2.{rnd.randint(2, 34)}",
        lambda: f"_ZN{rnd.randint(1, 9)}foo{rnd.randint(10, 99)}barE",
        lambda: ".text",
        lambda: "__libc_start_main",
        lambda: "/usr/lib/x86_64-linux-gnu/libc.so.6",
        lambda: f"{rnd.getrandbits(32):08x}",
        lambda: "gmon_start",
        lambda: "AWAVAUATUSH",
        lambda: "[]A\\A]A^A_",
    ]
    return "\n".join(rnd.choice(choices)() for _ in range(lines))


def real_tokens(messages: list[dict[str, Any]]) -> int:
    """The request's size by the heavier of cl100k and Qwen2.5 (the model is not named, so either
    may be its tokenizer): each message's text and the template's markers around it."""
    return max(
        sum(count(text_of(m.get("content"))) + MESSAGE_OVERHEAD for m in messages) + REPLY_PRIMER
        for count in (load_text_counter("cl100k_base"), load_text_counter("qwen2.5"))
    )


def binary_chat() -> list[dict[str, Any]]:
    """A pasted `strings` dump (never cut) over the line on its own, and a tool result after it."""
    return [
        {"role": "system", "content": "You are a reverse engineer."},
        {"role": "user", "content": "What does this binary link against?\n" + strings_output(900, 1)},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "objdump", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": strings_output(300, 2)},
    ]


async def test_a_request_within_the_estimates_error_of_the_window_is_compacted_not_sent_over() -> None:
    messages = binary_chat()
    assert real_tokens(messages) > 8192, "as it came, it is over the real window"
    upstream = RecordingUpstream()
    async with proxy_client(upstream, tokenizer="estimate") as client:  # the window: 8,192
        response = await client.post("/v1/chat/completions", json={"model": "m", "messages": messages})
    assert response.status_code == 200
    assert int(response.headers["x-compaction-tokens-before"]) <= 8192, "by the estimate it fits as it came"
    sent = upstream.last_json()["messages"]
    assert sent != messages and real_tokens(sent) <= 8192


def tokenize_upstream(count: int) -> RecordingUpstream:
    """An upstream with vLLM's `/tokenize` (vLLM 0.11, `serving_tokenization.py`: `{"count": N, ...}`)."""

    def respond(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/tokenize":
            return httpx.Response(200, json={"count": count, "max_model_len": 8192, "tokens": []})
        return httpx.Response(200, json=completion())

    return RecordingUpstream(respond=respond)


def overcounted_chat() -> list[dict[str, Any]]:
    """A pasted document the estimate puts over the 8k window (digits it charges nearly a token each)."""
    table = "\n".join(f"{i:06d} {i * 7919 % 1000003:07d} {i * 31 % 99991:05d}" for i in range(410))
    return [{"role": "user", "content": "Sum the second column:\n" + table}]


async def test_an_estimate_over_the_window_is_counted_exactly_before_refusing() -> None:
    body = {"model": "m", "messages": overcounted_chat()}
    upstream = tokenize_upstream(8100)  # the server's own count: it fits
    async with proxy_client(upstream, tokenizer="estimate") as client:
        report = (await client.post("/compact", json=body)).json()["report"]
        response = await client.post("/v1/chat/completions", json=body)
    assert report["tokens_before"] > 8192 or report["counted_by"] == "upstream"
    assert response.status_code == 200, response.text
    assert upstream.last.url.path.endswith("/chat/completions")
    assert json.loads(upstream.last.content)["messages"] == body["messages"]


async def test_an_exact_count_over_the_window_is_refused() -> None:
    body = {"model": "m", "messages": overcounted_chat()}
    async with proxy_client(tokenize_upstream(9100), tokenizer="estimate") as client:
        response = await client.post("/v1/chat/completions", json=body)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "context_length_exceeded"


async def test_without_an_exact_count_what_only_the_heaviest_vocabulary_puts_over_is_forwarded() -> None:
    """An upstream without `/tokenize` (OpenAI, Ollama), an unnamed model: this table is 8,614 tokens
    by Qwen2.5 (digits one a token) at an 8k window, but fits cl100k and Llama 3 (three a token). A
    guess never refuses: it is forwarded, and the server without `/tokenize` is asked once, not per
    request (issue 34, row 1)."""
    body = {"model": "m", "messages": overcounted_chat()}
    upstream = RecordingUpstream()
    async with proxy_client(upstream, tokenizer="estimate") as client:
        response = await client.post("/v1/chat/completions", json=body)
        again = await client.post("/v1/chat/completions", json=body)
    assert response.status_code == 200 and again.status_code == 200
    assert [json.loads(r.content)["messages"] for r in upstream.forwarded] == [body["messages"]] * 2
    tokenize_calls = [r for r in upstream.requests if r.url.path == "/tokenize"]
    assert len(tokenize_calls) == 1, "a server without /tokenize is asked once, not per request"


def test_the_margin_follows_the_kind_of_text() -> None:
    meter = MarginMeter()
    english = [{"role": "user", "content": "The quick brown fox jumps over the lazy dog. " * 50}]
    chinese = [{"role": "user", "content": "这是一份粘贴进来的中文文档内容很长" * 50}]
    assert 0.16 <= meter.margin(english) <= 0.3
    assert meter.margin(chinese) > 0.45  # cl100k spends 1.4-1.6x the estimate on Chinese
    # Calibrated on English, a Chinese paste is still judged by its own margin; a heavier factor is kept.
    assert calibrated_margin(meter.margin(chinese), 1.02) > 0.4
    assert calibrated_margin(0.2, 2.0) == pytest.approx(0.05)
    # Judged against the window less the margin: a Chinese paste the estimate puts at 14,866 tokens
    # at a 16k window (17,264 real by cl100k, issue 19) is over the usable window.
    window = Settings(_env_file=None, window=16384).window_for("m")
    budget = budget_for({}, window, RequestCounter(len), margin=meter.margin(chinese))
    assert budget.window is not None and budget.window < 14_866 and budget.limit <= budget.window


def heavy_old_results_chat() -> list[dict[str, Any]]:
    """Old tool results the server counts at 2.7 times the estimate, then a pasted document
    (never cut) that fits the 8k window on its own: the whole request's factor is not the factor
    of what is left once the old results go (seen on a mini-swe-agent replay at 8k)."""
    rnd = random.Random(7)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Find the corrupt block."}]
    for k in range(8):
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": f"c{k}",
                        "type": "function",
                        "function": {"name": "dump", "arguments": f'{{"k":{k}}}'},
                    }
                ],
            }
        )
        words = " ".join(rnd.choice(["block", "header", "length", "offset", "record"]) for _ in range(4000))
        messages.append({"role": "tool", "tool_call_id": f"c{k}", "content": words})
    # Digits the estimate charges nearly a token each: over the window less the estimate's margin.
    table = "\n".join(f"{i:06d} {i * 7919 % 1000003:07d} {i * 31 % 99991:05d}" for i in range(340))
    messages.append({"role": "user", "content": "Which block is corrupt?\n" + table})
    return messages


def doubling_tokenize_upstream() -> RecordingUpstream:
    """`/tokenize` (vLLM 0.11's `{"count": N}`) counting tool results at 2.7 times the estimate's rate."""

    def count(body: dict[str, Any]) -> int:
        total = 0
        for message in body["messages"]:
            chars = len(text_of(message.get("content")))
            total += (chars * 10 // 15 if message["role"] == "tool" else chars // 4) + MESSAGE_OVERHEAD
        return total

    def respond(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/tokenize":
            return httpx.Response(200, json={"count": count(json.loads(request.content)), "tokens": []})
        return httpx.Response(200, json=completion())

    return RecordingUpstream(respond=respond)


async def test_a_request_is_refused_only_if_its_compacted_form_does_not_fit_by_the_exact_count() -> None:
    messages = heavy_old_results_chat()
    upstream = doubling_tokenize_upstream()
    async with proxy_client(upstream, tokenizer="estimate") as client:
        response = await client.post("/v1/chat/completions", json={"model": "m", "messages": messages})
    assert response.status_code == 200, response.text
    sent = upstream.last_json()["messages"]
    assert sent[-1] == messages[-1] and sent[0] == messages[0], "the user messages as they came"
    tokenize = [json.loads(r.content) for r in upstream.requests if r.url.path == "/tokenize"]
    assert tokenize and tokenize[-1]["messages"] == sent, "what was forwarded was counted exactly"
