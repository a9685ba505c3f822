"""End to end: a coding agent's loop through the real ``compacting-proxy`` process to a real llama-server.

One user request followed by many file reads: everything is the protected recent part, so only the
agent-loop rules can make it fit. Sent directly, llama-server rejects it (``exceed_context_size_error``);
through the proxy, with the official ``openai`` SDK, it is answered, and the server's own count of
the prompt it received is within its window. A loop whose latest request alone is bigger than the
window is answered by the proxy itself with a 400 in OpenAI's shape, naming the message.
"""

from __future__ import annotations

from typing import Any

import openai
import pytest

from tests.support.loops import READ_FILE_TOOLS, one_request_loop
from tests.support.upstreams.llama import LlamaServer, count_prompt_tokens
from tests.support.upstreams.proxy_server import running_proxy

pytestmark = pytest.mark.llama

MODEL = "tiny"
MAX_TOKENS = 8
TOOLS = READ_FILE_TOOLS


def sdk(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base_url}/v1", api_key="x", max_retries=0, timeout=60)


def test_a_loop_rejected_directly_succeeds_through_the_proxy(llama_server: LlamaServer) -> None:
    loop: Any = one_request_loop(10, lines=40)
    assert count_prompt_tokens(llama_server.base_url, {"messages": loop, "tools": TOOLS}) > llama_server.n_ctx
    with pytest.raises(openai.BadRequestError) as caught:
        sdk(llama_server.base_url).chat.completions.create(
            model=MODEL, messages=loop, tools=TOOLS, max_tokens=MAX_TOKENS
        )
    assert caught.value.type == "exceed_context_size_error"

    with running_proxy(f"{llama_server.base_url}/v1", "auto", tokenizer="upstream") as proxy:
        raw = sdk(proxy.base_url).chat.completions.with_raw_response.create(
            model=MODEL, messages=loop, tools=TOOLS, max_tokens=MAX_TOKENS
        )
    answer = raw.parse()
    assert answer.usage is not None
    assert answer.usage.prompt_tokens + MAX_TOKENS <= llama_server.n_ctx
    # The protected part (the whole loop) was compacted by the loop rules, and the headers say so.
    protected = dict(part.split("=") for part in raw.headers["x-compaction-protected"].split())
    assert int(protected["truncated"]) + int(protected["dropped"]) >= 1
    assert int(raw.headers["x-compaction-tokens-after"]) < int(raw.headers["x-compaction-tokens-before"])


def test_a_latest_request_bigger_than_the_window_is_a_clear_400(llama_server: LlamaServer) -> None:
    loop: Any = one_request_loop(2, lines=40)
    loop.append({"role": "assistant", "content": "Done."})
    loop.append({"role": "user", "content": "Here is the whole log:\n" + "line of log output\n" * 2000})
    with (
        running_proxy(f"{llama_server.base_url}/v1", "auto", tokenizer="upstream") as proxy,
        pytest.raises(openai.BadRequestError) as caught,
    ):
        sdk(proxy.base_url).chat.completions.create(
            model=MODEL, messages=loop, tools=TOOLS, max_tokens=MAX_TOKENS
        )
    assert caught.value.code == "context_length_exceeded"
    assert f"The largest part is messages[{len(loop) - 1}], about" in caught.value.message
    assert caught.value.param == f"messages[{len(loop) - 1}]"
    assert f"maximum context length is {llama_server.n_ctx} tokens" in caught.value.message
