"""The real LiteLLM proxy (1.108.7, `scripts/litellm_venv.py`) with its `headroom` guardrail pointed
at the real `compacting-proxy` process.

- A long agent loop through LiteLLM to the real llama-server with an 8,192-token window: LiteLLM
  sends the rows it lets a compressor touch (not the system prompt, the assistant messages or the
  latest turn) to `/v1/compress`, under the guardrail's own `model` name, whose window
  (`COMPACT_MODEL_WINDOWS`) is the room those rows have; every request is answered, the server's
  own count of each prompt within its window. The same request with `x-headroom-bypass: true` (the
  guardrail skipped) is refused by llama-server: the guardrail is what keeps the loop inside.
- With the model's `api_base` at the proxy too (the README's advice for a loop whose assistant
  messages alone pass the window, which LiteLLM never sends to a compressor): a longer loop is
  answered at every request within llama-server's window, which the guardrail alone cannot do.
- Its retrieval loop: LiteLLM adds its `headroom_retrieve` tool when `/v1/compress` names ids in
  `ccr_hashes`; a model that calls it (a scripted one: `tests/support/upstreams/retrieving_model.py`)
  gets the original back from `/v1/retrieve/{hash}` within the same request.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.conversations import agent_chat
from tests.support.litellm_proxy import MASTER_KEY, LiteLLM, config, running_litellm
from tests.support.loops import READ_FILE_TOOLS, SYSTEM, source, step
from tests.support.processes import free_port, running
from tests.support.upstreams.llama import LlamaServer, count_prompt_tokens, running_llama_server
from tests.support.upstreams.proxy_server import running_proxy

pytestmark = [pytest.mark.litellm, pytest.mark.llama, pytest.mark.process]

WINDOW = 8192
MAX_TOKENS = 8
STEPS = 36
LONG_STEPS, SEND_EVERY = 112, 2  # 56 requests, the last of about 20,000 tokens whole
# The room of the rows LiteLLM sends: the window less what it holds back (the system prompt, the
# assistant calls, the latest turn and the reply) with room to spare.
HISTORY_WINDOW = 5120
TOOLS = READ_FILE_TOOLS
AUTH = {"authorization": f"Bearer {MASTER_KEY}"}


@pytest.fixture(scope="module")
def llama() -> Iterator[LlamaServer]:
    with running_llama_server(ctx=WINDOW, slots=1) as server:
        yield server


def chat(litellm: LiteLLM, body: dict[str, Any], headers: dict[str, str] | None = None) -> httpx.Response:
    return httpx.post(
        f"{litellm.base_url}/v1/chat/completions", json=body, headers={**AUTH, **(headers or {})}, timeout=300
    )


@pytest.mark.timeout(600)  # LiteLLM's start (20-40 s) and 37 calls through it, on a shared machine
def test_a_long_agent_loop_through_litellm_stays_inside_8k(llama: LlamaServer) -> None:
    upstream = f"{llama.base_url}/v1"
    settings = {"tokenizer": "upstream", "model_windows": f"tiny-history={HISTORY_WINDOW}"}
    with (
        running_proxy(upstream, "auto", **settings) as proxy,
        running_litellm(
            config([("tiny", "tiny", upstream)], proxy.base_url, guardrail_model="tiny-history")
        ) as litellm,
    ):
        loop: list[dict[str, Any]] = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": "The billing tests fail since the merge. Find out why and fix it."},
        ]
        prompts, applied = [], []
        for k in range(STEPS):
            step(loop, k, [("read_file", source(f"fn{k}", 60))])
            response = chat(
                litellm, {"model": "tiny", "messages": loop, "tools": TOOLS, "max_tokens": MAX_TOKENS}
            )
            assert response.status_code == 200, (k, response.text, litellm.log_tail())
            applied.append(response.headers.get("x-litellm-applied-guardrails"))
            prompts.append(response.json()["usage"]["prompt_tokens"])
        assert applied[-1] == "headroom-compression"  # from the first step with rows it may touch
        whole = count_prompt_tokens(llama.base_url, {"messages": loop, "tools": TOOLS})
        assert whole > 2 * WINDOW  # the loop itself is far over the window
        assert max(prompts) + MAX_TOKENS <= WINDOW  # llama-server's own count of what it was sent
        bypassed = chat(
            litellm,
            {"model": "tiny", "messages": loop, "tools": TOOLS, "max_tokens": MAX_TOKENS},
            {"x-headroom-bypass": "true"},
        )
        assert bypassed.status_code == 400 and "exceed" in bypassed.text  # what the guardrail kept out
        metrics = httpx.get(f"{proxy.base_url}/metrics").text
    compressed = re.search(r'compacting_proxy_compress_calls_total\{outcome="compressed"\} (\S+)', metrics)
    assert compressed and float(compressed.group(1)) >= STEPS // 2


@pytest.mark.timeout(900)  # LiteLLM's start and 56 calls through it and the proxy, on a shared machine
def test_with_the_model_behind_the_proxy_too_a_longer_loop_stays_inside_8k(llama: LlamaServer) -> None:
    """The README's advice for a loop whose assistant messages alone pass the window, which no
    compressor behind the guardrail can fit (LiteLLM never sends them): the model's `api_base` at
    the proxy as well. Every request reaches llama-server within its window, by its own count; the
    same request through the guardrail alone (the model straight at llama-server) is refused."""
    upstream = f"{llama.base_url}/v1"
    settings = {"tokenizer": "upstream", "model_windows": f"tiny-history={HISTORY_WINDOW}"}
    with running_proxy(upstream, "auto", **settings) as proxy:
        models = [("tiny", "tiny", f"{proxy.base_url}/v1"), ("tiny-direct", "tiny", upstream)]
        with running_litellm(config(models, proxy.base_url, guardrail_model="tiny-history")) as litellm:
            loop: list[dict[str, Any]] = [
                {"role": "system", "content": SYSTEM},
                {
                    "role": "user",
                    "content": "The billing tests fail since the merge. Find out why and fix it.",
                },
            ]
            prompts, applied = [], []
            for k in range(LONG_STEPS):
                step(loop, k, [("read_file", source(f"fn{k}", 60))], text=thought(k))
                if k % SEND_EVERY == SEND_EVERY - 1:
                    response = chat(
                        litellm, {"model": "tiny", "messages": loop, "tools": TOOLS, "max_tokens": MAX_TOKENS}
                    )
                    assert response.status_code == 200, (
                        k,
                        response.text,
                        litellm.log_tail(),
                        proxy.log_tail(),
                    )
                    applied.append(response.headers.get("x-litellm-applied-guardrails"))
                    prompts.append(response.json()["usage"]["prompt_tokens"])
            alone = chat(
                litellm, {"model": "tiny-direct", "messages": loop, "tools": TOOLS, "max_tokens": MAX_TOKENS}
            )
            conversations = httpx.get(f"{proxy.base_url}/ui/conversations").json()["conversations"]
    emptied = [{**m, "content": "…"} if m["role"] == "tool" else m for m in loop]  # what LiteLLM holds back
    assert count_prompt_tokens(llama.base_url, {"messages": emptied, "tools": TOOLS}) > WINDOW
    assert set(applied) == {"headroom-compression"}  # the guardrail ran on every request
    assert max(prompts) + MAX_TOKENS <= WINDOW  # llama-server's own count of what it was sent
    assert alone.status_code == 400 and "exceed" in alone.text  # the guardrail alone cannot fit it
    routed = [c["last"] for c in conversations if c["format"] == "chat"]  # the proxy's own chat route
    assert any(last["window"] == WINDOW and last["after"] < last["before"] for last in routed), routed


def thought(k: int) -> str:
    """What an agent says before each call: about 50 tokens, so the assistant messages alone pass
    the window long before the loop ends."""
    return (
        f"Step {k}: fn{k} is not where the refund total goes wrong; the merge also touched the "
        f"billing module, so next I read src/mod_{k}_0.py and follow the call into its helpers."
    )


@pytest.mark.timeout(300)
def test_litellm_s_retrieval_loop_redeems_an_id() -> None:
    port = free_port()
    model = [sys.executable, "-m", "tests.support.upstreams.retrieving_model", "--port", str(port)]
    with (
        running(model, ready_url=f"http://127.0.0.1:{port}/v1/models"),
        running_proxy("http://127.0.0.1:9/v1", 2048, retrieve="true", upstream_kind="openai") as proxy,
        running_litellm(
            config(
                [("scripted", "scripted", f"http://127.0.0.1:{port}/v1")],
                proxy.base_url,
                guardrail_model=None,
            )
        ) as litellm,
    ):
        history = [
            *agent_chat(12, seed=4, result_items=40),
            {"role": "user", "content": "Which orders are open?"},
        ]
        response = chat(litellm, {"model": "scripted", "messages": history})
        assert response.status_code == 200, (litellm.log_tail(), proxy.log_tail())
        received = httpx.get(f"http://127.0.0.1:{port}/_received").json()
        metrics = httpx.get(f"{proxy.base_url}/metrics").text
    answer = response.json()["choices"][0]["message"]["content"]
    assert len(received) == 2  # the model's call, then LiteLLM's follow-up with what it retrieved
    asked = received[0]["tools"][-1]["function"]["name"]
    assert asked == "headroom_retrieve"
    retrieved = received[1]["messages"][-1]
    assert retrieved["role"] == "tool" and "Request 1: please look at order #4401." in retrieved["content"]
    assert answer.startswith("RETRIEVED ")
    assert 'compacting_proxy_retrievals_total{outcome="found"} 1.0' in metrics
