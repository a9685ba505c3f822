r"""A scripted model server that plays a coding agent for the real agent CLIs (Claude Code, Codex,
opencode), on a real source tree, with a window it enforces with a real tokenizer.

Run it as a process: ``python -m tests.support.upstreams.agent_model --port N --window W --steps S --tree DIR``.
For each request that offers tools it answers 1-3 calls of the tools the client offers (Claude Code's
``Read``/``Bash``/``Grep``/``Glob``, Codex's ``shell``/``exec_command``/``shell_command``, opencode's
``read``/``bash``/``grep``/``glob``) with real arguments: files of ``DIR`` and grep patterns found in
them. The step is read back from the ids of the newest tool results (``call_s<step>_<k>``), so the
script is a pure function of the request: a retried or compacted request gets the same answer. After
``S`` steps it answers ``TASK-COMPLETE``. A request without tools (titles, summaries) gets a short
text; a summary request (the client's own compaction) gets one carrying ``agent-step N`` so that the
loop resumes where it was.

The window is enforced on the cl100k_base count (the project's own exact counter) of what the model
would see: Anthropic's ``system`` + ``messages`` + ``tools``; Responses' ``instructions`` + ``input`` +
``tools``; chat's ``messages`` + ``tools``. Over it, each format's own overflow error, before any stream:
- ``/v1/messages``: 400 ``{"type": "error", "error": {"type": "invalid_request_error", "message":
  "prompt is too long: N tokens > W maximum"}}`` (Anthropic's API; Claude Code 2.1.332's bundled JS
  reads it with ``/prompt is too long[^0-9]*(\d+)\s*tokens?\s*>\s*(\d+)/``);
- ``/v1/responses`` and ``/v1/chat/completions``: 400 ``{"error": {"code": "context_length_exceeded",
  "type": "invalid_request_error", ...}}`` with OpenAI's wording.

The streams follow, event for event:
- Anthropic Messages SSE (docs.anthropic.com "Streaming Messages", anthropic-sdk-python 2.x
  ``RawMessageStreamEvent``): ``message_start``, per block ``content_block_start`` / ``_delta``
  (``thinking_delta`` + ``signature_delta``, ``text_delta``, ``input_json_delta``) / ``_stop``, a
  ``ping``, ``message_delta`` with ``stop_reason`` and usage, ``message_stop``; a ``thinking`` block first
  when the request enables thinking.
- OpenAI Responses SSE as openai-python 3.x ``ResponseStreamEvent`` has it, and as openai/codex
  (``codex-rs/codex-api/src/sse/responses.rs``, ``process_sse``) reads it: ``response.created``,
  ``response.in_progress``, ``response.output_item.added`` / ``.done`` per item (``message`` with
  ``output_text``, ``function_call`` with ``function_call_arguments.delta`` / ``.done``),
  ``response.completed`` with ``id`` and ``usage`` (``input_tokens``, ``input_tokens_details``,
  ``output_tokens``, ``output_tokens_details``, ``total_tokens``: the fields Codex requires); each with
  ``sequence_number``. Codex 0.171 treats ``code: context_length_exceeded`` as its context-window error.
- Chat Completions SSE (OpenAI's ``chat.completion.chunk``, as ``@ai-sdk/openai-compatible``, bundled
  in opencode 1.18, parses it): a role chunk, ``delta.tool_calls`` with ``index``/``id``/``function.name`` then
  ``arguments`` fragments, ``finish_reason`` ``tool_calls`` or ``stop``, a usage chunk when
  ``stream_options.include_usage``, ``[DONE]``. A chat asking for JSON (``response_format``) is a
  side question (Gemini CLI's loop check, through the Gemini bridge) and gets a JSON text answer.

``/tap/...`` is a recording relay for the proxied runs: the client is pointed at it, it records what
the client sent and forwards it byte for byte to ``--tap-to`` (the real proxy, whose upstream is this
server's ``/v1``), with an ``x-agent-tap`` header that pairs it with what the server then receives.
``GET /_recorded`` lists every request: route, tokens, over the window, orphaned tool results, the
step, and for tapped ones what the client sent and when; and what a strict front
(``tests.support.upstreams.strict``) refused.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import os
import re
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from proxy.counting.tokenizers import load_text_counter
from tests.support.upstreams.formats import (
    json_response,
    message_object,
    response_object,
    response_usage,
    sse,
)

TASK_MARK = "agent-task-7f3a"
DONE_MARK = "TASK-COMPLETE"
CALL_ID = re.compile(r"call_s(\d+)_\d+")
RESUME = re.compile(r"agent-step (\d+)")
PATTERNS = ("def ", "class ", "import ", "raise ", "return ", "async def", "self\\.", "Timeout", "headers")
READ_LINES = 120  # a read of ~1.5k tokens: a step adds 1-5k, as an agent's do
GREP_LINES = 60
HOP = {"host", "content-length", "transfer-encoding", "connection", "keep-alive"}


def count(value: Any) -> int:
    return load_text_counter("cl100k_base")(orjson.dumps(value).decode())


def digest(value: Any) -> str:
    return hashlib.sha256(orjson.dumps(value, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]


def system_digest(fmt: str, body: dict[str, Any]) -> str:
    """The system prompt of a request, as a digest: what compaction must forward as it came."""
    if fmt == "messages":
        return digest(body.get("system"))
    if fmt == "responses":
        return digest(body.get("instructions"))
    msgs = body.get("messages") or []
    return digest(list(itertools.takewhile(lambda m: m.get("role") in ("system", "developer"), msgs)))


# --- the agent's script ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Action:
    kind: str  # read, grep, glob, bash
    path: str  # absolute
    pattern: str = ""
    command: str = ""
    offset: int = 1  # reads: the first line (1-based) and how many
    limit: int = READ_LINES


@dataclass
class Script:
    tree: Path
    steps: int
    files: list[Path] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.files = sorted(p for p in self.tree.rglob("*.py") if "__pycache__" not in p.parts)

    def actions(self, step: int) -> list[Action]:
        """1-3 calls for `step` (1-based), a fixed function of the step."""
        out = []
        for k in range(1 + step % 3):
            n = step * 3 + k
            f = self.files[n % len(self.files)]
            kind = ("read", "grep", "read", "bash", "read", "glob")[n % 6]
            if kind == "read":
                lines = len(f.read_text(errors="replace").splitlines())
                start = 1 + (step * 37) % max(1, lines - READ_LINES) if lines > READ_LINES else 1
                out.append(Action("read", str(f), offset=start))
            elif kind == "grep":
                out.append(Action("grep", str(self.tree), pattern=PATTERNS[n % len(PATTERNS)]))
            elif kind == "glob":
                out.append(Action("glob", str(self.tree), pattern="**/*.py"))
            else:
                out.append(Action("bash", str(self.tree), command=f"wc -l {f} && head -n 40 {f}"))
        return out


def shell_text(a: Action) -> str:
    if a.kind == "read":
        return f"cat -n {a.path} | sed -n '{a.offset},{a.offset + a.limit - 1}p'"
    if a.kind == "grep":
        return f"grep -rn '{a.pattern}' {a.path} | head -n {GREP_LINES}"
    if a.kind == "glob":
        return f"find {a.path} -name '*.py'"
    return a.command


def tool_call(a: Action, tools: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The action as a call of one of the tools the client offered, with that tool's arguments."""
    names = set(tools)
    if "Read" in names:  # Claude Code
        if a.kind == "read":
            return "Read", {"file_path": a.path, "offset": a.offset, "limit": a.limit}
        if a.kind == "grep" and "Grep" in names:
            args = {"pattern": a.pattern, "path": a.path, "output_mode": "content", "-n": True}
            return "Grep", {**args, "head_limit": GREP_LINES}
        if a.kind == "glob" and "Glob" in names:
            return "Glob", {"pattern": a.pattern, "path": a.path}
        return "Bash", {"command": shell_text(a), "description": f"Run {a.kind} on the tree"}
    if "read" in names:  # opencode
        if a.kind == "read":
            return "read", {"filePath": a.path, "offset": a.offset, "limit": a.limit}
        if a.kind == "grep" and "grep" in names:
            return "grep", {"pattern": a.pattern, "path": a.path}
        if a.kind == "glob" and "glob" in names:
            return "glob", {"pattern": a.pattern, "path": a.path}
        return "bash", {"command": shell_text(a), "description": f"Run {a.kind} on the tree"}
    workdir = os.path.dirname(a.path) if a.kind == "read" else a.path
    if "exec_command" in names:  # Codex's unified exec
        return "exec_command", {"cmd": shell_text(a), "workdir": workdir}
    if "shell_command" in names:
        return "shell_command", {"command": shell_text(a), "workdir": workdir}
    if "shell" in names:
        return "shell", {"command": ["bash", "-lc", shell_text(a)], "workdir": workdir}
    for name in sorted(names):
        if any(word in name.lower() for word in ("bash", "shell", "exec")):
            return name, {"command": shell_text(a)}
    raise LookupError(f"no tool to run {a.kind} among {sorted(names)}")


