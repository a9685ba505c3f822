"""The wells drawn for the pages watching: each request's well (`well.py`) built in a worker thread
after the request has gone on, so a page watching never holds the event loop (a request of 30 MB of
text took it for 0.5 s). At most `WELLS_AT_ONCE` are under way: past that, under a flood, a request
has no well (its record still shows), and no more requests wait in memory for theirs."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from proxy.counting.tokens import RequestCounter
from proxy.engine.plan import ChatPlan
from proxy.live.entries import ConversationLog
from proxy.live.well import build_well

logger = logging.getLogger("proxy")

WELLS_AT_ONCE = 8  # wells being built (each holds its request until it is done)

Well = dict[str, Any]


class Wells:
    """The wells under way, built with the counter of each request's plan."""

    def __init__(self, counter_for: Callable[[ChatPlan], RequestCounter], content: bool) -> None:
        self.counter_for = counter_for
        self.content = content  # with the messages' previews
        self.under_way: set[asyncio.Task[None]] = set()

    def draw(
        self,
        log: ConversationLog,
        seq: int,
        request: dict[str, Any],
        plan: ChatPlan,
        drawn: Callable[[Well], None],
    ) -> None:
        """Build the well of `log`'s latest request (numbered `seq`) off the loop, then hand it to
        `drawn`; nothing when `WELLS_AT_ONCE` are under way already."""
        if len(self.under_way) >= WELLS_AT_ONCE:
            return
        decided, previous = log.decided, log.previous
        assert decided is not None
        args = (request, plan, self.counter_for(plan), decided, previous, self.content)

        async def build() -> None:
            try:
                well = await asyncio.to_thread(build_well, *args)
            except Exception:  # the page's drawing must never disturb the proxy: logged, left out
                logger.exception("the live page could not draw request %d", seq)
                return
            drawn(well)

        task = asyncio.get_running_loop().create_task(build())
        self.under_way.add(task)
        task.add_done_callback(self.under_way.discard)
