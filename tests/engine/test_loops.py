"""Agent loops: one user request followed by many tool calls, where the protected part is everything.

Golden loops (one request, parallel calls, a huge last result, a huge paste) and property tests of the
invariants: calls never split from their results, system messages and user messages never changed,
the latest request intact, idempotence, and never over the window unless the result says so.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from proxy.counting.tokens import RequestCounter, count_chars4
from proxy.engine.caps import CAP_WORDS
from proxy.engine.compaction import CompactionResult, compact
from proxy.engine.index import Budget, Policy
from proxy.engine.notes import DROPPED_PREFIX, NOTE_PREFIX, is_dropped_marker
from tests.support.fakes import RecordingUpstream, proxy_client
from tests.support.format_chats import unmerged
from tests.support.invariants import assert_invariants, assert_no_orphans
from tests.support.loops import PYTEST, SYSTEM, one_request_loop, source, step

count = RequestCounter(count_chars4).message


def budget(window: int) -> Budget:
    return Budget(limit=int(window * 0.8), target=int(window * 0.6), window=window)


def run(messages: list[dict[str, Any]], window: int, **policy: Any) -> CompactionResult:
    return compact(messages, budget(window), count, Policy(**policy))


def test_one_request_loop_notes_older_results_and_keeps_the_last_three() -> None:
    loop = one_request_loop(12)
    original = copy.deepcopy(loop)
    result = run(loop, 16000)
    assert loop == original
    assert result.tokens_after <= result.limit and not result.overflow
    out = result.messages
    assert out[:2] == loop[:2], "the system prompt and the request are untouched"
    tools = [m for m in out if m["role"] == "tool"]
    assert [m["content"] for m in tools[-3:]] == [m["content"] for m in loop if m["role"] == "tool"][-3:]
    noted = [m["content"] for m in tools if m["content"].startswith(NOTE_PREFIX)]
    assert noted and result.protected_from == 0  # fewer requests than keep_recent_turns: all protected
    assert result.inside_protected(result.truncated) == list(result.truncated)
    # A file read's note keeps its line range and the names it defines, not cat -n line numbers.
    assert "lines 1-240" in noted[0] and "defines fn0x0_0, fn0x0_1" in noted[0]
    assert not any(f"Kept: {n};" in noted[0] for n in ("1", "2", "3"))
    assert_invariants(loop, result, budget(16000))


def test_the_replay_keeps_a_loop_prefix_stable_between_calls() -> None:
    """Consecutive calls of one loop: the later request starts with the earlier one's compacted
    messages, except when it had to move (and then it went well below the line)."""
    loop = one_request_loop(24)  # three moves among its 24 calls, each call replayed from the start
    ends = [i for i, m in enumerate(loop) if m["role"] == "assistant"] + [len(loop)]
    previous: list[dict[str, Any]] | None = None
    moves = 0
    for end in ends[1:]:
        result = run(loop[:end], 20000)
        assert not result.overflow
        if previous is not None and result.messages[: len(previous)] != previous:
            moves += 1
            assert result.tokens_after <= budget(20000).target + 3 * count(loop[-1])
        previous = result.messages
    assert 0 < moves <= len(ends) // 3


def test_parallel_calls_are_dropped_whole_and_answers_stay() -> None:
    loop = one_request_loop(0)
    for k in range(40):
        step(loop, k, [("read_file", source(f"p{k}x{j}", 60)) for j in range(3)], text=f"Step {k}.")
        if k % 10 == 9:
            loop.append({"role": "assistant", "content": f"Decision {k}: keep the old signature."})
    result = run(loop, 8000)
    assert result.dropped and not result.overflow
    out = result.messages
    assert_no_orphans(out)
    # Between two answers in words a marker is a user message (roles alternate); else it joins one.
    assert [m for m in out if m["role"] == "user" and not is_dropped_marker(m)] == [loop[1]]
    # A marker after an answer, before a tool-calls message, joins the answer (roles alternate).
    texts = [str(unmerged(m).get("content")) for m in out]
    decisions = [text for text in texts if text.startswith("Decision")]
    assert decisions == [f"Decision {k}: keep the old signature." for k in (9, 19, 29, 39)]
    # Each run of dropped exchanges is one marker; a call and all of its results go together.
    for run_ in result.runs:
        gone = [loop[i] for i in run_]
        ids = {c["id"] for m in gone for c in m.get("tool_calls") or ()}
        assert ids == {m["tool_call_id"] for m in gone if m["role"] == "tool"}
    assert any(DROPPED_PREFIX in str(m.get("content")) for m in out)
    assert result.inside_protected(result.dropped) == list(result.dropped)


def test_a_huge_last_result_is_capped_and_nothing_is_dropped_for_it() -> None:
    loop = one_request_loop(3, lines=80)
    log = "\n".join(f"2026-12-03 07:{k % 60:02}:00 INFO step {k} ok" for k in range(9000))
    log = log[: len(log) // 2] + "\n" + PYTEST + log[len(log) // 2 :]  # 300 KB, the failure in the middle
    step(loop, 99, [("bash", log)])
    result = run(loop, 32000)
    assert not result.overflow and result.tokens_after <= result.limit
    assert result.capped == (len(loop) - 1,) and not result.dropped
    capped = result.messages[-1]["content"]
    assert capped.startswith(log[:200]) and capped.endswith(log[-200:])
    assert CAP_WORDS in capped and "call bash again" in capped
    assert "KeyError: 'invoice_88213'" in capped and "1 failed, 211 passed in 3.21s" in capped
    assert "[exit status 1]" in capped
    assert f"of {len(log):,} chars" in capped


def test_two_recent_big_reads_are_capped_to_share_what_is_left() -> None:
    loop = one_request_loop(2, lines=80)
    step(loop, 50, [("read_file", source("big_a", 3200)), ("read_file", source("big_b", 3200))])
    result = run(loop, 32000)
    assert not result.overflow and set(result.capped) == {len(loop) - 2, len(loop) - 1}
    assert not result.dropped


def test_a_huge_paste_in_the_latest_request_is_never_cut() -> None:
    loop = one_request_loop(4, lines=80)
    loop.append({"role": "assistant", "content": "Done."})
    loop.append({"role": "user", "content": "Here is the log:\n" + "x" * 200_000})
    result = run(loop, 32000)
    assert result.over_window and result.overflow
    assert result.messages == loop, "nothing is dropped when dropping cannot make it fit"
    assert result.oversized == (len(loop) - 1, count(loop[-1]))


def test_a_paste_over_the_line_but_within_the_window_goes_out_marked() -> None:
    loop = one_request_loop(4, lines=80)
    loop.append({"role": "assistant", "content": "Done."})
    loop.append({"role": "user", "content": "Here is the log:\n" + "x" * 110_000})
    result = run(loop, 32000)
    assert result.overflow and not result.over_window
    assert result.messages[-1] is loop[-1]
    assert result.tokens_after <= 32000


def test_test_output_notes_keep_failures_errors_summary_and_status() -> None:
    loop = one_request_loop(0)
    step(loop, 0, [("run_tests", PYTEST + "\n" * 2000)])
    for k in range(1, 8):
        step(loop, k, [("read_file", source(f"r{k}", 200))])
    result = run(loop, 8000)
    note = result.messages[3]["content"]
    assert note.startswith(NOTE_PREFIX)
    for kept in (
        "tests/test_billing.py::test_totals",
        "KeyError: 'invoice_88213'",
        "1 failed, 211 passed in 3.21s",
        "exit status 1",
    ):
        assert kept in note


def test_the_last_results_stay_whole_after_a_drop_far_under_the_line() -> None:
    """A loop that drops its older exchanges at 8k keeps its last three reads whole: e02f76e noted
    two of them with the drop (`truncated (19, 21)`), leaving 2,040 tokens of a 6,400 line."""
    loop = one_request_loop(11)
    result = run(loop, 8000)
    tools = [i for i, m in enumerate(loop) if m["role"] == "tool"]
    assert result.dropped and result.tokens_after <= result.limit
    assert not result.truncated and not result.recent_noted
    assert [result.messages[-k] for k in (5, 3, 1)] == [loop[i] for i in tools[-3:]]


def test_the_last_results_are_noted_only_when_they_alone_do_not_fit() -> None:
    loop = one_request_loop(4, lines=240)
    loop.append({"role": "assistant", "content": "Reading on."})
    tools = [i for i, m in enumerate(loop) if m["role"] == "tool"]
    roomy = run(loop, 1400)  # capped, never noted
    assert not roomy.truncated and not roomy.recent_noted and set(roomy.capped) == set(tools[-3:])
    tight = run(loop, 1000)  # even capped they do not fit: noted, oldest first, and said
    assert tight.recent_noted == tight.truncated == tuple(tools[-3:]) and not tight.overflow


# Properties.


def planned_loop(plan: list[tuple[int, list[list[int]], bool]]) -> list[dict[str, Any]]:
    """A loop of requests, each `(words, steps, answered)`: the request's length in words, its steps'
    file reads by their lines, and whether an answer in words ends it."""
    loop: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    for r, (words, steps, answered) in enumerate(plan):
        loop.append({"role": "user", "content": f"Request {r}: " + "please " * words})
        for k, sizes in enumerate(steps):
            step(loop, r * 100 + k, [("read_file", source(f"f{r}_{k}_{j}", n)) for j, n in enumerate(sizes)])
        if answered:
            loop.append({"role": "assistant", "content": f"Answer {r}."})
    return loop


@st.composite
def loops(draw: st.DrawFn) -> list[dict[str, Any]]:
    plan = []
    for _ in range(draw(st.integers(1, 3))):
        steps = draw(st.lists(st.lists(st.integers(1, 1600), min_size=1, max_size=4), max_size=10))
        plan.append((draw(st.integers(1, 400)), steps, draw(st.booleans())))
    return planned_loop(plan)


@pytest.mark.slow  # a long property run: seconds, not milliseconds
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(loop=loops(), window=st.integers(1500, 40_000), keep_results=st.integers(0, 4))
# e02f76e noted index 7, the oldest of the last four results, with the drop (found on a fresh clone).
@example(
    loop=planned_loop([(1, [[1, 1]], False), (1, [[48], [60, 172, 188]], False)]), window=3865, keep_results=4
)
def test_loop_invariants(loop: list[dict[str, Any]], window: int, keep_results: int) -> None:
    original = copy.deepcopy(loop)
    result = run(loop, window, keep_recent_tool_results=keep_results)
    assert loop == original
    assert_invariants(loop, result, budget(window))
    users = [i for i, m in enumerate(loop) if m["role"] == "user"]
    assert any(m is loop[users[-1]] for m in result.messages), "the latest request is never touched"
    # Inside the protected part, the last kept results are never dropped, and noted only when they
    # alone do not fit (said in `recent_noted`: restored whole, they would be over the line).
    tools = [i for i, m in enumerate(loop) if m["role"] == "tool"]
    recent = [
        i for i in (tools[len(tools) - keep_results :] if keep_results else ()) if i >= result.protected_from
    ]
    assert not set(recent) & set(result.dropped)
    assert [i for i in recent if i in result.truncated] == list(result.recent_noted)
    if result.recent_noted:
        last = result.recent_noted[-1]
        [note] = [m for m in result.messages if m.get("tool_call_id") == loop[last]["tool_call_id"]]
        assert result.tokens_after - count(note) + count(loop[last]) > result.limit
    if not result.overflow:
        again = run(result.messages, window, keep_recent_tool_results=keep_results)
        assert again.messages == result.messages, "idempotent"


# Through the app: what the upstream receives, the headers and the metrics.


async def test_the_app_reports_what_the_loop_rules_did() -> None:
    upstream = RecordingUpstream()
    loop = one_request_loop(12)
    async with proxy_client(upstream, window=16000) as client:
        response = await client.post("/v1/chat/completions", json={"model": "m", "messages": loop})
        metrics = (await client.get("/metrics")).text
    assert response.status_code == 200
    sent = upstream.last_json()["messages"]
    noted = [i for i, m in enumerate(sent) if str(m.get("content")).startswith(NOTE_PREFIX)]
    assert sent[:2] == loop[:2] and sent[-3:] == loop[-3:] and noted
    assert response.headers["x-compaction-protected"] == f"truncated={len(noted)} capped=0 dropped=0"
    assert f'compacting_proxy_protected_messages_total{{action="truncated"}} {len(noted)}.0' in metrics


async def test_the_app_says_when_the_last_results_are_noted_all_the_same() -> None:
    loop = one_request_loop(4, lines=240)
    loop.append({"role": "assistant", "content": "Reading on."})
    tools = [i for i, m in enumerate(loop) if m["role"] == "tool"]
    for window, noted in ((1400, []), (1000, tools[-3:])):
        upstream = RecordingUpstream()
        body = {"model": "m", "messages": loop, "max_tokens": 64}
        async with proxy_client(upstream, window=window) as client:
            response = await client.post("/v1/chat/completions", json=body)
            report = (await client.post("/compact", json=body)).json()["report"]
        sent = upstream.last_json()["messages"]
        assert response.status_code == 200 and report["recent_noted"] == noted
        assert response.headers.get("x-compaction-recent-noted") == (str(len(noted)) if noted else None)
        assert sum(str(m.get("content")).startswith(NOTE_PREFIX) for m in sent) == len(noted)


def test_nothing_is_dropped_when_dropping_would_make_it_bigger() -> None:
    """A tiny exchange is smaller than the marker that would stand for it: a request that fits the
    window as it is goes out as it came (marked over the line), not bigger."""
    loop = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Summarise this: " + "word " * 3000},
    ]
    step(loop, 0, [("read_file", "ok")])
    size = sum(count(m) for m in loop)
    window = int(size / 0.85)
    result = run(loop, window, keep_recent_tool_results=0)
    assert result.overflow and not result.over_window and result.oversized is None
    assert result.messages == loop and result.tokens_after == size


async def test_level_3_summarises_the_exchanges_a_loop_dropped() -> None:
    from proxy.engine.summary import SUMMARY_PREFIX
    from tests.support.fakes import SummarisingUpstream

    upstream = SummarisingUpstream()
    loop = one_request_loop(0)
    for k in range(40):
        step(loop, k, [("read_file", source(f"s{k}", 60)) for _ in range(2)], text=f"Step {k}.")
    settings = {"window": 8000, "summarize": True, "summary_tokens": 200}
    async with proxy_client(upstream, **settings) as client:
        response = await client.post("/v1/chat/completions", json={"model": "m", "messages": loop})
    assert response.status_code == 200 and int(response.headers["x-compaction-summarized"]) >= 1
    [sent] = upstream.chat_requests()
    summaries = [m for m in sent["messages"] if str(m.get("content")).startswith(SUMMARY_PREFIX)]
    assert summaries and sent["messages"][:2] == loop[:2]
    assert_no_orphans(sent["messages"])


def test_line_numbers_of_a_listing_are_not_kept_as_facts() -> None:
    from proxy.engine.notes import build_note

    listing = source("calc", 200).replace("return value * 2", "raise ValueError('bad payload')", 1)
    note = build_note(listing, tool="read_file", arguments='{"path": "src/calc.py"}')
    assert "ValueError('bad payload')" in note
    assert "\\t" not in note and "\t" not in note, "the error line is kept without its cat -n number"
