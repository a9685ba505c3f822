"""Issue 35, the big-body rows, against the real `compacting-proxy` process on loopback in front of
`Hostile` (a scripted upstream that records what it received): Codex compaction items repeated in
one request (row 1), Gemini calls matched without ids (row 2), a huge body's files in /dev/shm and
the helper processes after `kill -9` (row 8), item-heavy bodies compacted (row 11). `/healthz` is
polled while the heavy request runs and must answer within 50 ms plus the idle noise of the same
test (`tests/support/health.py`), and the proxy's RSS comes back within 229 MB of the idle
process (`rss_limit_kb`: the issue's 300 MB when an idle proxy held 71; row 11's never passes 250).
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.health import answer_all, responsive_during, rss_limit_kb, upstream_and_proxy
from tests.support.hostile import (
    Proxy,
    function_calls,
    hostile_upstream,
    proxy_for,
)
from tests.support.processes import VENV_BIN, free_port, running

pytestmark = [pytest.mark.process, pytest.mark.timeout(300)]
# What row 11's request may add at its peak: the growth limit (`rss_limit_kb`: the issue's 300 MB
# against an idle 71 MB), and 21 MB more that the counting keeps of its 200,000 texts since the four
# vocabularies count them (five memos of 200,000 counts). 4d49091 added 315 MB.
ROW_11_PEAK_KB = (300 - 71 + 21) * 1024
SHARED_MEMORY = "/dev/shm"  # where a huge body's files go (`body_files.py`)
POSTER = httpx.Client(timeout=120, headers={"content-type": "application/json"})


def rss_settles_under_limit(proxy: Proxy, timeout: float = 20.0) -> int:
    """The proxy's RSS once a large request's objects are freed (in a worker thread, a few at a
    time, after the answer: `Offloader.release`), in kB: polled until under the limit or `timeout`."""
    deadline = time.monotonic() + timeout
    while (rss := proxy.rss_kb()) >= rss_limit_kb(proxy) and time.monotonic() < deadline:
        time.sleep(0.2)
    return rss


def post(url: str, content: bytes) -> tuple[httpx.Response, float]:
    started = time.perf_counter()
    response = POSTER.post(url, content=content)
    return response, time.perf_counter() - started


# --- 1: the proxy's own compaction items, many times in one request -----------------------------

COMPACTION_KEY = "one-key-for-the-items-of-these-tests"
ALICE = {"authorization": "Bearer alice", "content-type": "application/json"}


def trigger(turns: int, answer_bytes: int) -> bytes:
    """Codex's remote compaction of a history of long answers: the item stands for about 45% of it."""
    items: list[dict[str, Any]] = []
    for i in range(turns):
        text = f"answer {i} " + "the wheel is round. " * (answer_bytes // 20)
        items.append({"role": "user", "content": f"question {i}"})
        items.append(
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]}
        )
    return json.dumps({"model": "m", "input": [*items, {"type": "compaction_trigger"}]}).encode()


@pytest.fixture(scope="module")
def items() -> dict[str, dict[str, Any]]:
    """Two items the proxy made for Alice: one standing for 0.3 MB of items, one for 4.5 MB (sealed,
    1.9 KB and 16 KB; the large one from a 14 MB history, as the proxy counts it now)."""
    made = {}
    with hostile_upstream() as hostile:
        env = {"COMPACT_WINDOW": "100000000", "COMPACT_COMPACTION_KEY": COMPACTION_KEY}
        with proxy_for(hostile.url, **env) as proxy:
            for name, turns, size in (("small", 20, 40_000), ("large", 40, 350_000)):
                answer = httpx.post(
                    proxy.base_url + "/v1/responses", content=trigger(turns, size), headers=ALICE, timeout=120
                )
                assert answer.status_code == 200, answer.text[:300]
                made[name] = answer.json()["output"][0]
    return made


def carrying(item: dict[str, Any], copies: int) -> bytes:
    """A request carrying `item` `copies` times (Codex sends it once)."""
    return json.dumps(
        {"model": "m", "input": [{"role": "user", "content": "go on"}, *[item] * copies]}
    ).encode()