# The answer to a side question asked for JSON (Gemini CLI's loop check and next-speaker check,
# through the Gemini bridge): the fields each one's schema asks for, saying "no loop, the user speaks".
JSON_ANSWER = {
    "unproductive_state_analysis": "Each step reads new files: progress.",
    "unproductive_state_confidence": 0.0,
    "reasoning": "The model answered.",
    "next_speaker": "user",
}


@dataclass(frozen=True)
class Turn:
    """What the model answers: text, and tool calls (name, arguments, id), and which step this is."""

    text: str
    calls: list[tuple[str, dict[str, Any], str]]
    step: int
    kind: str  # tools, final, summary, side


def plan(script: Script, tools: dict[str, Any], last_ids: list[str], texts: str, last_user: str) -> Turn:
    if not tools:
        if "summar" in last_user.lower():
            step = max([int(s) for s in RESUME.findall(texts)] + [0])
            return Turn(
                f"<summary>Surveyed the tree so far; agent-step {step}.</summary>", [], step, "summary"
            )
        return Turn("Surveying a source tree", [], 0, "side")
    done = [int(m.group(1)) for i in last_ids if (m := CALL_ID.fullmatch(i))]
    # else a fresh start, or a resume after the client compacted its history
    done = done or [int(s) for s in RESUME.findall(texts)] or [0]
    step = max(done) + 1
    if step > script.steps:
        return Turn(
            f"{DONE_MARK}: surveyed {len(script.files)} files in {script.steps} steps.", [], step, "final"
        )
    calls = []
    for k, action in enumerate(script.actions(step)):
        name, args = tool_call(action, tools)
        calls.append((name, args, f"call_s{step}_{k}"))
    return Turn(f"Step {step} (agent-step {step - 1} done): looking further.", calls, step, "tools")


