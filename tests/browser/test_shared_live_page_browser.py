"""The live page shared by replicas, in a real browser: Debian's Chromium (Playwright) watches one of
two real `compacting-proxy` processes sharing a real `redis-server`, while a coding agent's loop goes
through both in turn. Without a reload, the page must list the one conversation with every request,
SENT summing what both replicas told their clients, and the well of the latest request, which the
other replica served and drew."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest

from tests.support.deployment import running_redis
from tests.support.live_page import (
    CHROMIUM,
    FORMATS_UPSTREAM,
    as_chat,
    coding_loop,
    live_page,
    requests_of,
)
from tests.support.processes import VENV_BIN, free_port, running
from tests.support.upstreams.proxy_server import ProxyServer, running_proxy

pytestmark = [
    pytest.mark.browser,
    pytest.mark.redis,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="needs Debian's chromium (scripts/test.sh)"),
]
pytest.importorskip("playwright.sync_api")

STEPS = 13
PAGE_WAIT_MS = 8000


@pytest.fixture
def replicas() -> Iterator[tuple[ProxyServer, ProxyServer]]:
    port = free_port()
    upstream = [str(VENV_BIN / "python"), str(FORMATS_UPSTREAM), "--port", str(port), "--window", "200000"]
    with ExitStack() as stack:
        stack.enter_context(running(upstream, ready_url=f"http://127.0.0.1:{port}/_recorded"))
        redis = stack.enter_context(running_redis())
        a, b = (
            stack.enter_context(
                running_proxy(f"http://127.0.0.1:{port}/v1", 4096, calibrate="false", cache_url=redis.url)
            )
            for _ in range(2)
        )
        yield a, b


def test_the_page_of_one_replica_follows_a_loop_through_both(
    replicas: tuple[ProxyServer, ProxyServer],
) -> None:
    a, b = replicas
    with live_page(b.base_url, PAGE_WAIT_MS) as page:
        page.wait_for_timeout(2500)  # the page's watching flag reaches replica a

        sent, x = 0, httpx.Headers()
        for n, messages in enumerate(requests_of(coding_loop(STEPS)), 1):
            replica = a if n % 2 else b
            # What the replica counts a request it forwards as it came, asked just before: its count
            # narrows as the upstream's usage rules vocabularies out, so asked later it may differ.
            dry = _dry_before(replica, messages)
            answer = httpx.post(
                replica.base_url + "/v1/chat/completions", json=as_chat("m", messages), timeout=30
            )
            assert answer.status_code == 200, answer.text
            x = answer.headers
            sent += int(x.get("x-compaction-tokens-before") or 0) or dry
        assert n % 2 == 1, "the last request must go through the other replica"
        assert "x-compaction-tokens-before" in x, "the loop must make the hammer fall"

        shown = """() => {
            const items = [...document.querySelectorAll('.convs li')];
            const value = document.querySelector('[data-sent=sent]').dataset.value;
            return [items.length, items.map((item) => item.dataset.requests), value];
        }"""
        try:
            page.wait_for_function(
                f"([n, sent]) => {{ const [items, requests, value] = ({shown})(); "
                "return items === 1 && requests[0] === String(n) && value === String(sent); }",
                arg=[n, sent],
                timeout=PAGE_WAIT_MS,
            )
        except Exception as error:  # what the page showed instead, in the failure
            raise AssertionError(
                f"page shows {page.evaluate(shown)}, expected {[1, [str(n)], str(sent)]}"
            ) from error
        page.wait_for_function(  # the well of the latest request, drawn by replica a
            """() => document.querySelector('#well').dataset.seq === document.querySelector('#facts').dataset.seq""",
            timeout=PAGE_WAIT_MS,
        )
        for state, header in (("noted", "truncated"), ("capped", "capped")):
            blocks = page.locator(f"#well rect.blk[data-state={state}]").count()
            assert blocks == int(x.get(f"x-compaction-{header}", 0))
        assert page.locator("#well rect.blk").count() > 0
        assert page.evaluate("window.__notReloaded === true"), "the page reloaded"


def _dry_before(replica: ProxyServer, messages: list[dict[str, object]]) -> int:
    """A request sent as it came: its size by the proxy's count (the dry run's)."""
    report = httpx.post(replica.base_url + "/compact", json=as_chat("m", messages), timeout=30).json()[
        "report"
    ]
    return int(report["tokens_before"])
