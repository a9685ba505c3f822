"""The Vercel AI SDK's default provider (``createOpenAI({baseURL})("model")`` posts to
``/v1/responses``), run by Node against the real proxy process and the recording upstream that
speaks the Responses API (``tests.support.upstreams.formats``), generated and streamed."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support.format_chats import RESPONSES, check_compacted
from tests.support.format_fixtures import last_body
from tests.support.upstreams.chats import support_chat
from tests.support.upstreams.formats import REPLY

NODE_DIR = Path(__file__).parents[1] / "node"
SCRIPT = NODE_DIR / "vercel_responses.mjs"

pytestmark = [
    pytest.mark.process,  # runs Node and the real proxy
    pytest.mark.skipif(
        shutil.which("node") is None or not (NODE_DIR / "node_modules" / "ai").exists(),
        reason="needs Node and `npm ci --prefix tests/node`",
    ),
]


def ai_sdk_messages(chat: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """(system, AI SDK model messages) for a Chat Completions history."""
    names = {c["id"]: c["function"]["name"] for m in chat for c in m.get("tool_calls") or []}
    out: list[dict[str, Any]] = []
    for m in chat[1:]:
        if m["role"] == "tool":
            output = {"type": "text", "value": m["content"]}
            result = {
                "type": "tool-result",
                "toolCallId": m["tool_call_id"],
                "toolName": names[m["tool_call_id"]],
            }
            out.append({"role": "tool", "content": [{**result, "output": output}]})
        elif m.get("tool_calls"):
            calls = [
                {
                    "type": "tool-call",
                    "toolCallId": c["id"],
                    "toolName": c["function"]["name"],
                    "input": json.loads(c["function"]["arguments"]),
                }
                for c in m["tool_calls"]
            ]
            out.append({"role": "assistant", "content": calls})
        else:
            out.append({"role": m["role"], "content": m["content"]})
    return chat[0]["content"], out


def run_node(
    base_url: str, mode: str, system: str, messages: list[dict[str, Any]]
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["node", str(SCRIPT), base_url, mode],
        input=json.dumps({"system": system, "messages": messages}),
        capture_output=True,
        text=True,
        timeout=60,
        cwd=NODE_DIR,
    )


@pytest.mark.parametrize("mode", ["generate", "stream"])
def test_the_ai_sdks_default_provider_is_compacted(
    upstream: str, proxy: str, fresh_record: None, mode: str
) -> None:
    system, messages = ai_sdk_messages(support_chat(10, result_items=20))
    direct = run_node(f"{upstream}/v1", mode, system, messages)
    assert direct.returncode == 1, direct.stdout
    original = last_body(upstream)
    assert original["model"] == "small" and isinstance(original["input"], list)

    proxied = run_node(f"{proxy}/v1", mode, system, messages)
    assert proxied.returncode == 0, proxied.stderr
    answer = json.loads(proxied.stdout)
    assert answer["text"] == REPLY
    headers = answer["headers"]  # as the README's client table says to read them
    assert int(headers["x-compaction-tokens-after"]) < int(headers["x-compaction-tokens-before"])
    sent = last_body(upstream)
    assert {k: v for k, v in sent.items() if k != "input"} == {
        k: v for k, v in original.items() if k != "input"
    }
    check_compacted(RESPONSES, original["input"], sent["input"])
