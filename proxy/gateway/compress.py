"""`POST /v1/compress`: Headroom's contract (`contract.py`) served by the proxy's own engine.

The call is planned as the dry run `/compact` plans a chat request (`proxy.server.dry_run.plan_for`:
the model's window from the settings, or from the upstream, or the `window` the caller gives), and
the decisions written back row by row (`rows.py`). Stubs cost a few tokens each, so what comes back
is counted again, and planned again for a smaller window until it is within the line (or the
caller's `target`): the answer fits, and the same input always gets the same bytes. A caller that
takes the list whole asks for the dropped messages merged into one marker a run, or removed
(`dropped`, `x-compaction-dropped`, or the path `/merge/v1/compress`): no stub a message, no floor.

`x-headroom-bypass: true` returns the messages untouched; `x-compaction-audit: true` (or
`COMPACT_AUDIT`) returns them untouched with what would have been cut under `audit`. Any failure
inside fails open: the messages as they came, `compression_skipped` and the reason. Every call is
counted in `/metrics` and recorded for the live page as format `compress`.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, replace
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from proxy.bodies.jsonbody import dump_json
from proxy.counting.tokens import RequestCounter
from proxy.engine.plan import ChatPlan
from proxy.errors import ProxyError
from proxy.formats import Conversation, FormatRoute
from proxy.formats.anthropic_thinking import unbound_thinking_dropped
from proxy.gateway.contract import (
    ANTHROPIC,
    AUDIT_HEADER,
    BYPASS_HEADER,
    DROPPED_HEADER,
    MERGE,
    REMOVE,
    STUB,
    CompressRequest,
    answer,
    contract_error,
    read_request,
)
from proxy.gateway.counters import GatewayCounters
from proxy.gateway.originals import Originals, scope_of
from proxy.gateway.removal import collapsed
from proxy.gateway.retrieve import credential
from proxy.gateway.rows import Written, sources_of, write_rows
from proxy.gateway.view import Decided, View, decided, with_stand_ins
from proxy.server.dry_run import plan_for
from proxy.server.intake import read_json_body
from proxy.server.pipeline import Pipeline

log = logging.getLogger("proxy.gateway")

FIT_ATTEMPTS = 5  # plans for a smaller window until the stubs fit too
WINDOW_STEP = 64  # a smaller window is a whole number of these: the same input, the same plans


@dataclass(frozen=True, slots=True)
class Fitted:
    """The plan whose rows fit, the rows, the caller's messages counted before and after, and the
    line they had to fit (the caller's window's, or its target)."""

    plan: ChatPlan
    written: Written
    made: Decided
    before: int
    after: int
    window: int = 0
    ceiling: int = 0
    fits: bool = True


class Compressor:
    """The `/v1/compress` handler, over the proxy's pipeline (its adapters, planner and records)."""

    def __init__(self, pipeline: Pipeline, originals: Originals | None, counters: GatewayCounters) -> None:
        self.pipeline, self.originals, self.counters = pipeline, originals, counters
        self.settings = pipeline.parts.settings

    async def __call__(self, request: Request, dropped: str | None = None) -> Response:
        """The answer to one call; `dropped`: what its path asks for the dropped messages."""
        try:
            raw = await read_json_body(request, self.settings.max_body_bytes)
            parsed = await self.pipeline.parts.bodies.parse(raw)  # a large one off the loop
            call = read_request(parsed, _header(request, DROPPED_HEADER) or dropped)
        except ProxyError as exc:
            self.counters.compress.labels("invalid").inc()
            return _error(exc)
        if _flag(request, BYPASS_HEADER):
            self.counters.compress.labels("bypass").inc()
            return _json(answer(call.messages, 0, 0))
        try:
            return _json(await self.compress(request, call, raw))
        except ProxyError as exc:  # messages the engine cannot read: the caller's to fix
            self.counters.compress.labels("invalid").inc()
            return _error(exc)
        except Exception as exc:  # fail open: the caller forwards what it sent
            log.exception("/v1/compress failed; answering with the messages as they came")
            self.counters.compress.labels("failed_open").inc()
            return _json(answer(call.messages, 0, 0, skipped=f"internal_error: {type(exc).__name__}"))

    async def compress(self, request: Request, call: CompressRequest, raw: bytes = b"") -> dict[str, Any]:
        """The answer to `call` (its body's bytes: `raw`, which say whether it is large)."""
        route = self.pipeline.parts.routes.for_format(call.format)
        assert route is not None  # `chat` and `messages` are the proxy's own formats
        body, _, conversation = self.pipeline.adapt(route.format, call.body(), b"", {})
        if conversation is None:  # the server manages this context itself (Anthropic's own API)
            self.counters.compress.labels("unchanged").inc()
            return answer(call.messages, 0, 0, skipped="server_manages_context")
        view = with_stand_ins(conversation)
        auditing = self.settings.audit or _flag(request, AUDIT_HEADER)
        keep = not auditing and self._keeps
        fitted = await self.fit(request, route, body, view, call, keep=keep, raw=raw)
        plan, written = fitted.plan, fitted.written
        self.pipeline.parts.metrics.record_compaction(plan.result)
        self.pipeline.parts.records.add(request.scope["headers"], "compress", view.conversation, plan)
        if auditing:
            self.counters.compress.labels("audit").inc()
            return {**answer(call.messages, fitted.before, fitted.before), "audit": _audit(fitted)}
        if written.originals and self.originals is not None:
            await self.originals.keep(scope_of(credential(request)), written.originals.items())
        outcome = "compressed" if plan.result.changed else "unchanged"
        self.counters.compress.labels(outcome).inc()
        out = answer(
            written.messages,
            fitted.before,
            fitted.after,
            transforms=_transforms(fitted),
            hashes=list(written.originals),
            skipped="over_window" if plan.result.over_window else None,
        )
        out.update(window=fitted.window, limit=fitted.ceiling, fits=fitted.fits)
        if call.dropped != STUB:
            out["dropped"] = call.dropped
        return out

    @property
    def _keeps(self) -> bool:
        return self.originals is not None

    async def fit(
        self,
        request: Request,
        route: FormatRoute,
        body: dict[str, Any],
        view: View,
        call: CompressRequest,
        *,
        keep: bool,
        raw: bytes = b"",
    ) -> Fitted:
        """The plan whose rows, stubs and notes included, fit its line (and the caller's target):
        planned again for a smaller window while they do not."""
        model = self.pipeline.parts.planner.configured(call.model)
        window = call.window
        if call.target and not window:
            window = math.ceil(call.target / model.threshold)
        best: Fitted | None = None  # the attempt closest to the line, if none is within it
        asked, ceiling, least = 0, 0, 0
        for _ in range(FIT_ATTEMPTS):
            conversation = replace(view.conversation, window=window) if window else view.conversation
            plan = await plan_for(self.pipeline, request, route, body, conversation)
            if not ceiling:  # the line of the window asked for stays the line
                asked, ceiling = plan.window.window, min(plan.budget.limit, call.target or plan.budget.limit)
            if best is not None and plan.result.over_window:  # nothing smaller can be made
                break
            # Writing and counting the rows of a large body in a worker thread, as its plan is.
            fitted = await self.pipeline.parts.bodies.run(raw, self._written, plan, view, call, keep)
            over = fitted.after + self._stand_ins(plan, view) - ceiling
            fitted = replace(fitted, window=asked, ceiling=ceiling, fits=over <= 0)
            if best is None or over < least:
                best, least = fitted, over
            if over <= 0 or plan.result.over_window:
                break
            step = math.ceil(1.5 * over / model.threshold) + WINDOW_STEP  # more stubs come with it
            window = max(WINDOW_STEP, (plan.window.window - step) // WINDOW_STEP * WINDOW_STEP)
        assert best is not None
        return best

    def _written(self, plan: ChatPlan, view: View, call: CompressRequest, keep: bool) -> Fitted:
        made = decided(view, plan.result)
        source = view.conversation if not view.stand_ins else _without_stand_ins(view)
        written = write_rows(
            call.format, call.messages, source, made, keep=keep, keep_runs=call.dropped != REMOVE
        )
        if call.dropped != STUB:  # the caller takes the list whole: the dropped messages go
            markers = written.markers if call.dropped == MERGE else None
            rows = collapsed(written.messages, sources_of(source, call.messages), made, markers)
            written = replace(written, messages=_thinking_kept_bound(call, rows))
        counter = self.pipeline.parts.planner.counter_for(plan)
        route = self.pipeline.parts.routes.for_format(call.format)
        assert route is not None
        after = route.format.read({**call.body(), "messages": written.messages}, {})
        assert after is not None
        before = _count(counter, source.request)
        fitted = Fitted(plan, written, made, before, _count(counter, after.request))
        result = replace(plan.result, tokens_before=before, tokens_after=fitted.after)
        return replace(fitted, plan=replace(plan, result=result))

    def _stand_ins(self, plan: ChatPlan, view: View) -> int:
        counter = self.pipeline.parts.planner.counter_for(plan)
        messages = view.conversation.request["messages"]
        return sum(counter.message(messages[k]) for k, o in enumerate(view.origin) if o is None)


def _without_stand_ins(view: View) -> Conversation:
    """The adapter's own conversation back (its messages and sources, without the stand-ins)."""
    keep = [k for k, o in enumerate(view.origin) if o is not None]
    conversation = view.conversation
    request = {**conversation.request, "messages": [conversation.request["messages"][k] for k in keep]}
    sources = tuple(conversation.sources[k] for k in keep) if conversation.sources else ()
    return replace(conversation, request=request, sources=sources)


def _count(counter: RequestCounter, request: dict[str, Any]) -> int:
    return counter.fixed(request) + sum(counter.message(m) for m in request["messages"])


def _transforms(fitted: Fitted) -> list[str]:
    """What was done, in the caller's messages (stand-ins not counted): results noted or capped,
    messages dropped (stubbed)."""
    made = fitted.made
    named = (("tool_result_notes", len(made.notes)), ("dropped_messages", len(made.dropped)))
    return [f"{name}:{count}" for name, count in named if count]


def _audit(fitted: Fitted) -> dict[str, Any]:
    return {
        "tokens_after": fitted.after,
        "tokens_saved": max(0, fitted.before - fitted.after),
        "noted": len(fitted.made.notes),
        "dropped": len(fitted.made.dropped),
        "window": fitted.window,
        "fits": fitted.fits,
    }


def _thinking_kept_bound(call: CompressRequest, rows: list[Any]) -> list[Any]:
    """Anthropic's thinking blocks that the removal unbinds taken out, as the proxy's own route does
    (a model that binds them refuses them after an earlier message changed)."""
    if call.format != ANTHROPIC:
        return rows
    before = {"model": call.model, "messages": call.messages}
    after: list[Any] = unbound_thinking_dropped(before, {**before, "messages": rows})["messages"]
    return after


def _header(request: Request, name: bytes) -> str | None:
    value = next((v for k, v in request.headers.raw if k.lower() == name), None)
    return value.decode("latin-1").strip().lower() if value is not None else None


def _flag(request: Request, name: bytes) -> bool:
    return _header(request, name) == "true"


def _json(data: dict[str, Any]) -> Response:
    return Response(dump_json(data), media_type="application/json")


def _error(exc: ProxyError) -> Response:
    return exc.to_response(shape=contract_error)
