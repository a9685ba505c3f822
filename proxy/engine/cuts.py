"""How a kept tool result is made smaller during one replay: a note (planned with its facts' budget,
written only if it survives) or a cap to its head, tail and error lines. The replay decides which
results and to what size; this keeps what was cut and says what each cut costs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from proxy.counting.tokens import text_of
from proxy.engine.agent_words import AgentWords
from proxy.engine.caps import cap_text
from proxy.engine.index import ConversationIndex, CountMessage, NoteMemo
from proxy.engine.notes import build_note, is_note, note_without_facts
from proxy.engine.reading import Message

MIN_NOTE_CHARS = 80  # a note's own words, besides its preview
# Counts of concatenated text differ from the sum of their parts by a token or two at the seams.
ADDITIVITY_SLACK = 3
MIN_CAP_TOKENS = 256  # less would keep too little to be worth more than a note
CAP_ROUNDS = 12  # each round cuts and counts the result once: a few milliseconds at 100 KB
CAP_FILL = 0.99  # a cap this close to its size is close enough
CAP_STEP_CHARS = 16  # a search step smaller than this changes the cut by a token or two
CAP_NOTE_CHARS = 240  # what `cap_text` takes of its size for its own words
MIN_CAP_CHARS = CAP_NOTE_CHARS + 120  # the smallest cap that keeps some head and tail


@dataclass(slots=True)
class Cuts:
    index: ConversationIndex
    count: CountMessage
    preview_chars: int
    memo: NoteMemo | None = None
    notes: dict[int, str] = field(default_factory=dict)
    caps: dict[int, str] = field(default_factory=dict)
    uncapped: dict[int, int] = field(default_factory=dict)  # a capped result's cost before its cap
    # Tool results planned as notes: their text, tool, arguments, cost before the plan, and the end
    # of the request they were planned for (the agent's words before it choose the note's facts).
    planned: dict[int, tuple[str, str | None, str | None, int, int]] = field(default_factory=dict)
    words: AgentWords | None = None

    def plan_note(self, i: int, cost: int, end: int) -> int:
        """Plan a note for tool result `i`, which costs `cost` now, in the request `[:end]`; its cost
        after (`cost` if no note is planned). Building a note means finding the facts in the result,
        the costly part, so the plan costs the note with its facts' budget; only the notes that
        survive the replay are written (`write_notes`), since most old results are dropped later."""
        index = self.index
        message = index.messages[i]
        content = message.get("content")
        call = index.results[i]
        tool, arguments = call.tool, call.arguments
        if is_note(content) or (index.protected_tools and index.is_protected(tool)):
            return cost
        text = text_of(content)
        preview_chars = self.preview_chars
        if len(text) <= preview_chars + MIN_NOTE_CHARS:
            return cost  # the note would be as long as the result
        # The head is found again at every call of a loop (its outline scans the whole result): memoised.
        key = ("head", hash(text), len(text), tool, arguments, preview_chars)
        memo = self.memo
        head = memo.get(key) if memo is not None else None
        if head is None:
            head = note_without_facts(text, tool=tool, arguments=arguments, preview_chars=preview_chars)
            if memo is not None:
                memo.put(key, head)
        planned = self.count({**message, "content": head}) + index.facts_cost + ADDITIVITY_SLACK
        if planned < cost:
            self.planned[i] = (text, tool, arguments, cost, end)
            return planned
        return cost

    def write_notes(self, costs: list[int], dropped: Sequence[bool]) -> int:
        """Write the planned notes of the results still kept, updating `costs`; the change in total."""
        delta = 0
        messages = self.index.messages
        for i, (text, tool, arguments, original, end) in self.planned.items():
            if dropped[i]:
                continue
            note = self._note(i, end, text, tool, arguments)
            cost = self.count({**messages[i], "content": note})
            if cost >= original:  # the facts made it no shorter after all: keep the result
                cost = original
            else:
                self.notes[i] = note
            delta += cost - costs[i]
            costs[i] = cost
        self.planned.clear()
        return delta

    def _note(self, i: int, end: int, text: str, tool: str | None, arguments: str | None) -> str:
        words = self.words = self.words or AgentWords(self.index)
        span = words.span(i, end)
        # By hash, not by text: the memo stays small whatever the results' size.
        key = (
            hash(text),
            len(text),
            tool,
            arguments,
            self.preview_chars,
            self.index.facts_cost,
            words.digest(span),
        )
        memo = self.memo
        note = memo.get(key) if memo is not None else None
        if note is None:
            note = build_note(
                text,
                tool=tool,
                arguments=arguments,
                preview_chars=self.preview_chars,
                fits=self._facts_fit,
                used=words.facts(span),
            )
            if memo is not None:
                memo.put(key, note)
        return note

    def _facts_fit(self, kept: str) -> bool:
        """Whether a note's facts section stays within what the plan costed it at."""
        index = self.index
        return self.count({"content": kept}) - index.empty_cost <= index.facts_cost

    def cap(self, i: int, tokens: int, cost: int, *, grow: bool = False) -> int:
        """Cut kept tool result `i`, which costs `cost` now, to about `tokens`, keeping its head, tail
        and error lines; its cost after. With `grow`, cut a capped result again from the whole,
        bigger (or not at all, if it all fits). The caller skips dropped results."""
        index = self.index
        message = index.messages[i]
        content = message.get("content")
        tool = index.results[i].tool
        if (
            i in self.notes
            or i in self.planned
            or (index.protected_tools and index.is_protected(tool))
            or is_note(content)
        ):
            return cost
        text = text_of(content)
        tokens = max(MIN_CAP_TOKENS, tokens)
        whole = self.uncapped.get(i, cost)
        if grow and tokens >= whole:
            self.caps.pop(i, None)
            return whole
        if (tokens >= cost and not grow) or not text:
            return cost
        best = self._fit_cap(message, text, tool, tokens, whole)
        if best is not None and (best[0] < cost or (grow and best[0] > cost)):
            size, capped = best
            self.uncapped.setdefault(i, whole)
            self.caps[i] = capped
            return size
        return cost

    def _fit_cap(
        self, message: Message, text: str, tool: str | None, tokens: int, whole: int
    ) -> tuple[int, str] | None:
        """The biggest cap of `text` that costs at most `tokens`, with its cost: a search over the
        characters kept, proportional until it has a cap under and one over, then by halves. The
        same room gives the same cut whatever the result's size, within CAP_FILL of the room."""
        under: tuple[int, int, str] | None = None  # chars, size, capped
        smallest: tuple[int, str] | None = None  # the cheapest cap tried, for a room smaller than any
        over = len(text) + CAP_NOTE_CHARS  # fewest chars known to cost more (or to keep it all)
        chars = int(len(text) * tokens / max(1, whole))
        size = whole  # the cost at `chars`: the whole's where nothing is cut
        for _ in range(CAP_ROUNDS):
            capped = self._cap_text(text, chars, tool)
            if capped is None:
                if under is not None or chars >= len(text):
                    over, size = min(over, chars), whole  # nothing cut at `chars`: it costs the whole
                elif smallest is None and chars < MIN_CAP_CHARS:
                    chars = MIN_CAP_CHARS  # too small to say what was cut: the least that can say it
                    continue
                else:
                    break
            else:
                size = self.count({**message, "content": capped})
                if smallest is None or size < smallest[0]:
                    smallest = (size, capped)
                if size <= tokens:
                    if under is None or size > under[1]:
                        under = (chars, size, capped)
                    if size >= tokens * CAP_FILL:
                        break
                else:
                    over = min(over, chars)
            low = under[0] if under is not None else 0
            if under is None:  # shrink in proportion to what `chars` cost
                nxt = int(chars * tokens / max(1, size) * 0.97)
            elif over > len(text) + CAP_NOTE_CHARS - 1:  # grow in proportion, below what keeps it all
                nxt = min(int(chars * tokens / max(1, under[1]) * 0.99), len(text) + CAP_NOTE_CHARS - 1)
            else:
                nxt = (low + over) // 2
            if nxt <= low or nxt >= over or abs(nxt - chars) < CAP_STEP_CHARS:
                break
            chars = nxt
        # No cap fits the room: the cheapest one, and the room left over is found elsewhere.
        return smallest if under is None else (under[1], under[2])

    def _cap_text(self, text: str, chars: int, tool: str | None) -> str | None:
        # A loop caps its latest results again at every call (the same text to the same size, as the
        # replay makes the same decisions): memoised like the notes, by hash. `cap_text` is a pure
        # function of this key, so the decisions never depend on the memo.
        key = ("cap", hash(text), len(text), chars, tool)
        memo = self.memo
        capped = memo.get(key) if memo is not None else None
        if capped is None:
            capped = cap_text(text, chars, tool=tool) or ""
            if memo is not None:
                memo.put(key, capped)
        return capped or None
