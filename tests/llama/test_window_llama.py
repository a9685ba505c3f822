"""Issue 34, rows 1-5, behind the real llama.cpp `llama-server`: an upstream that counts honestly, with
its own vocabulary (the tiny test model's byte-level BPE, counting 1.3-3.7x what the proxy's estimate
says) and its own template, its `/tokenize` and `usage`, and a refusal (`exceed_context_size_error`)
for a prompt over its window (no context shift: it never cuts silently).

The real proxy process runs as the default install does (`tests.support.default_install`), told only
the upstream's URL: the window is the slot's `n_ctx` from `/props` (4,096). What the server counted is
read from the answer's `usage` (the proxy relays it), what it refused from the proxy's overflow-retry
metric (a retry means the proxy sent a prompt over the window first). Requests are sized by the
server's own count (`/apply-template`, then `/tokenize`). The tiny model processes about a thousand
prompt tokens a second here, so the requests stay under the 4,096-token window.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.default_install import default_install_environment
from tests.support.upstreams import vllm_workloads as work
from tests.support.upstreams.llama import LlamaServer, count_prompt_tokens, running_llama_server
from tests.support.upstreams.proxy_server import ProxyServer, overflow_retries, running_proxy

pytestmark = pytest.mark.llama

CTX = 4_096
RESERVE = 1_024
TRUNCATIONS = re.compile(r"^compacting_proxy_upstream_truncations_total(?:\{[^}]*\})? (\S+)$", re.M)


@pytest.fixture(scope="module")
def llama() -> Iterator[LlamaServer]:
    with running_llama_server(ctx=CTX, slots=1) as server:
        yield server


def fresh_proxy(llama: LlamaServer) -> Any:
    with default_install_environment():
        return running_proxy(f"{llama.base_url}/v1", None)


@pytest.fixture(scope="module")
def proxy(llama: LlamaServer) -> Iterator[ProxyServer]:
    with fresh_proxy(llama) as proxy:
        yield proxy


def sized(llama: LlamaServer, make: Any, tokens: int) -> dict[str, Any]:
    return work.sized(
        make, tokens, lambda body: count_prompt_tokens(llama.base_url, {**body, "model": "tiny"})
    )


def send(proxy: ProxyServer, body: dict[str, Any], max_tokens: int = 8) -> httpx.Response:
    payload = {"model": "tiny", "max_tokens": max_tokens, **body}
    return httpx.post(f"{proxy.base_url}/v1/chat/completions", json=payload, timeout=300)


def accepted(proxy: ProxyServer, answer: httpx.Response) -> int:
    """The prompt size the server read for an answer it gave without a refusal first."""
    assert answer.status_code == 200, f"refused: {answer.text[:300]}"
    assert overflow_retries(proxy) == 0, "the proxy sent the server a prompt over its window"
    return int(answer.json()["usage"]["prompt_tokens"])


@pytest.mark.parametrize("kind", work.KINDS)
def test_what_fits_is_forwarded_and_nothing_over(llama: LlamaServer, kind: str) -> None:
    """Row 1: a paste the server counts at 97% of its window is forwarded whole; a chat half again
    over it is compacted before the server sees it (no refusal, no retry)."""
    paste = sized(llama, lambda n: work.paste(kind, n), int(0.97 * CTX) - 8)
    chat = sized(llama, lambda n: work.history(kind, n, turns=3), int(1.5 * CTX))
    with fresh_proxy(llama) as proxy:
        assert accepted(proxy, send(proxy, paste)) == count_prompt_tokens(
            llama.base_url, {**paste, "model": "t"}
        )
        assert accepted(proxy, send(proxy, chat)) <= CTX - 8


def test_gemini_cli_first_request_is_forwarded(proxy: ProxyServer, llama: LlamaServer) -> None:
    """Row 2: Gemini CLI's first request at the share of the window it has at 16k (14,651 / 16,384),
    its tools' descriptions shortened to fit this window's scale."""
    target = int(14_651 / 16_384 * CTX)

    def chat_size(chars: int) -> int:
        return count_prompt_tokens(llama.base_url, work.gemini_first_request("tiny", chars, 120)[1])

    low, high = 100, 20_000
    while high - low > 10:
        middle = (low + high) // 2
        low, high = (middle, high) if chat_size(middle) <= target else (low, middle)
    assert chat_size(low) > 0.97 * target
    gemini, _ = work.gemini_first_request("tiny", low, 120)
    gemini["generationConfig"]["maxOutputTokens"] = 8
    path = "/v1beta/models/tiny:generateContent"
    answer = httpx.post(proxy.base_url + path, json=gemini, headers={"x-goog-api-key": "k"}, timeout=300)
    assert answer.status_code == 200, answer.text[:300]
    assert answer.json()["usageMetadata"]["promptTokenCount"] == chat_size(low)


@pytest.mark.parametrize("kind", ["prose", "Chinese"])
def test_the_reply_keeps_the_reserve(proxy: ProxyServer, llama: LlamaServer, kind: str) -> None:
    """Row 3: a chat over the window asking 32,000 tokens of reply: llama.cpp ends a reply at the
    window's end, so the prompt must leave the reserve (1,024) free."""
    chat = sized(llama, lambda n: work.history(kind, n, turns=3), int(1.5 * CTX))
    prompt = accepted(proxy, send(proxy, chat, max_tokens=32_000))
    assert prompt <= CTX - RESERVE


def test_no_phantom_cut_in_a_number_heavy_loop(llama: LlamaServer) -> None:
    """Row 4: 16 steps of an agent loop with number-heavy results, each a tenth of the window."""
    shares = []
    with fresh_proxy(llama) as proxy:
        for step in range(1, 17):
            answer = send(proxy, work.loop("numbers", step, 300))
            assert "x-compaction-upstream-truncated" not in answer.headers, f"step {step}: a cut inferred"
            shares.append(accepted(proxy, answer) / CTX)
        metrics = httpx.get(f"{proxy.base_url}/metrics", timeout=30).text
    found = TRUNCATIONS.search(metrics)
    assert found is None or float(found.group(1)) == 0
    compacted = next((i for i, (a, b) in enumerate(itertools.pairwise(shares)) if b < a), len(shares) - 1)
    assert max(shares[: compacted + 1]) >= 0.6, shares
    assert min(shares[compacted + 1 :]) >= 0.15, shares


def test_the_same_request_gets_the_same_decision(llama: LlamaServer) -> None:
    """Row 5: a chat over the window, alone on a fresh process, and on another after other requests."""
    request = sized(llama, lambda n: work.history("prose", n, turns=3), int(1.3 * CTX))

    def forwarded(proxy: ProxyServer) -> tuple[int, Any]:
        answer = httpx.post(f"{proxy.base_url}/compact", json={"model": "tiny", **request}, timeout=300)
        return answer.status_code, answer.json().get("messages")

    with fresh_proxy(llama) as proxy:
        alone = forwarded(proxy)
    with fresh_proxy(llama) as proxy:
        for other in (work.loop("Chinese", 4, 900), work.history("numbers", 6_000, turns=3)):
            send(proxy, other)
        after_others = forwarded(proxy)
    assert alone[0] == 200
    assert after_others == alone
