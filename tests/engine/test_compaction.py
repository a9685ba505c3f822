from __future__ import annotations

import copy
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.counting.tokens import RequestCounter, count_chars4
from proxy.engine.compaction import CompactionResult, compact
from proxy.engine.index import Budget, Policy
from proxy.engine.notes import DROPPED_PREFIX, NOTE_PREFIX, is_dropped_marker
from tests.support.conversations import SYSTEM, agent_chat, bike_shop_chat, order_result, tool_call
from tests.support.format_chats import unmerged
from tests.support.invariants import assert_invariants, assert_no_orphans, count, total


def window_budget(window: int, threshold: float = 0.8, target: float = 0.6) -> Budget:
    return Budget(limit=int(window * threshold), target=int(window * target))


def run(messages: list[dict[str, Any]], budget: Budget, **policy: Any) -> CompactionResult:
    return compact(messages, budget, count, Policy(**policy))


# The pattern's bike-shop chat with an 8,000-token window.


def test_below_the_line_nothing_changes() -> None:
    chat = bike_shop_chat(items=10)
    result = run(chat, window_budget(8000))
    assert not result.changed
    assert result.tokens_before == result.tokens_after == total(chat)
    assert all(a is b for a, b in zip(result.messages, chat, strict=True))


def test_bike_shop_truncates_the_oldest_tool_result_first() -> None:
    chat = bike_shop_chat()
    original = copy.deepcopy(chat)
    budget = window_budget(8000)
    assert total(chat) > budget.limit
    # One kept result: the second search's request notes the first result (the default keeps three
    # results and caps the first instead: test_a_request_over_the_line_with_everything_protected_caps).
    result = run(chat, budget, keep_recent_tool_results=1)
    assert chat == original, "the input must not be mutated"
    assert result.truncated == (3,) and result.dropped == ()
    assert result.tokens_after <= budget.limit
    note = result.messages[3]["content"]
    assert note.startswith(NOTE_PREFIX)
    assert "get_order" in note and "4471" in note and f"{len(original[3]['content']):,} chars" in note
    assert result.messages[3]["tool_call_id"] == "call_1"
    # The system prompt, the first request and the last two requests with what follows are untouched.
    assert result.messages[0] is chat[0] and result.messages[1] is chat[1]
    assert all(a is b for a, b in zip(result.messages[5:], chat[5:], strict=True))


def test_bike_shop_drops_old_exchanges_when_truncating_is_not_enough() -> None:
    chat = bike_shop_chat()
    chat[4]["content"] = "Long apology. " * 1500  # an old answer: not a tool result, so only level 2 helps
    chat.append({"role": "assistant", "content": "Done: return R-1 opened."})
    chat.append({"role": "user", "content": "Thanks! Anything else I should know?"})
    budget = window_budget(8000)
    result = run(chat, budget, keep_recent_turns=1)  # the seed's rules suffice at every request
    assert result.truncated == (3,) or 3 in result.dropped
    assert result.dropped == (2, 3, 4)
    assert result.tokens_after <= budget.limit
    assert [m["role"] for m in result.messages[:4]] == ["system", "user", "assistant", "user"]
    assert is_dropped_marker(result.messages[2]) and "3 earlier messages" in result.messages[2]["content"]
    assert result.messages[1] is chat[1], "the first request is never dropped"
    assert result.messages[3] is chat[5]


