"""How many planted facts a level-1 compaction keeps in its notes, against the plain algorithm's
previews: shared by `benchmarks/notes/bench_facts.py` and `tests/engine/test_cache_stability.py`."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from proxy.engine.compaction import CompactionResult, compact
from proxy.engine.index import Budget, Policy
from tests.support import cache_replay
from tests.support import simulated_chats as sim

Message = dict[str, Any]


COUNT = cache_replay.COUNT


@dataclass(slots=True)
class FactsReport:
    planted: Counter[tuple[str, str]] = field(default_factory=Counter)  # (kind, where) -> facts
    ours: Counter[tuple[str, str]] = field(default_factory=Counter)
    plain: Counter[tuple[str, str]] = field(default_factory=Counter)
    results: int = 0  # tool results truncated
    raw_tokens: int = 0  # their tokens before
    our_tokens: int = 0  # as our notes
    plain_tokens: int = 0  # as plain previews
    lines: list[int] = field(default_factory=list)

    def share(
        self, kept: Counter[tuple[str, str]], kind: str | None = None, where: str | None = None
    ) -> float:
        keys = [
            k for k in self.planted if (kind is None or k[0] == kind) and (where is None or k[1] == where)
        ]
        planted = sum(self.planted[k] for k in keys)
        return sum(kept[k] for k in keys) / planted if planted else 1.0

    def count(
        self, counter: Counter[tuple[str, str]], kind: str | None = None, where: str | None = None
    ) -> int:
        return sum(
            v
            for k, v in counter.items()
            if (kind is None or k[0] == kind) and (where is None or k[1] == where)
        )


def level_one_only(messages: list[Message], policy: Policy | None = None) -> tuple[CompactionResult, int]:
    """Compact with (within 0.5% of) the smallest line at which nothing is dropped, target = line."""
    policy = policy or Policy()

    def run(limit: int) -> CompactionResult:
        return compact(messages, Budget(limit=limit, target=limit), COUNT, policy)

    total = sum(COUNT(m) for m in messages)
    low, high = 0, total  # at `high` nothing is dropped
    while high - low > total // 200:
        mid = (low + high) // 2
        if run(mid).dropped:
            low = mid + 1
        else:
            high = mid
    return run(high), high


def measure_facts(conversations: Sequence[sim.Conversation], policy: Policy | None = None) -> FactsReport:
    report = FactsReport()
    for conversation in conversations:
        messages = conversation.messages
        result, line = level_one_only(messages, policy)
        report.lines.append(line)
        truncated = set(result.truncated)
        plain = [
            {**m, "content": cache_replay.plain_note(m["content"])} if i in truncated else m
            for i, m in enumerate(messages)
        ]
        ours_text = "\x00".join(str(m.get("content")) for m in result.messages)
        plain_text = "\x00".join(str(m.get("content")) for m in plain)
        for fact in conversation.facts:
            if fact.message not in truncated:
                continue
            key = (fact.kind, fact.where)
            report.planted[key] += 1
            report.ours[key] += fact.value in ours_text
            report.plain[key] += fact.value in plain_text
        report.results += len(truncated)
        report.raw_tokens += sum(COUNT(messages[i]) for i in truncated)
        report.our_tokens += sum(COUNT(result.messages[i]) for i in truncated)
        report.plain_tokens += sum(COUNT(plain[i]) for i in truncated)
    return report
