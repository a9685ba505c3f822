"""The conversation index against its plain definitions, on any order of calls and results: which
tool exchanges may be dropped whole, and the positions every part of it names."""

from __future__ import annotations

from typing import Any

from hypothesis import example, given
from hypothesis import strategies as st

from proxy.engine.index import ConversationIndex
from proxy.engine.reading import TOOL_ROLES
from tests.support.invariants import count

IDS = ("a", "b", "c")

message = st.one_of(
    st.sampled_from([{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]),
    st.lists(st.sampled_from(IDS), max_size=3).map(
        lambda ids: {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": i, "type": "function", "function": {"name": "f", "arguments": "{}"}} for i in ids
            ],
        }
    ),
    st.sampled_from([*IDS, None]).map(
        lambda i: {"role": "tool", "content": "r", **({"tool_call_id": i} if i else {"name": "f"})}
    ),
)


def droppable_by_definition(messages: list[dict[str, Any]], caller: int, end: int) -> bool:
    """The calling message's every result comes before `end` (each result answers the last call of
    its id), and the results right after it answer it or nothing."""
    last: dict[str, int] = {}
    for i, m in enumerate(messages):
        for call in m.get("tool_calls") or ():
            last[call["id"]] = i
    results = {
        i: last.get(m.get("tool_call_id"), i) for i, m in enumerate(messages) if m["role"] in TOOL_ROLES
    }
    if any(c == caller and j >= end for j, c in results.items()):
        return False
    run = range(caller + 1, end)
    return all(results[j] in (caller, j) for j in run if j in results)


@given(st.lists(message, max_size=14))
@example(
    [
        {"role": "user", "content": "u"},
        {"role": "tool", "content": "r", "tool_call_id": "a"},  # answers the later call of id "a"
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "a", "type": "function", "function": {}}],
        },
        {"role": "tool", "content": "r", "tool_call_id": "a"},
    ]
)
def test_exchanges_droppable_as_defined(messages: list[dict[str, Any]]) -> None:
    costs = [count(m) for m in messages]
    index = ConversationIndex.of(
        messages, costs, count, protected_tools=(), keep_recent_turns=2, gap_tokens=0
    )
    for exchange in index.exchanges:
        expected = droppable_by_definition(messages, exchange.start, exchange.end)
        assert exchange.droppable == expected, (exchange, messages)
    assert index.positions == tuple(range(len(messages) + 1))
    assert all(index.positions[e.end] is e.end for e in index.exchanges)
