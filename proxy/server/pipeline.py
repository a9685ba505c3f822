"""A request's way through the proxy, top to bottom: read, its route's first step, adapt, plan,
summarise, record, check the overflow, send, retry, relay.

`Pipeline` runs over the parts wired once per app (`parts.py`: the upstream, the planner, the
bodies, the bridges, the summariser, the metrics, the settings, the headers sent upstream); its
methods are the steps, in the order a request takes them, each handed the request in flight
(`flight.py`: built when the request is read, filled in step by step). `compact_and_forward` is the
whole compacted route; `forward_as_is` every other route. The dry run `/compact` takes the first
steps (`dry_run.py`).

What differs from one format to another is asked of the format object (`proxy.formats`), never of
its name. A step only some formats take is registered by them: the step before all others (Codex's
remote compaction, `remote_compaction.py`), a bridge to a server of another API
(`proxy.ways.choice`). Where a request goes and how its answer comes back is its way
(`proxy.ways.base`): the route's own (`Direct`), a bridge's, or as it came (`Passing`); the steps send
and relay over it without knowing which it is. How large a body is decides only where its work runs
(`proxy.bodies.work`: off the event loop when large), never which steps it takes.
"""

from __future__ import annotations

import functools
import logging
import time
from dataclasses import replace
from typing import Any

import httpx
from starlette.requests import Request
from starlette.responses import Response

from proxy.bodies.jsonbody import dump_json
from proxy.counting.calibration import Truncation
from proxy.engine.plan import ChatPlan
from proxy.engine.refusal import refusal_for
from proxy.errors import ProxyError
from proxy.formats import Conversation, FormatRoute, WireFormat
from proxy.gateway.audit import audit, audits
from proxy.server.flight import Flight
from proxy.server.intake import (
    check_messages,
    check_path,
    read_body,
    read_json_body,
    until_disconnect,
)
from proxy.server.parts import Parts
from proxy.server.remote_compaction import RemoteCompaction
from proxy.upstream.overflow import OVERFLOW_STATUSES, parse_overflow
from proxy.upstream.streaming import read_raw
from proxy.ways.base import Answer, read_already
from proxy.ways.direct import Direct
from proxy.ways.passing import Passing

log = logging.getLogger("proxy")

LOGGED_BODY_BYTES = 64 * 1024


