"""Replaying a simulated conversation through a compactor, request by request, as a client that
keeps the full history does: the pattern's plain algorithm (as the seed writes it) and ours, what
each sent, the prompt-cache prefix kept between calls. Shared by `benchmarks/cache/bench_cache.py`,
`bench_loops.py`, `bench_trajectories.py` and the regression tests of `tests/engine/test_cache_stability.py`."""

from __future__ import annotations

import copy
import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from proxy.counting.tokens import RequestCounter, count_chars4
from proxy.engine.compaction import compact
from proxy.engine.index import Budget, Policy
from proxy.engine.plan import budget_for
from proxy.settings import ModelWindow
from tests.support import simulated_chats as sim

Message = dict[str, Any]


COUNTER = RequestCounter(count_chars4)


COUNT = COUNTER.message


BODY: dict[str, Any] = {"model": "simulated", "tools": sim.TOOL_SCHEMAS}


THRESHOLD = 0.8


KEEP_RECENT_TURNS = 2


REPLY_RESERVE = 1024


def plain_estimate(system: str, messages: Sequence[Message]) -> int:
    """A rough count, about 4 characters per token."""
    chars = len(system) + sum(len(json.dumps(m)) for m in messages)
    return math.ceil(chars / 4)


def plain_keep_from(messages: Sequence[Message], keep: int) -> int:
    """Where the protected part starts: the Nth user request from the end (0 if there are fewer)."""
    seen = 0
    for i in range(len(messages) - 1, -1, -1):
        if messages[i]["role"] == "user":
            seen += 1
            if seen == keep:
                return i
    return 0


def plain_note(content: str) -> str:
    return f"[Truncated to save context: {len(content)} chars. Preview: {content[:150]}...]"


def plain_compact(
    messages: list[Message],
    *,
    system: str,
    max_tokens: int,
    threshold: float = THRESHOLD,
    keep: int = KEEP_RECENT_TURNS,
) -> list[Message]:
    """The seed's `compact()`, line for line (its WINDOW and SYSTEM made parameters)."""
    limit = max_tokens * threshold
    if plain_estimate(system, messages) <= limit:
        return messages
    out = copy.deepcopy(messages)

    for i in range(plain_keep_from(out, keep)):
        m = out[i]
        if m["role"] != "tool" or m["content"].startswith("[Truncated"):
            continue
        m["content"] = plain_note(m["content"])
        if plain_estimate(system, out) <= limit:
            return out

    while plain_estimate(system, out) > limit:
        following = [i for i, m in enumerate(out) if i > 1 and m["role"] == "user"]
        if not following or following[0] > plain_keep_from(out, keep):
            break
        del out[1 : following[0]]
    return out


def dumped_size(message: Message) -> int:
    return len(json.dumps(message))


class SizeCache:
    """`dumped_size`, remembered per message object (held, so that its id is never reused)."""

    def __init__(self) -> None:
        self.sizes: dict[int, tuple[Message, int]] = {}

    def __call__(self, message: Message) -> int:
        known = self.sizes.get(id(message))
        if known is None or known[0] is not message:
            known = self.sizes[id(message)] = (message, dumped_size(message))
        return known[1]