# --- recording ------------------------------------------------------------------------------------


class Recorder:
    def __init__(self, window: int, script: Script, tap_to: str | None) -> None:
        self.window = window
        self.script = script
        self.tap_to = tap_to
        self.received: list[dict[str, Any]] = []
        self.sent: dict[str, dict[str, Any]] = {}
        self.tap_ids = itertools.count(1)
        self.ids = itertools.count(1)
        self.last_items: list[tuple[str, int]] = []  # the previous request's items: digest, size
        self.refused: list[dict[str, Any]] = []  # what a strict front refused before the script saw it

    def note_refused(self, request: Request, raw: bytes) -> None:
        body = orjson.loads(raw)
        self.refused.append(
            {"path": request.url.path, "model": body.get("model"), "tools": len(body.get("tools") or [])}
        )

    def prefix(self, fmt: str, body: dict[str, Any], main: bool) -> tuple[int, int]:
        """Bytes of this request's conversation, and of them the unchanged prefix it shares with the
        previous main-loop request (what a server's prompt cache can reuse): the system part, the
        tools, then each item. Side requests (titles, summaries) are measured, not remembered."""
        head, listed = {
            "messages": (body.get("system"), body.get("messages")),
            "responses": (body.get("instructions"), body.get("input")),
        }.get(fmt, (None, body.get("messages")))
        items = [(digest(x), len(orjson.dumps(x))) for x in [head, body.get("tools"), *(listed or [])]]
        kept = 0
        for (now, size), (before, _) in zip(items, self.last_items, strict=False):
            if now != before:
                break
            kept += size
        if main:
            self.last_items = items
        return sum(size for _, size in items), kept

    def note(
        self,
        request: Request,
        fmt: str,
        body: dict[str, Any],
        tokens: int,
        turn: Turn,
        orphans: int,
        **more: Any,
    ) -> None:
        """A request as it came: its size, the script's step and the kind of turn it gets, its tool
        results without a call, the digest of its system part, and `more` of what it asked."""
        more = {
            "orphans": orphans,
            "step": turn.step,
            "kind": turn.kind,
            "system": system_digest(fmt, body),
        } | more
        tap = request.headers.get("x-agent-tap")
        size, kept = self.prefix(fmt, body, more.get("kind") in ("tools", "final"))
        self.received.append(
            {
                "format": fmt,
                "path": request.url.path,
                "tap": tap,
                "at": time.monotonic(),
                "tokens": tokens,
                "over": tokens > self.window,
                "has_task": TASK_MARK in orjson.dumps(body).decode(),
                "stream": body.get("stream") is True,
                "tools": len(body.get("tools") or []),
                "bytes": size,
                "prefix_bytes": kept,
                **more,
            }
        )