class Pipeline:
    """A request's steps, over the proxy's parts."""

    def __init__(self, parts: Parts) -> None:
        self.parts = parts
        remote = RemoteCompaction.from_settings(parts.settings)
        # The step a format's requests take before all others, registered by format (when it is on).
        self.first_steps = dict.fromkeys(remote.formats, remote) if remote.active else {}
        self._upstream_server = {
            "upstream_host": parts.settings.upstream_host,
            "upstream_kind": parts.settings.upstream_kind,
        }

    # ------------------------------------------------------------------ the compacted route

    async def compact_and_forward(self, request: Request, route: FormatRoute) -> Response:
        """Read the request into the neutral conversation, compact it, forward it, relay the answer."""
        flight = await self.read(request, route)
        if (answered := await self.first_step(flight)) is not None:
            return answered
        await self.read_conversation(flight)
        if flight.conversation is None:  # the server keeps or compacts this history itself
            return await until_disconnect(request, self.forward(flight))
        plan = await self.plan(flight)
        if audits(self.parts.settings, request):  # sent as it came, what it would cut reported
            flight.way, plan = audit(flight.way, plan, flight.conversation)
        flight.plan = await self.summarise(flight, plan)
        self.record(flight)
        self.check_overflow(flight)
        self.log_plan(flight)
        response = await until_disconnect(request, self.send_compacted(flight))
        self.release(flight)
        return response

    async def read(self, request: Request, route: FormatRoute) -> Flight:
        """The request in flight: its bytes (decoded, under the limit) and its JSON body (a large one
        parsed off the loop, so other clients are served meanwhile)."""
        flight = Flight.read(
            request, route, await read_json_body(request, self.parts.settings.max_body_bytes)
        )
        flight.body = await self.parts.bodies.parse(flight.raw)
        return flight

    async def first_step(self, flight: Flight) -> Response | None:
        """The step its format takes before all others, if any (Codex's remote compaction on the
        Responses route): it may rewrite the body, or answer the request in the server's place."""
        step = self.first_steps.get(flight.route.format)
        return await step.take(flight, self.parts, self.adapt) if step is not None else None

    async def read_conversation(self, flight: Flight) -> None:
        """The flight's body adapted (`adapt`: a large one read off the loop), and when the proxy
        compacts it, its route's own way upstream: what its answer reports of the edits the proxy
        applied in the server's place, if any."""
        original, wire, params = flight.body, flight.route.format, flight.request.path_params
        assert original is not None
        body, flight.raw, conversation = await self.parts.bodies.run(
            flight.raw, self.adapt, wire, original, flight.raw, params
        )
        flight.body, flight.conversation = body, conversation
        if conversation is not None:
            way, report = flight.way, wire.context_report(original, body)
            flight.way = Direct(wire, way.path, way.from_root, streamed=wire.streamed(body), report=report)

    def adapt(
        self, wire: WireFormat, body: dict[str, Any], raw: bytes, params: dict[str, str]
    ) -> tuple[dict[str, Any], bytes, Conversation | None]:
        """The body (with the context edits the proxy applies itself), its bytes and its neutral
        conversation; no conversation when the server keeps or compacts this history itself."""
        if wire.server_manages_context(body, **self._upstream_server):
            return body, raw, None
        if (edited := wire.context_edits(body)) is not body:
            body, raw = edited, dump_json(edited)
        conversation = wire.read(body, params)
        if conversation is not None:
            check_messages(conversation.request, self.parts.settings.max_messages)
        return body, raw, conversation

    async def plan(self, flight: Flight) -> ChatPlan:
        """The way upstream (a bridge to a server of another API, or the route's own: chosen once,
        here), and the engine's plan for the window the request will get there."""
        assert flight.body is not None and flight.conversation is not None
        parts, conversation = self.parts, flight.conversation
        credentials = parts.credentials.credentials(flight.request)
        flight.way = await parts.bridges.choose(
            flight.route, flight.body, conversation, credentials, flight.way
        )
        window = conversation.window or flight.way.window
        flight.plan = await parts.planner.plan(conversation.request, credentials, window_tokens=window)
        return flight.plan

    async def summarise(self, flight: Flight, plan: ChatPlan) -> ChatPlan:
        """Level 3: the dropped runs of `plan` replaced by summaries, when summaries are on."""
        summarizer = self.parts.summarizer
        if summarizer is None or not plan.result.dropped:
            return plan
        assert flight.conversation is not None
        auth, counter = (
            self.parts.credentials.for_summary(flight.request),
            self.parts.planner.counter_for(plan),
        )
        messages = flight.conversation.request["messages"]
        done = await summarizer.apply(plan, messages, counter, auth)
        if done.summarized:
            self.parts.metrics.summaries.labels("written").inc(done.summarized)
        return done

    def record(self, flight: Flight) -> None:
        """What the live page shows of it (`proxy.live`)."""
        assert flight.conversation is not None and flight.plan is not None
        headers, label = flight.request.scope["headers"], flight.route.format.name
        flight.record = self.parts.records.add(headers, label, flight.conversation, flight.plan)

    def check_overflow(self, flight: Flight) -> None:
        """Count the compaction; refuse a request still over its limit when the policy (or the
        window itself) says so, in the client's protocol's words."""
        plan, body, conversation, wire = flight.plan, flight.body, flight.conversation, flight.route.format
        assert plan is not None and body is not None and conversation is not None
        self.parts.metrics.record_compaction(plan.result)
        if not plan.result.overflow:
            return
        overflow = self.parts.settings.overflow
        rejected = overflow == "reject" or plan.result.over_window  # never over the window
        self.parts.metrics.overflows.labels("reject" if rejected else overflow).inc()
        if rejected:
            refusal = refusal_for(
                replace(plan, reply_field=wire.reply_field or plan.reply_field),
                functools.partial(wire.client_field, body, conversation),
            )
            raise wire.overflow_error(refusal, streamed=wire.streamed(body))

    def log_plan(self, flight: Flight) -> None:
        plan = flight.plan
        assert plan is not None
        if plan.result.changed:
            log.info(plan.summary())
        if self.parts.settings.log_bodies:
            log.info("request body: %s", flight.raw[:LOGGED_BODY_BYTES].decode("utf-8", "replace"))
            if plan.result.changed:
                compacted = dump_json(plan.result.messages)[:LOGGED_BODY_BYTES]
                log.info("compacted messages: %s", compacted.decode("utf-8", "replace"))

    async def send_compacted(self, flight: Flight) -> Response:
        """Forward a planned request; on an overflow the upstream reports, retry once, harder."""
        response = await self.send(flight)
        if flight.way.retries and response.status_code in OVERFLOW_STATUSES:
            response = await self.retry(flight, response)
        return await self.relay(flight, response)

    async def retry(self, flight: Flight, response: httpx.Response) -> httpx.Response:
        """After an overflow the upstream reported: the upstream's answer to the harder plan, or its
        first answer as it came (read already) when there is nothing harder to try."""
        plan, conversation = flight.plan, flight.conversation
        assert plan is not None and conversation is not None
        error = await read_raw(response)
        overflow = parse_overflow(response.status_code, error)
        if overflow is None and (again := self.repaired(flight, response.status_code, error)) is not None:
            return await self.send(again)
        harder = self.parts.planner.harder(conversation.request, plan, overflow) if overflow else None
        if harder is None:
            if overflow:
                self.parts.metrics.retries.labels("not_possible").inc()
            return read_already(response, error)
        log.info(
            "The upstream reported an overflow (%s); retrying once, compacted harder. %s",
            overflow,
            harder.summary(),
        )
        self.parts.metrics.retries.labels("retried").inc()
        flight.plan = await self.summarise(flight, harder)
        self.parts.records.retried(flight.record, overflow, flight.plan, conversation)
        return await self.send(flight)

    def repaired(self, flight: Flight, status: int, error: bytes) -> Flight | None:
        """`flight` set to go once more as its format repairs it after a refusal that says how
        (`resend_after`: Anthropic's thinking block bound to another conversation), if it does."""
        if flight.resend is not None:
            return None
        again = flight.route.format.resend_after(flight.content(), status, error)
        if again is not None:
            log.info("The upstream refused the request (%s); sending it once more, repaired.", status)
            flight.resend = again
        return None if again is None else flight

    def release(self, flight: Flight) -> None:
        """Once its answer is on its way: a large body's million objects freed off the loop, a few at
        a time (the flight is the last to hold them)."""
        conversation, plan = flight.conversation, flight.plan
        assert conversation is not None and plan is not None
        big = [flight.body, conversation.request, conversation.sources, plan.result.messages]
        self.parts.bodies.release(flight.raw, big)

    # ------------------------------------------------------------------ every route's last steps

    async def send(self, flight: Flight) -> httpx.Response:
        """Send over the flight's way (its path, query and headers); the response comes back with
        its body unread."""
        parts, way = self.parts, flight.way
        check_path(way.path)
        headers, query = flight.outgoing(parts.credentials)
        url = parts.upstream.url(way.path, query, from_root=way.from_root)
        content = await parts.bodies.run(flight.raw, flight.content)  # a large one written off the loop
        started = time.perf_counter()
        try:
            response = await parts.upstream.open(flight.request.method, url, headers, content)
        except ProxyError as exc:
            parts.metrics.upstream_errors.labels(exc.code or "error").inc()
            raise
        parts.metrics.upstream_latency.labels(flight.label).observe(time.perf_counter() - started)
        if response.status_code >= 500:
            parts.metrics.upstream_errors.labels("status_5xx").inc()
        return response

    async def relay(self, flight: Flight, response: httpx.Response) -> Response:
        """The upstream's answer for the client, made by the flight's way: what the answer reports
        of the prompt the upstream read goes to the calibration and the live page."""
        plan, record, planner, records = flight.plan, flight.record, self.parts.planner, self.parts.records

        def learn(reported: int | None, tail: bytes) -> Truncation | None:
            assert plan is not None  # only a planned request's way learns
            truncation = planner.read_report(plan, reported)
            records.answered(record, reported, tail, truncation)
            return truncation

        headers = plan.headers() if plan is not None else {}
        answer = Answer(headers, learn, self.parts.metrics, flight.route.format.stream_error_event)
        return await flight.way.relay(response, answer)

    async def forward(self, flight: Flight) -> Response:
        """A request the proxy leaves alone, sent as it came."""
        return await self.relay(flight, await self.send(flight))

    async def forward_as_is(self, request: Request, path: str, *, from_root: bool) -> Response:
        """Any other route of the upstream's: the body read under the limit and sent unchanged."""
        content = await read_body(request, self.parts.settings.max_body_bytes)
        route = self.parts.routes.for_path(request.url.path)  # the format its path speaks
        flight = Flight(request, route, Passing(path, from_root), content, compacted=False)
        return await until_disconnect(request, self.forward(flight))