def plain_compact_fast(
    messages: list[Message],
    *,
    system: str,
    max_tokens: int,
    threshold: float = THRESHOLD,
    keep: int = KEEP_RECENT_TURNS,
    size: Callable[[Message], int] = dumped_size,
) -> list[Message]:
    """The same decisions as `plain_compact`, with a running estimate instead of a full one after
    every change; untouched messages are passed through, not copied. `size` is `dumped_size` or
    a cache of it."""
    limit = max_tokens * threshold
    sizes = [size(m) for m in messages]
    chars = len(system) + sum(sizes)
    if math.ceil(chars / 4) <= limit:
        return messages
    out = list(messages)
    for i in range(plain_keep_from(out, keep)):
        m = out[i]
        if m["role"] != "tool" or m["content"].startswith("[Truncated"):
            continue
        out[i] = {**m, "content": plain_note(m["content"])}
        note_size = dumped_size(out[i])
        chars += note_size - sizes[i]
        sizes[i] = note_size
        if math.ceil(chars / 4) <= limit:
            return out

    # Level 2 in the original coordinates: drop j removes [cut_{j-1}, cut_j), cut_0 = 1, where the
    # cuts are the user requests after index 1; the seed stops when the next cut passes the start
    # of the protected part, or fewer than `keep` requests are left.
    users = [i for i, m in enumerate(out) if m["role"] == "user"]
    cuts = [u for u in users if u > 1]
    first_is_user = bool(out) and out[0]["role"] == "user"
    start = 1
    for cut in cuts:
        if math.ceil(chars / 4) <= limit:
            break
        left = [u for u in users if u >= start and u > 0]
        remaining = ([0] if first_is_user else []) + left
        keep_at = remaining[-keep] if len(remaining) >= keep else 0
        if keep_at == 0 or cut > keep_at:
            break
        chars -= sum(sizes[start:cut])
        start = cut
    return out if start == 1 else [out[0], *out[start:]]


@dataclass(frozen=True, slots=True)
class Sent:
    messages: list[Message]
    over_line: bool
    unavoidable: bool  # the protected part alone is over the line
    seconds: float


Compactor = Callable[[list[Message]], Sent]


def _split_system(history: list[Message]) -> tuple[list[Message], str, list[Message]]:
    """The seed keeps its system prompt apart from `messages`; a proxy finds it at the front."""
    head = 0
    while head < len(history) and history[head]["role"] in ("system", "developer"):
        head += 1
    system = "".join(str(m.get("content") or "") for m in history[:head])
    return history[:head], system, history[head:]


def _plain_unavoidable(system: str, rest: list[Message], limit: float) -> bool:
    keep_at = plain_keep_from(rest, KEEP_RECENT_TURNS)
    kept = rest if keep_at == 0 else [rest[0], *rest[keep_at:]]
    return plain_estimate(system, kept) > limit


def plain_proxy(window: int, fast: bool = True) -> Compactor:
    """The plain algorithm in a proxy: on the full history, every time. The fast version remembers
    each message's serialised size (its estimate is the same; only its time is not the seed's)."""
    size = SizeCache()

    def run(history: list[Message]) -> Sent:
        head, system, rest = _split_system(history)
        started = time.process_time()
        if fast:
            out = plain_compact_fast(rest, system=system, max_tokens=window, size=size)
        else:
            out = plain_compact(rest, system=system, max_tokens=window)
        seconds = time.process_time() - started
        limit = window * THRESHOLD
        over = plain_estimate(system, out) > limit
        return Sent([*head, *out], over, over and _plain_unavoidable(system, rest, limit), seconds)

    return run


def plain_client(window: int) -> Compactor:
    """The seed's loop: the client's history is replaced by its compacted form before each call."""
    state: dict[str, Any] = {"history": [], "seen": 0}

    def run(history: list[Message]) -> Sent:
        head, system, rest = _split_system(history)
        kept: list[Message] = state["history"]
        kept.extend(rest[state["seen"] :])
        state["seen"] = len(rest)
        started = time.process_time()
        kept[:] = plain_compact(kept, system=system, max_tokens=window)
        seconds = time.process_time() - started
        limit = window * THRESHOLD
        over = plain_estimate(system, kept) > limit
        return Sent([*head, *kept], over, over and _plain_unavoidable(system, kept, limit), seconds)

    return run


def our_budget(window: int, target: float) -> Budget:
    model = ModelWindow(
        window=window,
        threshold=THRESHOLD,
        target=target,
        keep_recent_turns=KEEP_RECENT_TURNS,
        reply_reserve=REPLY_RESERVE,
    )
    return budget_for(BODY, model, COUNTER)