def test_loop_rules_drop_a_tool_exchange_but_keep_the_answer() -> None:
    """The same chat with the default rules: the request after the second search is over the line with
    everything protected, so the old exchange (call and result) goes and the answer (a decision) stays;
    the last result, not read yet, is capped only to what is left under the line. At the final request
    that result has been read and the line is crossed again: the seed's rules drop the old turn."""
    chat = bike_shop_chat()
    chat[4]["content"] = "Long apology. " * 1500
    budget = window_budget(8000)
    result = run(chat[:8], budget, keep_recent_tool_results=1)
    assert result.dropped == (2, 3) and result.capped == (7,) and not result.overflow
    assert budget.limit - 100 <= result.tokens_after <= budget.limit, "capped to the line, not the target"
    # The marker stands between the first request and the answer: no role fits both, it joins the answer.
    answer = result.messages[2]
    assert answer["content"] == f"{DROPPED_PREFIX} 2 earlier messages.]\n\n{chat[4]['content']}"
    assert unmerged(answer) == chat[4], "the answer stays"
    assert [m is c for m, c in zip(result.messages[3:], chat[5:8], strict=True)] == [True, True, False]
    capped = result.messages[5]["content"]
    assert capped.startswith(chat[7]["content"][:40]) and "chars cut here" in capped
    assert "call search_parts again" in capped and capped.endswith(chat[7]["content"][-40:])
    chat.append({"role": "assistant", "content": "Done: return R-1 opened."})
    chat.append({"role": "user", "content": "Thanks! Anything else I should know?"})
    final = run(chat, budget, keep_recent_tool_results=1)
    assert final.dropped == (2, 3, 4) and final.capped == (7,) and not final.overflow
    again = next(m for m in final.messages if m.get("tool_call_id") == chat[7]["tool_call_id"])
    assert again["content"] == capped, "the cap made for the request before is made again"


def test_reported_tokens_match_a_recount() -> None:
    chat = agent_chat(40, seed=3)
    result = run(chat, window_budget(16000))
    assert result.changed
    assert result.tokens_after == total(result.messages)
    assert result.tokens_before == total(chat)


def test_compaction_goes_down_to_the_target_in_one_batch() -> None:
    chat = agent_chat(40, seed=4)
    budget = window_budget(16000)
    result = run(chat, budget)
    assert result.tokens_after <= budget.limit
    # It went well below the line: the next turns have room before anything moves again.
    assert result.tokens_after <= budget.target + max(count(m) for m in chat)


# Edge cases.


def test_no_user_message_is_never_compacted() -> None:
    chat = [{"role": "system", "content": "s" * 40000}, {"role": "assistant", "content": "hello"}]
    result = run(chat, window_budget(1000))
    assert not result.changed and result.overflow
    assert result.messages == chat


def test_only_system_messages() -> None:
    chat = [{"role": "system", "content": "a" * 50000}, {"role": "developer", "content": "b" * 100}]
    result = run(chat, window_budget(1000))
    assert result.messages == chat and result.overflow


def test_empty_messages() -> None:
    result = run([], window_budget(1000))
    assert result.messages == [] and not result.changed


def test_fewer_requests_than_keep_recent_turns_protects_every_user_message() -> None:
    chat = bike_shop_chat()[:5]
    budget = window_budget(1000)
    result = run(chat, budget)
    # The seed's rules protect everything; the loop rules cap the one (kept) result to what is left.
    assert result.capped == (3,) and not result.dropped and not result.overflow
    assert result.messages[:3] == chat[:3] and result.messages[4] == chat[4]
    assert result.tokens_after <= budget.limit


def test_parallel_tool_calls_are_dropped_together() -> None:
    chat: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "first"}]
    for turn in range(6):
        calls = [tool_call(f"c{turn}{k}", "get_order", order=k) for k in range(3)]
        chat.append({"role": "user", "content": f"request {turn}"})
        chat.append({"role": "assistant", "content": None, "tool_calls": calls})
        chat.extend(
            {"role": "tool", "tool_call_id": c["id"], "content": order_result(turn, 20, seed=k)}
            for k, c in enumerate(calls)
        )
        chat.append({"role": "assistant", "content": f"answer {turn}"})
    result = run(chat, window_budget(3000))
    assert result.dropped
    assert_no_orphans(result.messages)


