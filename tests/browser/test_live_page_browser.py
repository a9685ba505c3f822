"""The live page in a real browser: Debian's Chromium, driven by Playwright, watches the real proxy
process while a coding agent's loop goes through it (Chat Completions and Anthropic Messages) to a
fake upstream that reports a prompt cache. Without a reload, the page must show each conversation,
the blocks and struck blocks of what the proxy did (its `/compact` report, asked before each
request), SENT equal to the `x-compaction-tokens-*` figures, and the red line at the threshold.

`UI_SCREENSHOT=docs/ui.png pytest -m browser tests/browser/test_live_page_browser.py` also writes the README's
picture.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.live_page import (
    CHROMIUM,
    CHROMIUM_ARGS,
    FORMATS_UPSTREAM,
    as_chat,
    as_messages,
    coding_loop,
    live_page,
    requests_of,
)
from tests.support.processes import VENV_BIN, free_port, running
from tests.support.upstreams.proxy_server import ProxyServer, running_proxy

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="needs Debian's chromium (scripts/test.sh)"),
]
playwright = pytest.importorskip("playwright.sync_api")

STEPS = 22
CHAT_MODEL, CLAUDE_MODEL = "qwen3-coder:30b", "claude-sonnet-4-5"
SESSION = "5d0c2a4e-8d1b-4f7e-9a55-0c3f1e2b7a90"
PAGE_WAIT_MS = 5000
SCREENSHOT_AT = 17  # a request on which the hammer notes, caps and drops


@pytest.fixture(scope="module")
def proxy() -> Iterator[ProxyServer]:
    port = free_port()
    args = [str(VENV_BIN / "python"), str(FORMATS_UPSTREAM), "--port", str(port)]
    args += ["--window", "200000", "--prompt-cache"]
    with (
        running(args, ready_url=f"http://127.0.0.1:{port}/_recorded"),
        running_proxy(
            f"http://127.0.0.1:{port}/v1",
            8192,
            model_windows=f"{CLAUDE_MODEL}=12000",
            calibrate="false",
        ) as server,
    ):
        yield server


def usage_figures(path: str, body: dict[str, Any]) -> tuple[int, int]:
    """(prompt tokens, cached tokens) as the upstream reported them."""
    usage = body["usage"]
    if path == "/v1/messages":
        cached = usage.get("cache_read_input_tokens", 0)
        return usage["input_tokens"] + usage.get("cache_creation_input_tokens", 0) + cached, cached
    return usage["prompt_tokens"], usage.get("prompt_tokens_details", {}).get("cached_tokens", 0)


def actions(report: dict[str, Any]) -> dict[int, str]:
    acts = {i: "noted" for i in report["truncated"]}
    acts.update((i, "capped") for i in report["capped"])
    acts.update((i, "dropped") for i in report["dropped"])
    return acts


def struck_blocks(report: dict[str, Any], before: dict[int, str]) -> int:
    """The blocks the page marks struck: each message changed anew, a dropped run as one block."""
    now = actions(report)
    new = {i for i, act in now.items() if before.get(i) != act}
    runs: list[list[int]] = []
    for i in report["dropped"]:
        if runs and runs[-1][-1] == i - 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    kept_new = sum(1 for i in new if now[i] != "dropped")
    return kept_new + sum(1 for run in runs if any(i in new for i in run))


class Sent:
    def __init__(self) -> None:
        self.sent = self.forwarded = self.reported = self.cached = 0

    def add(self, before: int, after: int, reported: int, cached: int) -> None:
        self.sent += before
        self.forwarded += after
        self.reported += reported
        self.cached += cached


def test_the_page_follows_an_agent_loop_live(proxy: ProxyServer, tmp_path: Path) -> None:
    client = httpx.Client(base_url=proxy.base_url, timeout=30)
    with live_page(proxy.base_url, PAGE_WAIT_MS) as page:
        assert page.locator(".convs li").count() == 0

        totals, per = Sent(), {"chat": Sent(), "messages": Sent()}
        seen: dict[str, dict[int, str]] = {"chat": {}, "messages": {}}
        last: dict[str, Any] = {}
        hammer: set[str] = set()
        for n, messages in enumerate(requests_of(coding_loop(STEPS)), 1):
            for fmt, path, body, headers in (
                ("chat", "/v1/chat/completions", as_chat(CHAT_MODEL, messages), {}),
                (
                    "messages",
                    "/v1/messages",
                    as_messages(CLAUDE_MODEL, messages),
                    {"x-claude-code-session-id": SESSION, "anthropic-version": "2023-06-01"},
                ),
            ):
                dry = client.post("/compact" + path, json=body, headers=headers)
                report = dry.json()["report"]
                answer = client.post(path, json=body, headers=headers)
                assert answer.status_code == 200, answer.text
                x = answer.headers
                if "x-compaction-tokens-before" in x:  # the figures the client was told
                    before, after = (
                        int(x["x-compaction-tokens-before"]),
                        int(x["x-compaction-tokens-after"]),
                    )
                    assert (before, after) == (report["tokens_before"], report["tokens_after"])
                else:  # sent as it came: the dry run's count
                    assert not report["compacted"]
                    before = after = report["tokens_before"]
                reported, cached = usage_figures(path, answer.json())
                totals.add(before, after, reported, cached)
                per[fmt].add(before, after, reported, cached)
                struck = struck_blocks(report, seen[fmt])
                seen[fmt] = actions(report)
                hammer.update(seen[fmt].values())
                last[fmt] = (report, x, struck, per[fmt])
                if fmt == "messages" and n == SCREENSHOT_AT:
                    take_screenshot(page, report, tmp_path / "ui.png")
            if n in (1, 6) or n % 5 == 0:
                expect_page(page, totals, last, n)
        expect_page(page, totals, last, n)
        assert {"noted", "capped", "dropped"} <= hammer, "the loop must make the hammer fall every way"

        # Each conversation's well, as the proxy's report of its latest request says.
        for fmt in ("chat", "messages"):
            report, x, struck, sent = last[fmt]
            model = CHAT_MODEL if fmt == "chat" else CLAUDE_MODEL
            page.locator(".convs li", has_text=model).click()
            expect_well(page, report, x, struck, sent)
        assert page.evaluate("window.__notReloaded === true"), "the page reloaded"


def take_screenshot(page: Any, report: dict[str, Any], path: Path) -> None:
    """The page as the hammer lands (it follows the newest conversation, Claude's), for the README
    with `UI_SCREENSHOT`."""
    page.wait_for_function(
        "(noted) => document.querySelectorAll('#well rect.blk[data-state=noted]').length === noted"
        " && document.querySelector('#well').dataset.key === document.querySelector('.convs li.sel').dataset.key",
        arg=len(report["truncated"]),
        timeout=PAGE_WAIT_MS,
    )
    page.wait_for_timeout(750)  # the blocks have settled; the hammer has not gone yet
    page.screenshot(path=str(path))
    if target := os.environ.get("UI_SCREENSHOT"):  # relative to the repository's root
        shutil.copyfile(path, Path(__file__).resolve().parents[2] / target)


def expect_page(page: Any, totals: Sent, last: dict[str, Any], n: int) -> None:
    """The list and the proxy's SENT, within a second or so of the request."""
    page.wait_for_function(
        """([n, sent]) => {
            const items = [...document.querySelectorAll('.convs li')];
            const value = (name) => document.querySelector(`[data-sent=${name}]`).dataset.value;
            return items.length === 2 && items.every((li) => li.dataset.requests === String(n))
                && value('sent') === String(sent);
        }""",
        arg=[n, totals.sent],
        timeout=PAGE_WAIT_MS,
    )
    value = lambda name: page.locator(f"[data-sent={name}]").get_attribute("data-value")  # noqa: E731
    assert value("sent") == str(totals.sent)
    assert value("forwarded") == str(totals.forwarded)
    assert value("saved") == str(totals.sent - totals.forwarded)
    assert value("reported") == str(totals.reported)
    assert value("cached") == str(totals.cached)


def expect_well(page: Any, report: dict[str, Any], x: Any, struck: int, sent: Sent) -> None:
    """The selected conversation's well and SENT: its blocks as the proxy's report has them."""
    page.wait_for_function(  # the well of the conversation's latest request
        """() => {
            const well = document.querySelector('#well').dataset;
            const selected = document.querySelector('.convs li.sel').dataset.key;
            return well.key === selected && well.seq === document.querySelector('#facts').dataset.seq;
        }""",
        timeout=PAGE_WAIT_MS,
    )
    well = page.locator("#well")
    count = lambda selector: well.locator(selector).count()  # noqa: E731
    assert (
        count("rect.blk[data-state=noted]")
        == int(x.get("x-compaction-truncated", 0))
        == len(report["truncated"])
    )
    assert (
        count("rect.blk[data-state=capped]") == int(x.get("x-compaction-capped", 0)) == len(report["capped"])
    )
    dropped = well.locator("rect.blk[data-state=dropped]")
    assert sum(int(dropped.nth(k).get_attribute("data-count")) for k in range(dropped.count())) == int(
        x.get("x-compaction-dropped", 0)
    )
    assert count("rect.blk[data-struck]") == struck
    line = well.locator("[data-testid=red-line]")
    assert int(line.get_attribute("data-tokens")) == report["limit"]
    floor = well.locator(".well-floor")
    top, height = float(floor.get_attribute("y")), float(floor.get_attribute("height"))
    at = (top + height - float(line.get_attribute("y1"))) / height
    assert at == pytest.approx(report["limit"] / report["window"], abs=0.005)
    value = lambda name: page.locator(f"[data-csent={name}]").get_attribute("data-value")  # noqa: E731
    assert (value("sent"), value("forwarded"), value("cached")) == (
        str(sent.sent),
        str(sent.forwarded),
        str(sent.cached),
    )


def test_with_api_keys_the_page_asks_for_one_and_keeps_it_out_of_urls(tmp_path: Path) -> None:
    port = free_port()
    args = [str(VENV_BIN / "python"), str(FORMATS_UPSTREAM), "--port", str(port), "--window", "200000"]
    key = "k-live-page-7f3a"
    with (
        running(args, ready_url=f"http://127.0.0.1:{port}/_recorded"),
        running_proxy(f"http://127.0.0.1:{port}/v1", 8192, api_keys=key) as proxy,
        playwright.sync_playwright() as p,
    ):
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            urls: list[str] = []
            page.on("request", lambda request: urls.append(request.url))
            page.goto(proxy.base_url + "/ui")
            page.wait_for_selector("#keyform:not([hidden])", timeout=PAGE_WAIT_MS)
            page.fill("#key-input", "wrong")
            page.click("#key-form button")
            page.wait_for_selector("#key-err:not([hidden])", timeout=PAGE_WAIT_MS)
            page.fill("#key-input", key)
            page.click("#key-form button")
            page.wait_for_selector(".conn.live", timeout=PAGE_WAIT_MS)
            body = as_chat(CHAT_MODEL, requests_of(coding_loop(4))[-1])
            answer = httpx.post(
                proxy.base_url + "/v1/chat/completions", json=body, headers={"authorization": f"Bearer {key}"}
            )
            assert answer.status_code == 200
            page.wait_for_selector(".convs li", timeout=PAGE_WAIT_MS)
            assert page.evaluate("sessionStorage.length") == 1
            assert not any(key in url for url in urls)
        finally:
            browser.close()