def text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(
            text_of(c.get("text") or c.get("content") or "") for c in content if isinstance(c, dict)
        )
    return ""


def openai_refusal(message: str, param: str, code: str | None = None) -> Response:
    """OpenAI's 400 for a request it will not take, its `invalid_request_error` as its API words it."""
    error = {"message": message, "type": "invalid_request_error", "param": param, "code": code}
    return json_response({"error": error}, 400)


def openai_overflow(window: int, tokens: int, param: str) -> Response:
    message = (
        f"This model's maximum context length is {window} tokens. However, your messages resulted in "
        f"{tokens} tokens. Please reduce the length of the messages."
    )
    return openai_refusal(message, param, "context_length_exceeded")


# --- Anthropic Messages ---------------------------------------------------------------------------


def anthropic_orphans(messages: list[Any]) -> int:
    """`tool_result` blocks not answering a `tool_use` of the message before (the API rejects them)."""
    orphans = 0
    for i, message in enumerate(messages):
        blocks = message.get("content") if isinstance(message.get("content"), list) else []
        before = messages[i - 1].get("content") if i else None
        uses = (
            {b.get("id") for b in before if b.get("type") == "tool_use"}
            if isinstance(before, list)
            else set()
        )
        orphans += sum(
            1 for b in blocks if b.get("type") == "tool_result" and b.get("tool_use_id") not in uses
        )
    return orphans


