"""Codex's remote compactions on the live page (issue 36, row 4), in a real browser: Debian's
Chromium (Playwright) watches the real proxy while a Codex-shaped session goes through it to the
fake Responses upstream: requests that grow, a `compaction_trigger` the proxy answers, requests
carrying the sealed item, a second trigger. Each answered trigger must be on the timeline (a mark
and a rule across) and in the well (its blocks as the proxy compacted the history), with what it
replaced in the facts: before, with 11 triggers answered, the page showed only the other requests,
`compacted: 0` and no mark.

`UI_SCREENSHOT=/tmp/remote.png` also writes the page as the first trigger is answered."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.format_chats import as_responses
from tests.support.live_page import CHROMIUM, FORMATS_UPSTREAM, live_page
from tests.support.processes import VENV_BIN, free_port, running
from tests.support.upstreams.chats import support_chat
from tests.support.upstreams.proxy_server import ProxyServer, running_proxy

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="needs Debian's chromium (scripts/test.sh)"),
]
pytest.importorskip("playwright.sync_api")

PAGE_WAIT_MS = 8000
TRIGGER = {"type": "compaction_trigger"}
KEPT = ("user", "developer", "system")  # what Codex keeps of a compacted history itself


@pytest.fixture
def proxy() -> Iterator[ProxyServer]:
    port = free_port()
    args = [str(VENV_BIN / "python"), str(FORMATS_UPSTREAM), "--port", str(port), "--window", "200000"]
    with (
        running(args, ready_url=f"http://127.0.0.1:{port}/_recorded"),
        running_proxy(f"http://127.0.0.1:{port}/v1", 6000, calibrate="false") as server,
    ):
        yield server


class Codex:
    """A Codex-shaped session: one session id, its instructions, the history as it sends it."""

    def __init__(self, proxy: ProxyServer) -> None:
        self.client = httpx.Client(base_url=proxy.base_url, timeout=60)
        self.headers = {"session-id": str(uuid.uuid4())}
        self.instructions, self.items = as_responses(support_chat(16, result_items=20))
        self.requests = 0

    def send(self, items: list[dict[str, Any]]) -> httpx.Response:
        body = {"model": "gpt-5.1-codex", "instructions": self.instructions, "input": items, "store": False}
        answer = self.client.post("/v1/responses", json=body, headers=self.headers)
        assert answer.status_code == 200, answer.text[:300]
        self.requests += 1
        return answer

    def compact(self, history: list[dict[str, Any]]) -> dict[str, Any]:
        """The trigger, answered by the proxy: the history Codex sends next (what it keeps, the item)."""
        answer = self.send([*history, TRIGGER])
        assert answer.headers["x-compaction-remote"] == "answered"
        (item,) = answer.json()["output"]
        kept = [i for i in history if i.get("type") in (None, "message") and i.get("role") in KEPT]
        return {"kept": [*kept, item]}


def ends_of_steps(items: list[dict[str, Any]]) -> list[int]:
    """Where each of the agent's steps ends (after a tool's output): a request's length."""
    return [k + 1 for k, item in enumerate(items) if item.get("type") == "function_call_output"]


def test_each_answered_trigger_is_on_the_timeline_and_in_the_well(proxy: ProxyServer, tmp_path: Path) -> None:
    codex = Codex(proxy)
    ends = ends_of_steps(codex.items)
    with live_page(proxy.base_url, PAGE_WAIT_MS) as page:
        for end in ends[:4]:
            codex.send(codex.items[:end])
        first = codex.items[: ends[3]]
        after_first = codex.compact(first)["kept"]
        expect_remote_well(page, len(first))
        if target := os.environ.get("UI_SCREENSHOT"):
            page.wait_for_timeout(750)
            page.screenshot(path=str(tmp_path / "remote.png"))
            shutil.copyfile(tmp_path / "remote.png", target)

        for end in ends[4:8]:
            codex.send([*after_first, *codex.items[ends[3] : end]])
        second = [*after_first, *codex.items[ends[3] : ends[7]]]
        after_second = codex.compact(second)["kept"]
        (sealed_first, _) = [r["remote"]["sealed"] for r in remote_records(proxy)]
        expect_remote_well(page, len(second) - 1 + sealed_first)  # its item expanded first
        codex.send([*after_second, {"role": "user", "content": "Thanks, that was all."}])

        page.wait_for_function(
            "(n) => document.querySelector('.convs li')?.dataset.requests === String(n)",
            arg=codex.requests,
            timeout=PAGE_WAIT_MS,
        )
        timeline = page.locator("#timeline")
        remote = timeline.locator("rect.tl-after[data-remote]")
        assert remote.count() == 2, "each answered trigger is a bar of its own"
        assert timeline.locator("line.tl-remote").count() == 2
        seqs = [int(remote.nth(k).get_attribute("data-seq")) for k in range(2)]
        assert page.locator(".convs li").count() == 1
        assert page.evaluate("window.__notReloaded === true"), "the page reloaded"
    totals = httpx.get(proxy.base_url + "/ui/conversations", timeout=10).json()["totals"]
    assert totals["requests"] == codex.requests and totals["compacted"] >= 2
    assert [r["seq"] for r in remote_records(proxy)] == seqs


def remote_records(proxy: ProxyServer) -> list[dict[str, Any]]:
    """The records of the remote compactions answered, as `/ui/conversations` has them."""
    (conversation,) = httpx.get(proxy.base_url + "/ui/conversations", timeout=10).json()["conversations"]
    url = f"{proxy.base_url}/ui/conversations/{conversation['key']}"
    return [r for r in httpx.get(url, timeout=10).json()["records"] if r.get("remote")]


def expect_remote_well(page: Any, items: int) -> None:
    """The well and the facts of the trigger just answered: its history's blocks, struck by the
    proxy's compaction, and what the sealed item replaced."""
    page.wait_for_function(
        """() => {
            const well = document.querySelector('#well').dataset;
            return well.remote === '1' && well.seq === document.querySelector('#facts').dataset.seq;
        }""",
        timeout=PAGE_WAIT_MS,
    )
    well = page.locator("#well")
    assert well.locator("rect.blk").count() > 0
    struck = well.locator("rect.blk[data-state=noted], rect.blk[data-state=dropped]")
    assert struck.count() > 0, "the compaction's notes and drops are in the well"
    assert "remote compaction" in page.locator("#well-seq").inner_text()
    facts = page.locator("#facts").inner_text()
    assert "remote compaction" in facts and f"{items} items" in facts, facts
    assert page.locator("#timeline rect.tl-after[data-remote]").count() >= 1
