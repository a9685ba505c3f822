"""Drop markers against a real llama-server whose chat template is strict about roles (issue 19,
item 4): ``tests/templates/strict-roles.jinja`` raises ``Conversation roles must alternate
user/assistant/user/assistant/...`` as Gemma's and Mistral's templates do (after the leading system
messages, user-side turns, a user message or the results of one tool-calls message, alternate with
assistant turns). llama-server answers a request it cannot render with a 400. Long agent loops go
through the real ``compacting-proxy`` process with each format's official client; each is compacted
(a stretch dropped) and answered."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest

from tests.support.format_chats import as_responses, in_format
from tests.support.role_chats import answered_loop_chat, loop_chat
from tests.support.upstreams.llama import LlamaServer, running_llama_server
from tests.support.upstreams.proxy_server import running_proxy

pytestmark = pytest.mark.llama

TEMPLATE = Path(__file__).parents[1] / "templates" / "strict-roles.jinja"
MODEL = "tiny"
MAX_TOKENS = 8
CHATS = {"loop": loop_chat, "answered loop": answered_loop_chat}


@pytest.fixture(scope="module")
def strict_llama() -> Iterator[LlamaServer]:
    with running_llama_server(ctx=4096, chat_template=TEMPLATE.read_text()) as server:
        yield server


def test_the_template_rejects_an_assistant_marker_before_an_assistant_message(
    strict_llama: LlamaServer,
) -> None:
    """The marker as it was placed before: an assistant message right before the tool-calls message."""
    chat = loop_chat()[:6]
    bad = [*chat[:2], {"role": "assistant", "content": "[Earlier conversation dropped]"}, *chat[4:6]]
    for messages, status in ((chat, 200), (bad, 400)):
        response = httpx.post(
            f"{strict_llama.base_url}/v1/chat/completions",
            json={"messages": messages, "max_tokens": MAX_TOKENS},
            timeout=60,
        )
        assert response.status_code == status, response.text[:300]
    assert "roles must alternate" in response.text


@pytest.mark.parametrize("case", sorted(CHATS))
@pytest.mark.parametrize("route", ["chat", "responses", "messages"])
def test_a_compacted_loop_renders_with_a_strict_template(
    strict_llama: LlamaServer, route: str, case: str
) -> None:
    chat = CHATS[case]()
    with running_proxy(f"{strict_llama.base_url}/v1", strict_llama.n_ctx) as proxy:
        if route == "chat":
            client = openai.OpenAI(base_url=f"{proxy.base_url}/v1", api_key="x", max_retries=0, timeout=60)
            raw: Any = client.chat.completions.with_raw_response.create(
                model=MODEL, messages=chat, max_tokens=MAX_TOKENS
            )
        elif route == "responses":
            instructions, items = as_responses(chat, reasoning=False)
            client = openai.OpenAI(base_url=f"{proxy.base_url}/v1", api_key="x", max_retries=0, timeout=60)
            raw = client.responses.with_raw_response.create(
                model=MODEL, instructions=instructions, input=items[1:], max_output_tokens=MAX_TOKENS
            )
        else:
            from proxy.formats import ANTHROPIC

            body = in_format(ANTHROPIC, chat)
            messages_client = anthropic.Anthropic(
                base_url=proxy.base_url, api_key="x", max_retries=0, timeout=60
            )
            raw = messages_client.messages.with_raw_response.create(
                model=MODEL, system=body["system"], messages=body["messages"], max_tokens=MAX_TOKENS
            )
        assert raw.status_code == 200
        assert int(raw.headers["x-compaction-dropped"]) > 0, "a stretch was dropped"
        raw.parse()