async def messages(request: Request) -> Response:
    rec: Recorder = request.app.state.recorder
    body = orjson.loads(await request.body())
    msgs = body.get("messages") or []
    tokens = count([body.get("system"), msgs, body.get("tools")])
    tools = {t["name"]: t for t in body.get("tools") or [] if "name" in t}
    last = msgs[-1] if msgs else {}
    blocks = last.get("content") if isinstance(last.get("content"), list) else []
    last_ids = [b.get("tool_use_id", "") for b in blocks if b.get("type") == "tool_result"]
    last_user = "" if last_ids else text_of(last.get("content"))
    turn = plan(rec.script, tools, last_ids, orjson.dumps(msgs).decode(), last_user)
    orphans = anthropic_orphans(msgs)
    rec.note(
        request,
        "messages",
        body,
        tokens,
        turn,
        orphans,
        thinking=(body.get("thinking") or {}).get("type"),
        context_management=body.get("context_management") is not None,
        max_tokens=body.get("max_tokens"),
    )
    if tokens > rec.window:
        error = {
            "type": "invalid_request_error",
            "message": f"prompt is too long: {tokens} tokens > {rec.window} maximum",
        }
        return json_response({"type": "error", "error": error}, 400)
    if orphans:
        error = {
            "type": "invalid_request_error",
            "message": "messages: unexpected `tool_use_id` found in `tool_result` blocks",
        }
        return json_response({"type": "error", "error": error}, 400)
    thinking = (body.get("thinking") or {}).get("type") in ("enabled", "adaptive")
    content: list[dict[str, Any]] = []
    if thinking:
        content.append(
            {
                "type": "thinking",
                "thinking": f"Step {turn.step}: pick the next files.",
                "signature": f"sig{turn.step}",
            }
        )
    content.append({"type": "text", "text": turn.text})
    content += [{"type": "tool_use", "id": cid, "name": n, "input": a} for n, a, cid in turn.calls]
    stop = "tool_use" if turn.calls else "end_turn"
    out_tokens = count(content)
    usage = {"input_tokens": tokens, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
    message = message_object(next(rec.ids), body, content, stop, {**usage, "output_tokens": out_tokens})
    if body.get("stream") is not True:
        return json_response(message)

    return sse(anthropic_events(message))


def anthropic_events(message: dict[str, Any]) -> Iterator[tuple[str | None, Any]]:
    """Anthropic's stream of a whole `message`: each block opened, filled by its deltas (text word
    by word, a call's input in pieces), closed; the stop reason and usage in `message_delta`."""
    usage = message["usage"]
    start = {**message, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
    yield "message_start", {"type": "message_start", "message": start}
    yield "ping", {"type": "ping"}
    for i, block in enumerate(message["content"]):
        if block["type"] == "thinking":
            empty: dict[str, Any] = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [
                {"type": "thinking_delta", "thinking": block["thinking"]},
                {"type": "signature_delta", "signature": block["signature"]},
            ]
        elif block["type"] == "text":
            empty = {"type": "text", "text": ""}
            words = block["text"].split(" ")
            deltas = [
                {"type": "text_delta", "text": w + (" " if j < len(words) - 1 else "")}
                for j, w in enumerate(words)
            ]
        else:
            empty = {**block, "input": {}}
            js = orjson.dumps(block["input"]).decode()
            deltas = [
                {"type": "input_json_delta", "partial_json": js[j : j + 40]} for j in range(0, len(js), 40)
            ]
        yield "content_block_start", {"type": "content_block_start", "index": i, "content_block": empty}
        for delta in deltas:
            yield "content_block_delta", {"type": "content_block_delta", "index": i, "delta": delta}
        yield "content_block_stop", {"type": "content_block_stop", "index": i}
    delta = {"stop_reason": message["stop_reason"], "stop_sequence": None}
    yield "message_delta", {"type": "message_delta", "delta": delta, "usage": usage}
    yield "message_stop", {"type": "message_stop"}


async def count_tokens(request: Request) -> Response:
    body = orjson.loads(await request.body())
    return json_response(
        {"input_tokens": count([body.get("system"), body.get("messages"), body.get("tools")])}
    )


# --- OpenAI Responses -----------------------------------------------------------------------------


def responses_orphans(items: list[Any]) -> int:
    called: set[str] = set()
    orphans = 0
    for item in items:
        kind = item.get("type") if isinstance(item, dict) else None
        if kind in ("function_call", "custom_tool_call", "local_shell_call"):
            called.add(item.get("call_id", ""))
        elif kind in ("function_call_output", "custom_tool_call_output", "local_shell_call_output"):
            orphans += item.get("call_id") not in called
    return orphans


async def responses(request: Request) -> Response:
    rec: Recorder = request.app.state.recorder
    body = orjson.loads(await request.body())
    raw_input = body.get("input")
    items: list[Any] = (
        raw_input
        if isinstance(raw_input, list)
        else [{"type": "message", "role": "user", "content": raw_input}]
    )
    tokens = count([body.get("instructions"), items, body.get("tools")])
    tools = {t.get("name"): t for t in body.get("tools") or [] if t.get("name")}
    tail: list[str] = []
    for item in reversed(items):
        if item.get("type") in ("function_call_output", "custom_tool_call_output"):
            tail.append(item.get("call_id", ""))
        else:
            break
    users = [i for i in items if i.get("type", "message") == "message" and i.get("role") == "user"]
    last_user = "" if tail or not users else text_of(users[-1].get("content"))
    turn = plan(rec.script, tools, tail, orjson.dumps(items).decode(), last_user)
    orphans = responses_orphans(items)
    rec.note(request, "responses", body, tokens, turn, orphans, max_tokens=body.get("max_output_tokens"))
    if tokens > rec.window:
        return openai_overflow(rec.window, tokens, "input")
    if orphans:
        return openai_refusal("No tool call found for function call output.", "input")
    n = next(rec.ids)
    rid = f"resp_{n}"
    part = {"type": "output_text", "text": turn.text, "annotations": [], "logprobs": []}
    output: list[dict[str, Any]] = [
        {"type": "message", "id": f"msg_{n}", "status": "completed", "role": "assistant", "content": [part]}
    ]
    for k, (name, args, cid) in enumerate(turn.calls):
        output.append(
            {
                "type": "function_call",
                "id": f"fc_{n}_{k}",
                "call_id": cid,
                "name": name,
                "arguments": orjson.dumps(args).decode(),
                "status": "completed",
            }
        )
    out_tokens = count(output)
    usage = response_usage(tokens, out_tokens)
    if body.get("stream") is not True:
        return json_response(response_object(body, rid, "completed", output, usage))

    def events() -> Iterator[tuple[str | None, Any]]:
        seq = itertools.count()

        def ev(kind: str, **fields: Any) -> tuple[str, Any]:
            return kind, {"type": kind, "sequence_number": next(seq), **fields}

        yield ev("response.created", response=response_object(body, rid, "in_progress", [], None))
        yield ev("response.in_progress", response=response_object(body, rid, "in_progress", [], None))
        for i, item in enumerate(output):
            if item["type"] == "message":
                yield ev(
                    "response.output_item.added",
                    output_index=i,
                    item={**item, "status": "in_progress", "content": []},
                )
                at = {"item_id": item["id"], "output_index": i, "content_index": 0}  # the text part's place
                yield ev("response.content_part.added", **at, part={**part, "text": ""})
                yield ev("response.output_text.delta", **at, delta=part["text"], logprobs=[])
                yield ev("response.output_text.done", **at, text=part["text"], logprobs=[])
                yield ev("response.content_part.done", **at, part=part)
            else:
                yield ev(
                    "response.output_item.added",
                    output_index=i,
                    item={**item, "status": "in_progress", "arguments": ""},
                )
                yield ev(
                    "response.function_call_arguments.delta",
                    item_id=item["id"],
                    output_index=i,
                    delta=item["arguments"],
                )
                yield ev(
                    "response.function_call_arguments.done",
                    item_id=item["id"],
                    output_index=i,
                    arguments=item["arguments"],
                )
            yield ev("response.output_item.done", output_index=i, item=item)
        yield ev("response.completed", response=response_object(body, rid, "completed", output, usage))

    return sse(events())


# --- OpenAI Chat Completions ----------------------------------------------------------------------


def chat_orphans(msgs: list[Any]) -> int:
    called: set[str] = set()
    orphans = 0
    for m in msgs:
        for call in m.get("tool_calls") or []:
            called.add(call.get("id", ""))
        if m.get("role") == "tool":
            orphans += m.get("tool_call_id") not in called
    return orphans


async def chat(request: Request) -> Response:
    rec: Recorder = request.app.state.recorder
    body = orjson.loads(await request.body())
    msgs = body.get("messages") or []
    tokens = count([msgs, body.get("tools")])
    tools = {t["function"]["name"]: t for t in body.get("tools") or [] if "function" in t}
    tail = []
    for m in reversed(msgs):
        if m.get("role") != "tool":
            break
        tail.append(m.get("tool_call_id", ""))
    users = [m for m in msgs if m.get("role") == "user"]
    last_user = "" if tail or not users else text_of(users[-1].get("content"))
    turn = plan(rec.script, tools, tail, orjson.dumps(msgs).decode(), last_user)
    if (body.get("response_format") or {}).get("type") in ("json_object", "json_schema"):
        turn = Turn(orjson.dumps(JSON_ANSWER).decode(), [], 0, "json")  # a side question's answer
    orphans = chat_orphans(msgs)
    rec.note(
        request,
        "chat",
        body,
        tokens,
        turn,
        orphans,
        max_tokens=body.get("max_tokens") or body.get("max_completion_tokens"),
        model=body.get("model"),
    )
    if tokens > rec.window:
        return openai_overflow(rec.window, tokens, "messages")
    if orphans:
        message = "Invalid parameter: messages with role 'tool' must be a response to a preceeding message with 'tool_calls'."
        return openai_refusal(message, "messages")
    calls = [
        {"id": cid, "type": "function", "function": {"name": n, "arguments": orjson.dumps(a).decode()}}
        for n, a, cid in turn.calls
    ]
    finish = "tool_calls" if calls else "stop"
    out_tokens = count([turn.text, calls])
    usage = {"prompt_tokens": tokens, "completion_tokens": out_tokens, "total_tokens": tokens + out_tokens}
    base = {"id": f"chatcmpl-{next(rec.ids)}", "created": int(time.time()), "model": body.get("model", "")}
    if body.get("stream") is not True:
        msg: dict[str, Any] = {"role": "assistant", "content": turn.text}
        if calls:
            msg["tool_calls"] = calls
        choice = {"index": 0, "message": msg, "finish_reason": finish, "logprobs": None}
        return json_response({**base, "object": "chat.completion", "choices": [choice], "usage": usage})

    def events() -> Iterator[tuple[str | None, Any]]:
        chunk = {**base, "object": "chat.completion.chunk"}

        def choice(delta: dict[str, Any], reason: str | None = None) -> dict[str, Any]:
            return {
                **chunk,
                "choices": [{"index": 0, "delta": delta, "finish_reason": reason, "logprobs": None}],
            }

        yield None, choice({"role": "assistant", "content": ""})
        yield None, choice({"content": turn.text})
        for i, call in enumerate(calls):
            head = {
                "index": i,
                "id": call["id"],
                "type": "function",
                "function": {"name": call["function"]["name"], "arguments": ""},
            }
            yield None, choice({"tool_calls": [head]})
            args = call["function"]["arguments"]
            for j in range(0, len(args), 40):
                yield (
                    None,
                    choice({"tool_calls": [{"index": i, "function": {"arguments": args[j : j + 40]}}]}),
                )
        yield None, choice({}, finish)
        if (body.get("stream_options") or {}).get("include_usage"):
            yield None, {**chunk, "choices": [], "usage": usage}
        yield None, b"[DONE]"

    return sse(events())


# --- the tap: what the client sent, relayed to the proxy ------------------------------------------


async def tap(request: Request) -> Response:
    rec: Recorder = request.app.state.recorder
    assert rec.tap_to, "started without --tap-to"
    raw = await request.body()
    tap_id = str(next(rec.tap_ids))
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        body = None
    if isinstance(body, dict):
        fmt = request.url.path.rsplit("/", 1)[-1]
        parts = {
            "messages": [body.get("system"), body.get("messages"), body.get("tools")],
            "responses": [body.get("instructions"), body.get("input"), body.get("tools")],
            "completions": [body.get("messages"), body.get("tools")],
        }.get(fmt)
        rec.sent[tap_id] = {
            "path": request.url.path,
            "at": time.monotonic(),
            "tokens": count(parts) if parts is not None else 0,
            "body": body,
        }
    client: httpx.AsyncClient = request.app.state.client
    headers = [(k, v) for k, v in request.headers.items() if k.lower() not in HOP] + [("x-agent-tap", tap_id)]
    path = request.url.path.removeprefix("/tap")
    url = rec.tap_to + path + (f"?{request.url.query}" if request.url.query else "")
    upstream = await client.send(
        client.build_request(request.method, url, headers=headers, content=raw), stream=True
    )
    if tap_id in rec.sent:
        rec.sent[tap_id]["status"] = upstream.status_code
        rec.sent[tap_id]["headers"] = {
            k: v for k, v in upstream.headers.items() if k.startswith("x-compaction")
        }
    out_headers = {k: v for k, v in upstream.headers.items() if k.lower() not in HOP}

    async def body_iter() -> AsyncIterator[bytes]:
        async for chunk in upstream.aiter_raw():
            yield chunk

    return StreamingResponse(
        body_iter(),
        status_code=upstream.status_code,
        headers=out_headers,
        background=BackgroundTask(upstream.aclose),
    )


async def recorded(request: Request) -> Response:
    rec: Recorder = request.app.state.recorder
    if request.method == "DELETE":
        rec.received.clear()
        rec.sent.clear()
        return json_response([])
    sent = {k: {kk: vv for kk, vv in v.items() if kk != "body"} for k, v in rec.sent.items()}
    return json_response(
        {"received": rec.received, "sent": sent, "window": rec.window, "refused": rec.refused}
    )


async def sent_bodies(request: Request) -> Response:
    rec: Recorder = request.app.state.recorder
    return json_response({k: v["body"] for k, v in rec.sent.items()})


async def models(request: Request) -> Response:
    return json_response(
        {
            "object": "list",
            "data": [{"id": "agent-model", "object": "model", "created": 0, "owned_by": "tests"}],
        }
    )


def create_app(window: int, steps: int, tree: Path, tap_to: str | None = None) -> Starlette:
    routes = [
        Route("/v1/messages", messages, methods=["POST"]),
        Route("/v1/messages/count_tokens", count_tokens, methods=["POST"]),
        Route("/v1/responses", responses, methods=["POST"]),
        Route("/v1/chat/completions", chat, methods=["POST"]),
        Route("/v1/models", models),
        Route("/tap/{rest:path}", tap, methods=["GET", "POST"]),
        Route("/_recorded", recorded, methods=["GET", "DELETE"]),
        Route("/_sent", sent_bodies),
        Route("/healthz", models),
    ]
    app = Starlette(routes=routes)
    app.state.recorder = Recorder(window, Script(tree, steps), tap_to)
    app.state.client = httpx.AsyncClient(timeout=httpx.Timeout(300.0))
    return app


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--window", type=int, required=True)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--tree", type=Path, required=True)
    parser.add_argument("--tap-to", default=None, help="the proxy's base URL, without /v1")
    args = parser.parse_args()
    count("warm up the tokenizer")
    app = create_app(args.window, args.steps, args.tree.resolve(), args.tap_to)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
