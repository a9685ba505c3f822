"""`/compact`, the dry run: what the proxy would send for a request, without calling the upstream.

It takes the compacted route's first steps (`Pipeline.adapt`, `Pipeline.plan`) and answers with
their outcome, the compacted messages and a report (and the rewritten body on a route that asks for
it), where the route would go on to summarise and send.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from proxy.bodies.jsonbody import dump_json, parse_json_object
from proxy.engine.plan import ChatPlan
from proxy.errors import ProxyError
from proxy.formats import Conversation, FormatRoute
from proxy.server.flight import Flight
from proxy.server.intake import read_json_body
from proxy.server.pipeline import Pipeline

Handler = Callable[[Request], Awaitable[Response]]


def dry_run(pipeline: Pipeline) -> Handler:
    async def dry_run(request: Request) -> Response:
        """Compact a request without calling the upstream: the body of a chat request, or of another
        format named by a `format` field (`responses`, `messages`, `ollama`, `azure`)."""
        table = pipeline.parts.routes
        body = parse_json_object(await read_json_body(request, pipeline.parts.settings.max_body_bytes))
        named = body.get("format")
        if isinstance(named, str) and (route := table.for_format(named)) is not None:
            body = {k: v for k, v in body.items() if k != "format"}
            return await compact_report(pipeline, request, route, body, {})
        return await compact_report(pipeline, request, table.default, body, {})

    return dry_run


def dry_run_for(pipeline: Pipeline) -> Handler:
    async def dry_run_for(request: Request) -> Response:
        """The dry run for the format a compacted route speaks, e.g. `/compact/v1/messages`."""
        path = request.path_params["path"]
        matched = pipeline.parts.routes.match("/" + path)
        if matched is None:
            raise ProxyError(404, f"No compacted route /{path}.", code="not_found")
        body = parse_json_object(await read_json_body(request, pipeline.parts.settings.max_body_bytes))
        return await compact_report(pipeline, request, matched[0], body, matched[1])

    return dry_run_for


async def compact_report(
    pipeline: Pipeline, request: Request, route: FormatRoute, body: dict[str, Any], params: dict[str, str]
) -> Response:
    """What the proxy would send on `route`, without calling the upstream."""
    wire = route.format
    body, _, conversation = pipeline.adapt(wire, body, b"", params)
    if conversation is None:
        report: dict[str, Any] = {"messages": None, "report": {"compacted": False, "left_alone": True}}
        return Response(dump_json(report), media_type="application/json")
    plan = await plan_for(pipeline, request, route, body, conversation)
    report = {"messages": plan.result.messages, "report": plan.report()}
    if route.report_body:
        report["body"] = wire.write(body, conversation, plan) if plan.result.changed else body
    return Response(dump_json(report), media_type="application/json")


async def plan_for(
    pipeline: Pipeline, request: Request, route: FormatRoute, body: dict[str, Any], conversation: Conversation
) -> ChatPlan:
    """The plan the compacted route would make for `conversation` (read from `body`), without
    calling the upstream (the gateway's `/v1/compress` plans here too)."""
    flight = Flight.read(request, route, b"")
    flight.body, flight.conversation = body, conversation
    return await pipeline.plan(flight)
