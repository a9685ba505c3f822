"""Issue 34, rows 1-3, behind a vLLM-shaped upstream that counts honestly (`tests.support.upstreams.vllm`:
vLLM 0.11's `/tokenize`, its 400s, `max_tokens` enforced, real vocabularies through a chat template).

The real `compacting-proxy` process runs as the default install does (`tests.support.default_install`:
the base dependencies only) with no settings but the upstream's URL: the window is the one `/v1/models`
advertises (16,384). Three upstreams: Llama 3 under a name that says so, cl100k under a name that says
nothing (`local`), and the same behind a gateway that routes `/v1` alone (no `/tokenize`). Every
request is sized by the upstream's own count, and every assertion reads what the upstream received and
what it answered:

1. no false refusal: what fits by the server's count is forwarded, on prose, code, JSON, number-heavy
   output, Chinese, Japanese and agent loops; and nothing the upstream receives is over its window;
2. Gemini CLI's first request (tools included, 14,651 tokens at 16,384) is forwarded;
3. the reply keeps `COMPACT_REPLY_RESERVE` (1,024), or what the client asked if less, wherever the
   window allows it: compacted deeper instead of squeezed, clamped below the reserve only when what is
   never cut leaves less, and then to exactly what it leaves.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.default_install import default_install_environment
from tests.support.upstreams import vllm_workloads as work
from tests.support.upstreams.proxy_server import ProxyServer, running_proxy
from tests.support.upstreams.vllm import VllmServer, running_vllm

pytestmark = pytest.mark.process

WINDOW = 16_384
RESERVE = 1_024  # COMPACT_REPLY_RESERVE's default
REPLY = 900  # what the fake model wants to write: fits the reserve, so a reply cut short was squeezed
UPSTREAMS = {
    "llama3": {"vocabulary": "llama3", "model": "llama-3.1-8b-instruct"},
    "local": {"vocabulary": "cl100k", "model": "local"},
    "gateway": {"vocabulary": "cl100k", "model": "local", "gateway": True},
}


@pytest.fixture(scope="module", params=sorted(UPSTREAMS))
def vllm(request: pytest.FixtureRequest) -> Iterator[VllmServer]:
    with running_vllm(WINDOW, reply_tokens=REPLY, **UPSTREAMS[request.param]) as server:
        yield server


@pytest.fixture(scope="module")
def proxy(vllm: VllmServer) -> Iterator[ProxyServer]:
    """The proxy as the default install runs it, told nothing but the upstream's URL; one per upstream
    (the same request gets the same decision from it whatever came before: `test_counting_vllm.py`)."""
    with default_install_environment(), running_proxy(f"{vllm.base_url}/v1", None) as proxy:
        yield proxy


def send(
    proxy: ProxyServer, vllm: VllmServer, body: dict[str, Any]
) -> tuple[httpx.Response, list[dict[str, Any]]]:
    """One chat through the proxy: the client's answer, and what the upstream received for it."""
    vllm.clear()
    answer = httpx.post(
        f"{proxy.base_url}/v1/chat/completions", json={**body, "model": vllm.model}, timeout=120
    )
    return answer, vllm.received()


def sized(vllm: VllmServer, make: Any, tokens: int) -> dict[str, Any]:
    return work.sized(make, tokens, vllm.count_body)


def forwarded_once(answer: httpx.Response, received: list[dict[str, Any]]) -> dict[str, Any]:
    """The one request the upstream received for a client's request, which it accepted."""
    assert answer.status_code == 200, f"the proxy refused a request that fits: {answer.text[:300]}"
    assert [r["status"] for r in received] == [200], [(r["status"], r.get("error")) for r in received]
    return received[0]


