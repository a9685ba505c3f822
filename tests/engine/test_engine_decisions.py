"""The engine's decisions in long agent loops (issues 16 and 19): one marker per dropped stretch,
mid-conversation system messages dropped with their stretch, unread results capped only to the
line, and caps memoised like notes."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from proxy.counting.tokens import RequestCounter, count_chars4
from proxy.engine.caps import CAP_WORDS
from proxy.engine.compaction import CompactionResult, compact
from proxy.engine.index import Budget, Policy
from proxy.engine.notes import is_dropped_marker
from tests.support.conversations import SYSTEM, tool_call

Message = dict[str, Any]
count = RequestCounter(count_chars4).message


class RecordingMemo:
    """A note memo that keeps everything and remembers what was put."""

    def __init__(self) -> None:
        self.items: dict[Hashable, str] = {}
        self.puts = 0

    def get(self, key: Hashable) -> str | None:
        return self.items.get(key)

    def put(self, key: Hashable, value: str) -> None:
        self.items[key] = value
        self.puts += 1


def log_output(step: int, lines: int) -> str:
    """Shell output of a test run: many plain lines, a failure in the middle, a summary at the end."""
    out = [f"tests/test_mod{step}.py::test_case_{k} PASSED [{k}%]" for k in range(lines)]
    out.insert(lines // 2, f"E   KeyError: 'missing_{step}'")
    out.append(f"=== 1 failed, {lines} passed in 3.2{step}s ===")
    return "\n".join(out)


def loop(steps: int, *, result_lines: int = 40, reminder_every: int = 0) -> list[Message]:
    """A coding agent's loop: one request, then `steps` tool calls, with a system reminder every
    `reminder_every` steps (as Claude Code sends them) when set."""
    chat: list[Message] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "The tests fail since the last merge: find out why and fix it."},
    ]
    for step in range(steps):
        call = tool_call(f"call_{step}", "bash", command=f"pytest tests/test_mod{step}.py")
        chat.append(
            {"role": "assistant", "content": f"Step {step}: running the tests.", "tool_calls": [call]}
        )
        chat.append({"role": "tool", "tool_call_id": call["id"], "content": log_output(step, result_lines)})
        if reminder_every and step % reminder_every == reminder_every - 1:
            chat.append(
                {"role": "system", "content": "Reminder: the todo list is empty; keep it up to date."}
            )
    return chat


def run(chat: list[Message], budget: Budget, memo: RecordingMemo | None = None) -> CompactionResult:
    return compact(chat, budget, count, Policy(), memo)


# Caps are memoised like notes (issue 19, item 5).


def test_caps_are_memoised_and_the_memo_changes_no_decision() -> None:
    chat = loop(20, result_lines=400)  # three results capped and older ones dropped, as at 30 steps
    budget = Budget(limit=6400, target=4800, window=8000)
    memo = RecordingMemo()
    first = run(chat, budget, memo)
    assert first.capped, "the loop's latest results are capped at this window"
    capped = {
        first.messages[k]["content"]
        for k in range(len(first.messages))
        if CAP_WORDS in str(first.messages[k].get("content"))
    }
    assert capped and capped <= set(memo.items.values()), "every cap is in the memo"
    puts = memo.puts
    again = run(chat, budget, memo)
    assert memo.puts == puts, "the same request again: every note and cap is found in the memo"
    assert again.messages == first.messages == run(chat, budget).messages


# One marker per dropped stretch (issue 16, cause 3).


def stretches(result: CompactionResult) -> list[range]:
    return result.runs


def assert_loop_invariants(chat: list[Message], result: CompactionResult) -> None:
    out = result.messages
    head = next(i for i, m in enumerate(chat) if m["role"] != "system")
    assert out[:head] == chat[:head], "the leading system messages stay"
    users = [m for m in chat if m["role"] == "user"]
    assert [m for m in out if m["role"] == "user" and not is_dropped_marker(m)] == users
    calls = {c["id"] for m in out for c in m.get("tool_calls") or []}
    results = {m["tool_call_id"] for m in out if m["role"] == "tool"}
    assert calls == results, "no orphaned call or result"
    dropped = set(result.dropped)
    for run in result.runs:
        # Between two stretches there is a kept message that is not a system message.
        after = run.stop
        while after < len(chat) and chat[after]["role"] == "system" and after not in dropped:
            after += 1
        assert after == len(chat) or after not in dropped, (
            f"a kept system message splits a stretch at {run.stop}"
        )
    assert len([m for m in out if is_dropped_marker(m)]) <= len(result.runs), "one marker per stretch at most"


def test_reminders_in_a_long_loop_go_with_their_stretch_under_one_marker() -> None:
    """Step 320 of a loop with a system reminder every 4 steps, at a 32k window: once, the request
    went out with 80 copies of the reminder and 80 markers."""
    chat = loop(320, result_lines=12, reminder_every=4)
    reminders = sum(m["role"] == "system" for m in chat) - 1
    assert reminders == 80
    budget = Budget(limit=25_600, target=19_200, window=32_000)
    result = run(chat, budget)
    assert result.dropped and not result.overflow
    assert_loop_invariants(chat, result)
    assert len(result.runs) == 1, f"one dropped stretch, not {len(result.runs)}"
    kept_reminders = [m for m in result.messages[1:] if m["role"] == "system"]
    kept_steps = [m for m in result.messages if m.get("tool_calls")]
    # Only the kept steps' own reminders stay (one every 4 steps), none of the dropped stretch's.
    assert len(kept_reminders) <= len(kept_steps) // 4 + 1, (
        "the reminders of the dropped stretch went with it"
    )
    assert sum(1 for m in result.messages if "Earlier conversation dropped" in str(m.get("content"))) == 1


# A result the model has not read yet is capped only to the line (issue 16, cause 4).


def with_fresh_result(chat: list[Message], chars: int) -> list[Message]:
    call = tool_call("call_fresh", "bash", command="cat build.log")
    lines = [f"[{k:05d}] compiling module_{k}.c ... ok" for k in range(chars // 40)]
    text = "\n".join(lines)[:chars]
    return [
        *chat,
        {"role": "assistant", "content": "Reading the build log.", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call["id"], "content": text},
    ]


def test_a_fresh_result_is_capped_to_the_line_not_to_the_target() -> None:
    """8k window, newest result 24,000 chars: it was cut to 11,102 chars and the request went out at
    4,120 tokens although everything up to the line (6,400) was free. (Here counted as chars/4, so
    the result is 32,000 chars to weigh what 24,000 did with the proxy's estimate.)"""
    chat = with_fresh_result(loop(3, result_lines=4), 32_000)
    budget = Budget(limit=6400, target=4800, window=8000)
    result = run(chat, budget)
    assert result.capped == (len(chat) - 1,) and not result.dropped and not result.overflow
    # Within what `cap_text` can keep of it (a quarter of a cap is room for error lines).
    assert budget.limit - 400 <= result.tokens_after <= budget.limit, result.tokens_after
    assert len(result.messages[-1]["content"]) > 22_000


def test_a_fresh_result_is_never_capped_below_what_fits_once_older_exchanges_are_dropped() -> None:
    """Older exchanges too big to keep with the fresh result: they go, and the fresh result gets what
    they leave up to the line, not the share it was first capped to."""
    chat = with_fresh_result(loop(40, result_lines=12), 40_000)
    budget = Budget(limit=6400, target=4800, window=8000)
    result = run(chat, budget)
    assert result.dropped and not result.overflow
    assert_loop_invariants(chat, result)
    assert budget.limit - 300 <= result.tokens_after <= budget.limit, result.tokens_after
    fresh = result.messages[-1]
    assert fresh["tool_call_id"] == "call_fresh" and CAP_WORDS in fresh["content"]
    assert count(fresh) >= budget.limit - sum(count(m) for m in result.messages[:-1]) - 300


def test_fresh_results_of_parallel_calls_are_never_noted() -> None:
    """Five parallel calls the model has not read: none is replaced by a note (the three-result rule
    keeps the last three only once they have been read)."""
    chat = loop(2, result_lines=4)
    calls = [tool_call(f"p{k}", "bash", command=f"cat part{k}.log") for k in range(5)]
    chat.append({"role": "assistant", "content": None, "tool_calls": calls})
    chat.extend(
        {"role": "tool", "tool_call_id": c["id"], "content": log_output(k, 150)} for k, c in enumerate(calls)
    )
    result = run(chat, Budget(limit=6400, target=4800, window=8000))
    assert result.changed
    fresh = range(len(chat) - 5, len(chat))
    assert not set(result.truncated) & set(fresh), "an unread result was noted"


def test_a_loop_with_reminders_keeps_its_compacted_prefix_from_call_to_call() -> None:
    """The decisions of call N are made again for call N+1 (the replay), with the reminders, the
    markers' placement and the fresh results' caps: each request starts with the one before, except
    where keeping it would have put the request over (or within 5% of) the line."""
    chat = loop(80, result_lines=12, reminder_every=4)  # 3 moves in 80 calls, each replayed from the start
    budget = Budget(limit=6400, target=4800, window=8000)
    ends = [i for i in range(3, len(chat) + 1) if i == len(chat) or chat[i]["role"] == "assistant"]
    previous: list[Message] | None = None
    moves = start = 0
    for end in ends:
        sent = run(chat[:end], budget).messages
        if previous is not None and sent[: len(previous)] != previous:
            moves += 1
            grown = sum(count(m) for m in previous) + sum(count(m) for m in chat[start:end])
            assert grown > budget.limit * 0.95, f"the request ending at {end} changed a past that fit"
        previous, start = sent, end
    assert 0 < moves <= len(ends) // 3
