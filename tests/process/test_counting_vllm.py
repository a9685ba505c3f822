"""Issue 34, rows 4 and 5, behind the vLLM-shaped upstream that counts honestly
(`tests.support.upstreams.vllm`), the real proxy process run as the default install does.

4. No phantom silent cut: vLLM never cuts a prompt (it refuses one over its window), and it reports
   honest counts; an agent loop whose tool results are number-heavy (CSV, tab-separated weights, a
   padded table, an `od` dump: the estimate counts them 1.6-1.8x what the vocabularies do) must not be
   taken for a silent cut. The window stays 32,768: the forwarded size keeps reaching the line over a
   long loop (on e02f76e it fell to about 2,000 tokens, 6% of the window, after the first request).
5. The same request gets the same decision from a fresh process and from one that has served other
   requests of the same model before it (on e02f76e a pasted 14,263-token text was forwarded by one and
   refused by the other): the same status, and the same body upstream, byte for byte.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from tests.support.default_install import default_install_environment
from tests.support.upstreams import vllm_workloads as work
from tests.support.upstreams.proxy_server import ProxyServer, running_proxy
from tests.support.upstreams.vllm import VllmServer, running_vllm

pytestmark = pytest.mark.process

UPSTREAMS = {
    "llama3": {"vocabulary": "llama3", "model": "llama-3.1-8b-instruct"},
    "local": {"vocabulary": "cl100k", "model": "local"},
    "gateway": {"vocabulary": "cl100k", "model": "local", "gateway": True},
}
TRUNCATIONS = re.compile(r"^compacting_proxy_upstream_truncations_total(?:\{[^}]*\})? (\S+)$", re.M)


def started(window: int, name: str) -> Iterator[VllmServer]:
    with running_vllm(window, **UPSTREAMS[name]) as server:
        yield server


@pytest.fixture(scope="module", params=sorted(UPSTREAMS))
def vllm_32k(request: pytest.FixtureRequest) -> Iterator[VllmServer]:
    yield from started(32_768, request.param)


@pytest.fixture(scope="module", params=sorted(UPSTREAMS))
def vllm_16k(request: pytest.FixtureRequest) -> Iterator[VllmServer]:
    yield from started(16_384, request.param)


def fresh_proxy(vllm: VllmServer) -> Any:
    """A new proxy process as the default install runs it, told nothing but the upstream's URL."""
    with default_install_environment():
        return running_proxy(f"{vllm.base_url}/v1", None)


def send(
    proxy: ProxyServer, vllm: VllmServer, body: dict[str, Any]
) -> tuple[httpx.Response, dict[str, Any] | None]:
    vllm.clear()
    answer = httpx.post(
        f"{proxy.base_url}/v1/chat/completions", json={**body, "model": vllm.model}, timeout=120
    )
    received = vllm.received()
    return answer, (received[-1] if received else None)


def test_no_phantom_cut_in_a_number_heavy_loop(vllm_32k: VllmServer) -> None:
    """Row 4: 30 steps of an agent loop, each adding a 5,000-character number-heavy result."""
    window = vllm_32k.window
    shares: list[float] = []
    with fresh_proxy(vllm_32k) as proxy:
        for step in range(1, 31):
            answer, received = send(proxy, vllm_32k, work.loop("numbers", step, 5_000))
            assert answer.status_code == 200 and received is not None and received["status"] == 200
            assert "x-compaction-upstream-truncated" not in answer.headers, f"step {step}: a cut inferred"
            shares.append(received["prompt_tokens"] / window)
        metrics = httpx.get(f"{proxy.base_url}/metrics", timeout=30).text
    found = TRUNCATIONS.search(metrics)
    assert found is None or float(found.group(1)) == 0, "the proxy counted a silent truncation"
    compacted = next((i for i, (a, b) in enumerate(itertools.pairwise(shares)) if b < a), len(shares) - 1)
    after = shares[compacted + 1 :]
    assert max(after) >= 0.7, f"the forwarded size never reached the line again: {after}"
    assert min(after) >= 0.15, f"the window shrank: {after}"


def decision(answer: httpx.Response, received: dict[str, Any] | None) -> tuple[int, Any]:
    """What the proxy decided for a request: its status, and the body the upstream got (if any)."""
    forwarded = received["body"] if received is not None and answer.status_code == 200 else None
    return answer.status_code, forwarded


CASES: dict[str, Callable[[VllmServer], dict[str, Any]]] = {
    "pasted prose at 14,263": lambda v: work.sized(lambda n: work.paste("prose", n), 14_263, v.count_body),
    "chat of prose at 1.3x": lambda v: {
        **work.sized(lambda n: work.history("prose", n), int(1.3 * v.window), v.count_body),
        "max_tokens": 4_096,
    },
    "loop of code at 1.3x": lambda v: {
        **work.sized(lambda n: work.loop("code", 10, n // 10), int(1.3 * v.window), v.count_body),
        "max_tokens": 4_096,
    },
}
OTHERS: list[Callable[[], dict[str, Any]]] = [
    lambda: work.loop("Chinese", 8, 3_000),
    lambda: work.history("numbers", 40_000),
    lambda: work.paste("Japanese", 9_000),
]


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_same_request_gets_the_same_decision(vllm_16k: VllmServer, case: str) -> None:
    """Row 5: the request alone on a fresh process, then on another after a Chinese loop, a chat of
    number-heavy results and a Japanese paste of the same model, and again after itself."""
    request = CASES[case](vllm_16k)
    with fresh_proxy(vllm_16k) as proxy:
        alone = decision(*send(proxy, vllm_16k, request))
    assert alone[0] == 200, "the request fits the window by the server's count"
    with fresh_proxy(vllm_16k) as proxy:
        for other in OTHERS:
            send(proxy, vllm_16k, other())
        after_others = decision(*send(proxy, vllm_16k, request))
        again = decision(*send(proxy, vllm_16k, request))
    assert after_others == alone
    assert again == alone
