"""Audit mode: a compacted route's request forwarded untouched, with what compaction would have cut
and saved in the answer's headers (as Portkey's Headroom guardrail offers `mode: audit`), so a team
can measure on its real traffic before it trusts the proxy to change anything.

`COMPACT_AUDIT=true` audits every request; `x-compaction-audit: true` one request. The plan is made
as usual (and counted in the metrics as what it would have done); what goes upstream is the request
as it came (through a bridge, translated as it came), never retried harder, and the answer carries
`x-compaction-audit: true` and the `x-compaction-audit-*` figures of the plan it did not apply.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import httpx
from starlette.requests import Request
from starlette.responses import Response

from proxy.engine.plan import ChatPlan
from proxy.formats import Conversation
from proxy.gateway.contract import AUDIT_HEADER
from proxy.settings import Settings
from proxy.ways.base import Answer, Body, Headers, Way


def audits(settings: Settings, request: Request) -> bool:
    """Whether this request is audited: the setting, or its own header."""
    if settings.audit:
        return True
    return any(k.lower() == AUDIT_HEADER and v.strip().lower() == b"true" for k, v in request.headers.raw)


def audit_headers(plan: ChatPlan) -> dict[str, str]:
    """What `plan` would have done, as the answer's headers."""
    result = plan.result
    return {
        "x-compaction-audit": "true",
        "x-compaction-audit-tokens-before": str(result.tokens_before),
        "x-compaction-audit-tokens-after": str(result.tokens_after),
        "x-compaction-audit-truncated": str(len(result.truncated)),
        "x-compaction-audit-capped": str(len(result.capped)),
        "x-compaction-audit-dropped": str(len(result.dropped)),
    }


def unchanged(plan: ChatPlan, conversation: Conversation) -> ChatPlan:
    """`plan` doing nothing: the conversation's messages as they came, the reply limit as asked."""
    result = plan.result
    kept = replace(
        result,
        messages=list(conversation.request["messages"]),
        tokens_after=result.tokens_before,
        truncated=(),
        dropped=(),
        capped=(),
        markers=(),
        overflow=False,
        over_window=False,
        oversized=None,
    )
    return replace(plan, result=kept, max_tokens=None, thinking_budget=None, summarized=0)


@dataclass(frozen=True, slots=True)
class Audited:
    """A way that sends the request as it came over `inner` and says what `would` have done."""

    inner: Way
    would: ChatPlan
    retries: bool = False  # an overflow the upstream reports is the client's to see

    @property
    def path(self) -> str:
        return self.inner.path

    @property
    def from_root(self) -> bool:
        return self.inner.from_root

    @property
    def window(self) -> int | None:
        return self.inner.window

    def outgoing(self, headers: Headers, query: bytes) -> tuple[Headers, bytes]:
        return self.inner.outgoing(headers, query)

    def content(self, raw: bytes, body: Body, conversation: Conversation, plan: ChatPlan) -> bytes:
        return self.inner.content(raw, body, conversation, plan)

    async def relay(self, response: httpx.Response, answer: Answer) -> Response:
        return await self.inner.relay(response, replace(answer, headers={**answer.headers, **self.headers}))

    @property
    def headers(self) -> dict[str, Any]:
        return audit_headers(self.would)


def audit(way: Way, plan: ChatPlan, conversation: Conversation) -> tuple[Way, ChatPlan]:
    """The way and plan of an audited request: as it came, with `plan`'s figures in the answer."""
    return Audited(way, plan), unchanged(plan, conversation)