@pytest.mark.parametrize("kind", work.KINDS)
def test_what_fits_by_the_servers_count_is_forwarded(proxy: ProxyServer, vllm: VllmServer, kind: str) -> None:
    """Row 1: a pasted text the server counts at 99% of its window (nothing the proxy may cut) is sent
    as it came; a chat and an agent loop half again over the window are compacted until the server
    takes them, never refused and never sent over."""
    paste = sized(vllm, lambda n: work.paste(kind, n), int(0.99 * WINDOW))
    chat = sized(vllm, lambda n: work.history(kind, n), int(1.5 * WINDOW))
    loop = sized(vllm, lambda n: work.loop(kind, 12, n // 12), int(1.5 * WINDOW))
    answer, received = send(proxy, vllm, paste)
    assert forwarded_once(answer, received)["body"]["messages"] == paste["messages"]
    for body in (chat, loop):
        forwarded_once(*send(proxy, vllm, body))


def test_gemini_cli_first_request_is_forwarded(proxy: ProxyServer, vllm: VllmServer) -> None:
    """Row 2: Gemini CLI's first request (no history, its tools included) at 14,651 tokens by the
    server's count, 16,384 advertised: through the proxy's Gemini bridge, forwarded whole."""

    def chat_size(chars: int) -> int:
        return vllm.count(work.gemini_first_request(vllm.model, chars)[1])

    low, high = 1_000, 100_000
    while high - low > 20:
        middle = (low + high) // 2
        low, high = (middle, high) if chat_size(middle) <= 14_651 else (low, middle)
    gemini, _ = work.gemini_first_request(vllm.model, low)
    vllm.clear()
    path = f"/v1beta/models/{vllm.model}:streamGenerateContent?alt=sse"
    answer = httpx.post(proxy.base_url + path, json=gemini, headers={"x-goog-api-key": "k"}, timeout=120)
    received = forwarded_once(answer, vllm.received())
    assert received["prompt_tokens"] == chat_size(low) > 14_500
    assert received["max_tokens"] is None or received["max_tokens"] >= RESERVE
    assert '"candidates"' in answer.text


@pytest.mark.parametrize(
    ("kind", "asked"), [("prose", 32_000), ("JSON", 4_096), ("Chinese", 32_000), ("Japanese", 4_096)]
)
def test_the_reply_keeps_the_reserve_by_compacting_deeper(
    proxy: ProxyServer, vllm: VllmServer, kind: str, asked: int
) -> None:
    """Row 3: a chat and an agent loop over the window, asking for more reply than the window has room
    for (Claude Code asks 32,000): compacted deep enough that the reply keeps at least the reserve, and
    the model's 900-token answer comes back whole."""
    chat = {**sized(vllm, lambda n: work.history(kind, n), int(1.5 * WINDOW)), "max_tokens": asked}
    loop = {**sized(vllm, lambda n: work.loop(kind, 12, n // 12), int(1.5 * WINDOW)), "max_tokens": asked}
    for body in (chat, loop):
        answer, received = send(proxy, vllm, body)
        sent = forwarded_once(answer, received)
        assert sent["max_tokens"] >= RESERVE, f"the reply squeezed to {sent['max_tokens']}"
        assert answer.json()["choices"][0]["finish_reason"] == "stop"


def test_a_request_under_the_line_keeps_the_room_it_has(proxy: ProxyServer, vllm: VllmServer) -> None:
    """Row 3: a Claude Code-sized request the server counts 11,136 (4,864 free) asking 32,000 goes out
    as it came, its reply limit lowered to what the prompt leaves, not squeezed (539 on e02f76e)."""
    body = {**sized(vllm, lambda n: work.history("prose", n), 11_136), "max_tokens": 32_000}
    answer, received = send(proxy, vllm, body)
    sent = forwarded_once(answer, received)
    assert sent["body"]["messages"] == body["messages"]
    assert RESERVE <= sent["max_tokens"] <= WINDOW - sent["prompt_tokens"]
    assert answer.json()["choices"][0]["finish_reason"] == "stop"


def test_the_reply_goes_below_the_reserve_only_by_the_exact_count(
    proxy: ProxyServer, vllm: VllmServer
) -> None:
    """Row 3: what is never cut (a pasted text) leaves 400 tokens: forwarded as it came, the reply
    limit lowered to what the server's count leaves (exactly, where the proxy can count exactly)."""
    body = {**sized(vllm, lambda n: work.paste("prose", n), WINDOW - 400), "max_tokens": 4_096}
    answer, received = send(proxy, vllm, body)
    sent = forwarded_once(answer, received)
    room = WINDOW - sent["prompt_tokens"]
    assert sent["body"]["messages"] == body["messages"]
    assert 0 < sent["max_tokens"] <= room
    if not vllm.gateway:
        assert sent["max_tokens"] == room


def test_a_smaller_ask_is_kept(proxy: ProxyServer, vllm: VllmServer) -> None:
    """Row 3: a client asking less than the reserve gets exactly what it asked, compacted for it."""
    body = {**sized(vllm, lambda n: work.loop("Chinese", 12, n // 12), int(1.5 * WINDOW)), "max_tokens": 300}
    answer, received = send(proxy, vllm, body)
    assert forwarded_once(answer, received)["max_tokens"] == 300