@pytest.mark.parametrize(("item", "copies", "limit"), [("small", 8, 1024 * 1024), ("large", 9, None)])
def test_1_items_that_expand_past_the_body_limit_together_are_refused(
    items: dict[str, dict[str, Any]], item: str, copies: int, limit: int | None
) -> None:
    """8 copies of a 0.3 MB item under a 1 MB limit (a 15 KB request; on e02f76e 2.6 MB reached the
    upstream), 9 of a 4.5 MB one under the default 32 MB (a 145 KB request): a 413 before anything is
    parsed, nothing upstream, the proxy responsive and its memory flat."""
    content = carrying(items[item], copies)
    env = {"COMPACT_WINDOW": "100000000", "COMPACT_COMPACTION_KEY": COMPACTION_KEY}
    if limit:
        env["COMPACT_MAX_BODY_BYTES"] = str(limit)
    with hostile_upstream() as hostile:
        answer_all(hostile)
        with proxy_for(hostile.url, **env) as proxy:

            def send() -> None:  # again and again for half a second: each is refused at once
                started = time.monotonic()
                while time.monotonic() - started < 0.5:
                    response = POSTER.post(proxy.base_url + "/v1/responses", content=content, headers=ALICE)
                    assert response.status_code == 413, (response.status_code, response.text[:300])
                    assert response.json()["error"]["code"] == "request_too_large"

            responsive_during(proxy, send)
            assert (rss := rss_settles_under_limit(proxy)) < rss_limit_kb(proxy), rss
            once = POSTER.post(
                proxy.base_url + "/v1/responses", content=carrying(items[item], 1), headers=ALICE
            )
            assert once.status_code == 200, once.text[:300]
    assert len(hostile.seen) == 1, "a request over the limit reached the upstream"


def test_1_items_that_expand_within_the_limit_are_expanded_off_the_loop(
    items: dict[str, dict[str, Any]],
) -> None:
    """6 copies of a 4.5 MB item (a 96 KB request, 27 MB expanded): unpacked in a worker thread and
    parsed as a large body is, so /healthz answers meanwhile; forwarded whole."""
    content = carrying(items["large"], 6)
    env = {"COMPACT_WINDOW": "100000000", "COMPACT_COMPACTION_KEY": COMPACTION_KEY}
    with hostile_upstream() as hostile:
        answer_all(hostile)
        with proxy_for(hostile.url, **env) as proxy:

            def send() -> None:
                response = POSTER.post(proxy.base_url + "/v1/responses", content=content, headers=ALICE)
                assert response.status_code == 200, response.text[:300]

            responsive_during(proxy, send)
            assert (rss := rss_settles_under_limit(proxy)) < rss_limit_kb(proxy), rss
    sent = hostile.seen[-1].body
    assert 6 * 4_000_000 < len(sent) < 32 * 1024 * 1024, len(sent)
    assert b'"compaction"' not in sent


def test_1_a_trigger_over_a_long_agent_history_is_answered_off_the_loop() -> None:
    """Codex's remote compaction of 40,000 function calls and their outputs (80,000 items, 6 MB):
    read, written back and sealed in a worker thread, so /healthz answers meanwhile."""
    history = function_calls(40_000).replace(
        b'"input": [', b'"input": [{"role": "user", "content": "go"}, ', 1
    )
    content = history[:-2] + b', {"type": "compaction_trigger"}]}'
    env = {
        "COMPACT_WINDOW": "100000000",
        "COMPACT_COMPACTION_KEY": COMPACTION_KEY,
        "COMPACT_MAX_MESSAGES": "100000",
    }
    with upstream_and_proxy(**env) as (hostile, proxy):

        def send() -> None:
            response = POSTER.post(proxy.base_url + "/v1/responses", content=content, headers=ALICE)
            assert response.status_code == 200, response.text[:300]
            assert response.json()["output"][0]["type"] == "compaction"

        responsive_during(proxy, send)
    # The upstream may count the history (`/apply-template`, `/tokenize`: the planner asks a server
    # that has them), but no model request reaches it: the trigger is answered by the proxy.
    asked = [seen.path for seen in hostile.seen if seen.path not in ("/tokenize", "/apply-template")]
    assert not asked, f"the upstream never sees the trigger, but was asked {asked}"
    assert all(b"compaction_trigger" not in seen.body for seen in hostile.seen)