def test_content_parts_are_counted_and_compacted() -> None:
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64," + "A" * 100}}
    chat: list[dict[str, Any]] = [
        {"role": "user", "content": [{"type": "text", "text": "What is this?"}, image]},
        {"role": "assistant", "content": None, "tool_calls": [tool_call("c1", "lookup")]},
        {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": order_result(1, 80)}]},
        {"role": "assistant", "content": [{"type": "text", "text": "A wheel."}]},
        {"role": "user", "content": [{"type": "text", "text": "And this?"}, image]},
        {"role": "assistant", "content": "Another wheel."},
        {"role": "user", "content": "Thanks"},
    ]
    counter = RequestCounter(count_chars4, image_tokens=500)
    assert counter.message(chat[0]) >= 500
    result = compact(
        chat, Budget(limit=2000, target=1500), counter.message, Policy(keep_recent_tool_results=0)
    )
    assert result.truncated == (2,)
    assert result.messages[2]["content"].startswith(NOTE_PREFIX)
    assert "lookup" in result.messages[2]["content"]


def test_notes_are_never_truncated_again() -> None:
    first = run(bike_shop_chat(), window_budget(8000), keep_recent_tool_results=1)
    note = first.messages[3]
    grown = [*first.messages[:-1], {"role": "user", "content": "Great. " + "Open a return. " * 140}]
    again = run(grown, Budget(limit=4000, target=3000), keep_recent_turns=1, keep_recent_tool_results=1)
    assert again.truncated == (7,), "the note at 3 is not truncated again"
    assert again.messages[3] is note


def test_protected_tools_are_never_truncated() -> None:
    chat = bike_shop_chat()
    result = run(chat, window_budget(8000), protected_tools=("get_*",))
    assert 3 not in result.truncated
    assert result.messages[3]["content"] == chat[3]["content"] or 3 in result.dropped


def test_protected_exchanges_are_dropped_last_and_reported() -> None:
    chat = agent_chat(30, seed=5)
    chat.insert(2, {"role": "assistant", "content": None, "tool_calls": [tool_call("pay", "charge_card")]})
    chat.insert(3, {"role": "tool", "tool_call_id": "pay", "content": "Receipt R-99812: charged $129.00"})
    kept = run(chat, window_budget(5000), protected_tools=("charge_card",))
    assert kept.dropped and not kept.protected_dropped
    assert any(m.get("tool_call_id") == "pay" and "R-99812" in m["content"] for m in kept.messages)
    squeezed = run(chat, window_budget(1200), protected_tools=("charge_card",))
    assert squeezed.protected_dropped


def test_orphan_tool_results_in_the_input_are_not_split_from_their_call() -> None:
    chat = bike_shop_chat()
    # A result that arrives after the next request (a client bug): the cut before that request is skipped.
    chat.insert(6, {"role": "tool", "tool_call_id": "call_1", "content": "late"})
    result = run(chat, window_budget(2000))
    assert_no_orphans(result.messages)


def test_unknown_message_fields_are_kept() -> None:
    chat = bike_shop_chat()
    chat[3]["x-vendor"] = {"keep": True}
    chat[1]["name"] = "customer"
    result = run(chat, window_budget(8000))
    assert result.messages[3]["x-vendor"] == {"keep": True}
    assert result.messages[1]["name"] == "customer"


# Properties.

sizes = st.integers(min_value=1, max_value=60)


@st.composite
def conversations(draw: st.DrawFn) -> list[dict[str, Any]]:
    turns = draw(st.integers(min_value=0, max_value=12))
    chat = agent_chat(turns, seed=draw(st.integers(0, 10_000)), result_items=draw(sizes), parallel=3)
    if draw(st.booleans()):
        chat.insert(1, {"role": "developer", "content": "Be brief."})
    if draw(st.booleans()) and len(chat) > 3:
        chat[-1] = {"role": "user", "content": "And now?"}
    return chat


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    chat=conversations(),
    window=st.integers(min_value=200, max_value=20_000),
    keep=st.integers(min_value=1, max_value=3),
)
def test_invariants(chat: list[dict[str, Any]], window: int, keep: int) -> None:
    original = copy.deepcopy(chat)
    budget = window_budget(window)
    budget = Budget(budget.limit, budget.target, window=window)
    result = run(chat, budget, keep_recent_turns=keep)
    assert chat == original
    assert_invariants(chat, result, budget, keep)
    # Idempotence: compacting a compacted history changes nothing.
    if not result.overflow:
        assert run(result.messages, budget, keep_recent_turns=keep).messages == result.messages
