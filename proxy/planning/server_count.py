"""Counting a request with the upstream's own tokenizer: vLLM's `/tokenize` with the messages, or
llama.cpp's `/apply-template` then `/tokenize` (`proxy.upstream.probes.UpstreamTokenCounter`), asked
by default wherever a request is not proven far under its line. A server without one is asked again
only every `COMPACT_WINDOW_REFRESH` seconds.

The server counts a whole request; compaction needs each message's share. A local counter (the
model's vocabulary, else the heaviest of the four) spreads it: scaled by the server's count over its
own, on the calibration's grid of 5% steps, so that the next turn of the chat, counted again, most
often gets the same factor and every earlier cut stays where it was. What compaction makes is
counted by the server once more, and planned again with the factor that count shows where it is over
the line; the reply limit is set by the server's count of what is sent. Nothing here depends on an
earlier request.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace

from proxy.counting.calibration import quantize
from proxy.counting.modes import Counting
from proxy.engine.plan import Body, ChatPlan
from proxy.planning.drafts import Draft, with_reply_limit
from proxy.settings import ModelWindow
from proxy.upstream.probes import UpstreamTokenCounter

Planned = Callable[[Draft, float, float | None], Awaitable[ChatPlan]]
Headers = Sequence[tuple[bytes, bytes]]

RECOUNTS = 2  # plans made again with the factor the server's count of their output shows
# Before refusing what the server's factor puts over the window, a lighter one is tried (the part
# never cut may be lighter text than the rest: at most the local count itself), and its output counted
# by the server: that count's own factor is the part's.
LENIENT = 0.7


class ServerCount:
    """The upstream's own counts of requests, and plans made by them."""

    def __init__(
        self,
        counter: UpstreamTokenCounter | None,
        planned: Planned,
        clamps: Callable[[ModelWindow], bool],
        *,
        refresh: float,
    ) -> None:
        self.counter = counter
        self.planned = planned
        self.clamps = clamps
        self.refresh = refresh
        self._none_until = 0.0

    def may_count(self) -> bool:
        """Whether the upstream may have a `/tokenize` (not known to lack one)."""
        return self.counter is not None and time.monotonic() >= self._none_until

    async def count(self, body: Body, headers: Headers) -> int | None:
        """The upstream's count of a request, None where it has no `/tokenize` (remembered for
        `refresh` seconds, so a server without one is asked again only that often)."""
        if self.counter is None or time.monotonic() < self._none_until:
            return None
        counted = await self.counter.count(body, headers)
        if not counted:
            self._none_until = time.monotonic() + self.refresh
        return counted

    async def plan(self, draft: Draft, counted: int, headers: Headers) -> ChatPlan:
        """`draft` (its `spec` the local counter) planned by the server's count of it, `counted`."""
        local = await self.planned(draft, 1.0, 0.0)
        factor = quantize(counted / max(1, local.result.tokens_before))
        plan = await self.planned(draft, factor, 0.0)
        sent: int | None = counted
        for _ in range(RECOUNTS):
            if plan.result.over_window or not plan.result.changed:
                break
            sent = await self.count({**draft.body, "messages": plan.result.messages}, headers)
            if not sent or sent <= plan.budget.limit:
                break
            factor = quantize(factor * sent / max(1, plan.result.tokens_after))
            plan, sent = await self.planned(draft, factor, 0.0), None
        if plan.result.over_window:
            fitted = await self._fitted(draft, factor, headers)
            if fitted is not None:
                plan, sent = fitted
        if plan.result.changed and sent is None and not plan.result.over_window:
            sent = await self.count({**draft.body, "messages": plan.result.messages}, headers)
        plan = replace(plan, counted_by=Counting.UPSTREAM, scaled=draft.spec, sent_tokens=sent or None)
        if sent and self.clamps(plan.window):
            plan = with_reply_limit(plan, draft.body, sent)
        return plan

    async def _fitted(self, draft: Draft, factor: float, headers: Headers) -> tuple[ChatPlan, int] | None:
        """A plan the server's count fits in the window, though its factor for the whole request puts
        the part never cut over it; None if the server's count of the most compaction can do is over
        the window too (the request is refused by the server's own count)."""
        candidate = await self.planned(draft, min(factor * LENIENT, 1.0), 0.0)
        for _ in range(RECOUNTS):
            if candidate.result.over_window:
                return None
            sent = await self.count({**draft.body, "messages": candidate.result.messages}, headers)
            if not sent:
                return None
            if sent <= candidate.window.window:
                return candidate, sent
            ratio = quantize(candidate.factor * sent / max(1, candidate.result.tokens_after))
            candidate = await self.planned(draft, ratio, 0.0)
        return None