# --- 2: Gemini calls and results without ids are matched in linear time ----------------------------


def gemini_calls_without_ids(calls: int) -> bytes:
    """A model turn of `calls` function calls, then a user turn of as many responses, none with an id
    (Gemini CLI's own calls carry ids; the API's examples and other clients' do not)."""
    call_parts = [{"functionCall": {"name": "f", "args": {"n": i}}} for i in range(calls)]
    answers = [{"functionResponse": {"name": "f", "response": {"output": "ok"}}} for _ in range(calls)]
    contents: list[dict[str, Any]] = [
        {"role": "user", "parts": [{"text": "run them all"}]},
        {"role": "model", "parts": call_parts},
        {"role": "user", "parts": answers},
    ]
    return json.dumps({"contents": contents}).encode()


def test_2_gemini_calls_without_ids_are_matched_without_freezing_the_proxy() -> None:
    content = gemini_calls_without_ids(8_000)  # 8,000 calls + 8,000 responses, ~0.6 MB
    with upstream_and_proxy(COMPACT_WINDOW="1000000") as (hostile, proxy):
        url = proxy.base_url + "/v1beta/models/m:generateContent"

        def send() -> None:
            response, _ = post(url, content)
            assert response.status_code == 200, response.text[:300]

        responsive_during(proxy, send)
        assert (rss := rss_settles_under_limit(proxy)) < rss_limit_kb(proxy), rss
    sent = json.loads(hostile.seen[-1].body)["messages"]
    calls = [c["id"] for m in sent if m["role"] == "assistant" for c in m.get("tool_calls") or ()]
    results = [m["tool_call_id"] for m in sent if m["role"] == "tool"]
    assert len(calls) == 8_000 and results == calls  # each response answers its call, in order


# --- 8: a huge body's files in /dev/shm, and the helper processes --------------------------------


def body_files_now() -> set[str]:
    """The names of the proxies' body files in the shared memory (other tests' proxies included)."""
    return {name for name in os.listdir(SHARED_MEMORY) if name.startswith("compacting-proxy-")}


