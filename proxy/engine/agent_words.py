"""What the agent's own messages say around a tool result: the facts its note keeps first.

What an agent reads back from a note is mostly what it acted on: the file it opened next, the
function it edited, the test it ran again. A note written when the request ending at `end` is
compacted may read the assistant messages after the one that made the call, up to `end` (at most
`AGENT_MESSAGES` of them): all before `end`, so the replay writes the same note for every later
request of the conversation, and the prefix stays byte-identical. Bounded work: a few messages per
note, each read once per call.
"""

from __future__ import annotations

import bisect
from typing import Any

import orjson

from proxy.counting.tokens import text_of
from proxy.engine.facts import agent_facts
from proxy.engine.index import ConversationIndex

AGENT_MESSAGES = 16


class AgentWords:
    """The agent's words of one call's conversation, read lazily, each message once."""

    def __init__(self, index: ConversationIndex) -> None:
        self.index = index
        self._texts: dict[int, str] = {}
        self._facts: dict[int, frozenset[str]] = {}

    def span(self, i: int, end: int) -> list[int]:
        """The assistant messages a note of result `i`, written for the request `[:end]`, reads."""
        replies = self.index.replies
        first = bisect.bisect_right(replies, self.index.results[i].caller)  # its reactions, not its call
        last = bisect.bisect_left(replies, end)
        return list(replies[first : min(last, first + AGENT_MESSAGES)])

    def digest(self, span: list[int]) -> int:
        """What the messages of `span` say, as a key for the note memo."""
        return hash(tuple(self._text(k) for k in span))

    def facts(self, span: list[int]) -> frozenset[str]:
        found: set[str] = set()
        for k in span:
            if k not in self._facts:
                self._facts[k] = agent_facts(self._text(k))
            found |= self._facts[k]
        return frozenset(found)

    def _text(self, k: int) -> str:
        if k not in self._texts:
            message = self.index.messages[k]
            calls = message.get("tool_calls")
            said = [text_of(message.get("content"))]
            for call in calls if isinstance(calls, list) else ():
                function = call.get("function") if isinstance(call, dict) else None
                if isinstance(function, dict):
                    said.append(_arguments_text(function.get("arguments")))
            self._texts[k] = "\n".join(said)
        return self._texts[k]


def _arguments_text(arguments: Any) -> str:
    """A call's arguments as words: the values of its JSON object (a command, a path)."""
    if not isinstance(arguments, str):
        return ""
    try:
        value = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return arguments
    if isinstance(value, dict):
        return "\n".join(v if isinstance(v, str) else orjson.dumps(v).decode() for v in value.values())
    return arguments