def protected_tokens(history: Sequence[Message], costs: Sequence[int], keep: int = KEEP_RECENT_TURNS) -> int:
    """What our engine may never touch: the leading system messages, the first user request and
    the last `keep` user requests with everything after them (all of it with fewer requests)."""
    users = [i for i, m in enumerate(history) if m["role"] == "user"]
    if len(users) <= keep:
        return sum(costs)
    head = next(i for i, m in enumerate(history) if m["role"] not in ("system", "developer"))
    return sum(costs[:head]) + costs[users[0]] + sum(costs[users[-keep] :])


def ours(window: int, target: float) -> Compactor:
    budget = our_budget(window, target)
    policy = Policy(keep_recent_turns=KEEP_RECENT_TURNS)

    def run(history: list[Message]) -> Sent:
        started = time.process_time()
        result = compact(history, budget, COUNT, policy)
        seconds = time.process_time() - started
        unavoidable = False
        if result.overflow:
            costs = [COUNT(m) for m in history]
            unavoidable = budget.fixed + protected_tokens(history, costs) > budget.limit
        return Sent(result.messages, result.overflow, unavoidable, seconds)

    return run


@dataclass(slots=True)
class Run:
    name: str
    window: int
    requests: int = 0
    sent_tokens: int = 0
    base_tokens: int = 0  # Σ tokens of each request that has a successor
    reused_tokens: int = 0  # Σ tokens of its common prefix with that successor
    uncached_tokens: int = 0
    breaks: int = 0
    break_turns: set[int] = field(default_factory=set)
    lost_at_breaks: int = 0  # Σ tokens of the previous request past the common prefix, at breaks
    over_line: int = 0
    unavoidable: int = 0
    seconds: float = 0.0
    peak_tokens: int = 0
    sent: list[list[Message]] = field(default_factory=list)  # kept only when asked

    @property
    def retention(self) -> float:
        return self.reused_tokens / self.base_tokens if self.base_tokens else 1.0


class TokenCache:
    """Counts messages, remembering the conversation's own (live) messages by identity."""

    def __init__(self, messages: Sequence[Message]) -> None:
        self.known = {id(m): COUNT(m) for m in messages}

    def __call__(self, message: Message) -> int:
        known = self.known.get(id(message))
        return known if known is not None else COUNT(message)


def common_prefix(a: Sequence[Message], b: Sequence[Message]) -> int:
    """How many whole messages `a` and `b` share from the start, compared serialised."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x is not y and orjson.dumps(x) != orjson.dumps(y):
            break
        n += 1
    return n


def replay(
    conversation: sim.Conversation,
    compactor: Compactor,
    name: str,
    window: int,
    *,
    keep_sent: bool = False,
    tokens: TokenCache | None = None,
) -> Run:
    tokens = tokens or TokenCache(conversation.messages)
    run = Run(name, window)
    turn_of = conversation.turn_of_request()
    previous: list[Message] | None = None
    previous_tokens: list[int] = []
    for k in range(len(conversation.requests)):
        sent = compactor(conversation.history(k))
        counts = [tokens(m) for m in sent.messages]
        total = sum(counts)
        run.requests += 1
        run.sent_tokens += total
        run.peak_tokens = max(run.peak_tokens, total)
        run.seconds += sent.seconds
        run.over_line += sent.over_line
        run.unavoidable += sent.unavoidable
        if previous is None:
            run.uncached_tokens += total
        else:
            shared = common_prefix(previous, sent.messages)
            reused = sum(previous_tokens[:shared])
            previous_total = sum(previous_tokens)
            run.base_tokens += previous_total
            run.reused_tokens += reused
            run.uncached_tokens += total - sum(counts[:shared])
            if shared < len(previous):
                run.breaks += 1
                run.break_turns.add(turn_of[k])
                run.lost_at_breaks += previous_total - reused
        if keep_sent:
            run.sent.append(sent.messages)
        previous, previous_tokens = sent.messages, counts
    return run