def leftovers(before: set[str], settle: float = 10.0) -> set[str]:
    """Files that appeared since `before` and are still there once `settle` seconds have passed
    (another test's proxy beside this one removes its own within that time)."""
    deadline = time.monotonic() + settle
    while (left := body_files_now() - before) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def descendants(pid: int) -> set[int]:
    """Every process below `pid` (the fork server, the resource tracker, the pool's workers)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        with suppress(OSError, ValueError, IndexError):
            stat = Path(f"/proc/{entry}/stat").read_text()
            parents[int(entry)] = int(stat.rpartition(")")[2].split()[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def alive(pids: set[int]) -> set[int]:
    living = set()
    for pid in pids:
        with suppress(OSError):
            if Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z":
                living.add(pid)
    return living


@contextmanager
def limited_proxy(upstream_url: str, limits: str, **env: str) -> Iterator[Proxy]:
    """The proxy started under `ulimit` `limits` (as a shell sets them), its log kept."""
    port = free_port()
    environment = {"COMPACT_UPSTREAM_URL": upstream_url, **env}
    command = [str(VENV_BIN / "compacting-proxy"), "--port", str(port), "--no-access-log"]
    shell = ["bash", "-c", f'ulimit {limits} && exec "$@"', "bash", *command]
    with running(shell, ready_url=f"http://127.0.0.1:{port}/healthz", env=environment) as process:
        yield Proxy(process, f"http://127.0.0.1:{port}")


HUGE = {"COMPACT_MAX_MESSAGES": "300000", "COMPACT_WINDOW": "16000000"}


def post_quietly(url: str, content: bytes) -> None:
    """A post whose connection the test breaks (the proxy killed under it)."""
    with suppress(httpx.HTTPError):
        post(url, content)


def test_8_a_write_that_fails_half_way_leaves_no_file_and_the_body_is_served() -> None:
    """A full /dev/shm, as a file-size limit of 4 MB makes every write past it fail (EFBIG where a
    full tmpfs says ENOSPC): the 15 MB body's file cannot be written; it is parsed in the proxy
    instead, and nothing is left behind."""
    content = function_calls(100_000)
    before = body_files_now()
    with hostile_upstream() as hostile:
        answer_all(hostile)
        with limited_proxy(hostile.url, "-f 4096", **HUGE) as proxy:
            response, _ = post(proxy.base_url + "/v1/responses", content)
            assert response.status_code == 200, response.text[:300]
            assert hostile.seen[-1].body == content
            assert not leftovers(before), "a partial body file was left in the shared memory"


def test_8_the_helpers_and_the_files_go_with_a_killed_proxy() -> None:
    """`kill -9` of the proxy once the pool is idle, and again while a huge body is on its way to
    a child: the fork server, the resource tracker and the workers exit, and the body's files are
    removed (by the child, or by the next proxy's start)."""
    content = function_calls(100_000)
    with hostile_upstream() as hostile:
        answer_all(hostile)
        for moment in ("idle", "parsing"):
            before = body_files_now()
            with proxy_for(hostile.url, **HUGE) as proxy:
                url = proxy.base_url + "/v1/responses"
                if moment == "idle":
                    assert post(url, content)[0].status_code == 200
                else:
                    threading.Thread(target=post_quietly, args=(url, content), daemon=True).start()
                    deadline = time.monotonic() + 60
                    while not body_files_now() - before and time.monotonic() < deadline:
                        time.sleep(0.005)
                helpers = descendants(proxy.process.pid)
                assert helpers, "the fork server was not started"
                proxy.process.kill()
                proxy.process.wait()
                deadline = time.monotonic() + 15
                while alive(helpers) and time.monotonic() < deadline:
                    time.sleep(0.1)
                left = alive(helpers)
                for pid in left:  # not to leave them to the next test
                    os.kill(pid, signal.SIGKILL)
                assert not left, f"{moment}: helpers outlived the proxy"
            # What the child had not taken yet (killed between the proxy's write and the child's
            # read) is removed by the next proxy's start at the latest.
            with proxy_for(hostile.url):
                assert not leftovers(before), f"{moment}: files outlived the proxy"


# --- 11: item-heavy bodies compacted off the event loop ---------------------------------------------


def test_11_two_hundred_thousand_function_calls_compacted_at_8k_do_not_freeze_the_proxy() -> None:
    """The issue's body: a task, 100,000 function calls and their outputs (200,000 items, ~15 MB),
    then a question; at an 8k window all but the last few are dropped."""
    content = function_calls(100_000).replace(
        b'"input": [', b'"input": [{"role": "user", "content": "go"}, ', 1
    )
    with hostile_upstream() as hostile:
        answer_all(hostile)
        with proxy_for(hostile.url, COMPACT_MAX_MESSAGES="300000", COMPACT_WINDOW="8192") as proxy:
            url = proxy.base_url + "/v1/responses"

            peaks: list[int] = []  # the most the process held after each request, over its idle RSS

            def send() -> None:
                response, _ = post(url, content)
                assert response.status_code == 200, response.text[:300]
                assert response.headers.get("x-compaction-dropped"), response.headers
                peaks.append(proxy.rss_kb("VmHWM") - proxy.idle_kb)

            responsive_during(proxy, send)
            print(
                f"RSS {proxy.rss_kb() // 1024} MB at the answer, the first request's peak +{peaks[0] // 1024} MB"
            )
            assert peaks[0] < ROW_11_PEAK_KB, (
                f"compacting 200,000 items took RSS {peaks[0] // 1024} MB over idle"
            )
            assert (rss := rss_settles_under_limit(proxy)) < rss_limit_kb(proxy), rss
    sent = json.loads(hostile.seen[-1].body)
    assert len(sent["input"]) < 1_000, "compacted for the 8k window"
