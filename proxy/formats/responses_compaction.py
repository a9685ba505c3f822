"""Codex's remote compaction, answered by the proxy for a server that does not implement it.

Codex (0.171, built-in `openai` provider) compacts "remotely" once its own limit is reached: an
ordinary `POST /v1/responses` whose `input` ends with `{"type": "compaction_trigger"}`, and it needs
back exactly one output item of type `compaction` with its `encrypted_content`
(`codex-rs/core/src/compact_remote_v2.rs`, `collect_compaction_output`: every
`response.output_item.done` is counted, then `response.completed` with the response's id). Its next
requests send the user, developer and system messages it kept and that item in place of the rest.
Only OpenAI's own API makes such items; anything else answers a reply (or refuses the unknown item
type) and Codex stops.

In front of any other server the proxy answers the trigger itself: the history before it is compacted
by the proxy's own engine for a window half its size (notes, drops, user messages kept), and the item
stands for what Codex does not keep of it (everything but its user, developer and system messages),
sealed: `cp2.<payload>.<mac>`, the payload the items' JSON compressed with zlib, base64url, and the
mac an HMAC-SHA256 under the proxy's key (`COMPACT_COMPACTION_KEY`) of the payload and of a digest of
the credentials of the client that asked for it (its owner; the digest is in no item). A later
request carrying the item gets it expanded back into those items, in its place, before the server
sees it: stateless, so any replica with the same key can expand it. The content is readable (it
holds the client's own history) but cannot be forged nor carried by another client: an item whose
mac does not match, for this request's credentials, is refused (400), as is an item of the first
version (`cp1.`, bound to no client); one that is not the proxy's (OpenAI's) is forwarded as it came.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import time
import uuid
import zlib
from typing import Any

import orjson

from proxy.bodies.jsonbody import dump_json
from proxy.engine.plan import Body
from proxy.errors import ProxyError

TRIGGER = "compaction_trigger"
PREFIX = "cp2."
_TOO_LARGE = "This request's compaction items expand past the proxy's body limit (COMPACT_MAX_BODY_BYTES)."
RETIRED = ("cp1.",)  # the proxy's items of an earlier version: refused, never forwarded
KEPT_ROLES = frozenset({"user", "developer", "system"})  # what Codex keeps itself (is_retained_for_...)


def is_trigger(body: Body) -> bool:
    items = body.get("input")
    return isinstance(items, list) and bool(items) and _type(items[-1]) == TRIGGER


def history_of(body: Body) -> Body:
    """The trigger request as the request to compact: its history without the trigger."""
    items = body["input"]
    return {**body, "input": [i for i in items if _type(i) != TRIGGER]}


def left_to_the_item(original: list[Any], compacted: list[Any]) -> list[Any]:
    """What the item stands for: the compacted history without the messages Codex keeps itself
    (a marker the proxy wrote for a dropped run is not one of them, so it stays)."""
    kept = {orjson.dumps(i) for i in original if _type(i) in (None, "message") and _role(i) in KEPT_ROLES}
    return [
        i
        for i in compacted
        if not (_type(i) in (None, "message") and _role(i) in KEPT_ROLES and orjson.dumps(i) in kept)
    ]


def seal(items: list[Any], key: bytes, owner: bytes) -> str:
    """`items` sealed for the client whose credentials' digest is `owner`."""
    payload = base64.urlsafe_b64encode(zlib.compress(dump_json(items), 6)).rstrip(b"=")
    return PREFIX + payload.decode() + "." + _mac(payload, key, owner)


def unsealed_json(content: str, key: bytes, owner: bytes, budget: int) -> bytes:
    """The JSON array of the items a sealed `content` stands for (written by `seal`, so not read
    again here). `ProxyError`: 400 if its mac does not match (for `owner`, the digest of this
    request's credentials) or it does not unpack; 413 if its items are more than `budget` bytes."""
    payload, _, mac = content[len(PREFIX) :].rpartition(".")
    valid = content.startswith(PREFIX) and bool(payload)
    if not valid or not hmac.compare_digest(mac, _mac(payload.encode(), key, owner)):
        raise ProxyError(
            400,
            "A compaction item's content was not made by this proxy (its signature does not match): "
            "it cannot be expanded. Start a new session, or give every replica the same COMPACT_COMPACTION_KEY.",
            param="input",
            code="invalid_compaction_item",
        )
    try:
        inflate = zlib.decompressobj()
        packed = base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))
        raw = inflate.decompress(packed, budget + len(b"[]") + 1)
    except (ValueError, zlib.error):
        raw = b""
    if inflate.unconsumed_tail or len(raw) > budget + len(b"[]"):
        raise ProxyError(413, _TOO_LARGE, param="input", code="request_too_large")
    if not inflate.eof or raw[:1] != b"[" or raw[-1:] != b"]":
        raise ProxyError(400, "A compaction item's content does not unpack.", param="input")
    return raw


def carries_items(body: Body) -> bool:
    """Whether `body` carries one of the proxy's compaction items."""
    items = body.get("input")
    return isinstance(items, list) and any(_ours(i) for i in items)


def expanded_json(body: Body, key: bytes, owner: bytes, budget: int) -> bytes | None:
    """The JSON of `body` with each of the proxy's compaction items replaced by the items it stands
    for (sealed for `owner`), the items' own JSON spliced in, never parsed here (the caller parses the
    whole as any large body); None when it carries none. All items together unpack to `budget` bytes
    at most: past it, a 413 (many copies of one item once made a 5.8 KB request 3.6 MB upstream)."""
    if not carries_items(body):
        return None
    parts: list[bytes] = []
    for item in body["input"]:
        if not _ours(item):
            parts.append(dump_json(item))
            continue
        inner = unsealed_json(item["encrypted_content"], key, owner, budget)[1:-1]
        budget -= len(inner)
        if inner:
            parts.append(inner)
    mark = secrets.token_hex(16)
    head = dump_json({**body, "input": mark})
    return head.replace(b'"%s"' % mark.encode(), b"[" + b",".join(parts) + b"]", 1)


def compaction_answer(model: str, content: str, tokens_in: int, tokens_out: int, *, streamed: bool) -> bytes:
    """The Responses answer carrying the one `compaction` item: a `Response` object, or its stream
    (`response.created`, `response.in_progress`, `response.output_item.added` / `.done`,
    `response.completed`, as openai-python's `ResponseStreamEvent` has them)."""
    rid = "resp_" + uuid.uuid4().hex
    item = {"id": "cmp_" + uuid.uuid4().hex, "type": "compaction", "encrypted_content": content}
    usage = {
        "input_tokens": tokens_in,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": tokens_out,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": tokens_in + tokens_out,
    }
    base = {"id": rid, "object": "response", "created_at": int(time.time()), "model": model}
    done = {**base, "status": "completed", "output": [item], "usage": usage, "error": None}
    if not streamed:
        return orjson.dumps(done)
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": {**base, "status": "in_progress", "output": []}},
        {"type": "response.in_progress", "response": {**base, "status": "in_progress", "output": []}},
        {"type": "response.output_item.added", "output_index": 0, "item": item},
        {"type": "response.output_item.done", "output_index": 0, "item": item},
        {"type": "response.completed", "response": done},
    ]
    return b"".join(
        f"event: {event['type']}\ndata: ".encode() + orjson.dumps({**event, "sequence_number": n}) + b"\n\n"
        for n, event in enumerate(events)
    )


def _mac(payload: bytes, key: bytes, owner: bytes) -> str:
    digest = hmac.new(key, owner + b"." + payload, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def _ours(item: Any) -> bool:
    return (
        _type(item) == "compaction"
        and isinstance(content := item.get("encrypted_content"), str)
        and content.startswith((PREFIX, *RETIRED))
    )


def _type(item: Any) -> str | None:
    kind = item.get("type") if isinstance(item, dict) else None
    return kind if isinstance(kind, str) else None


def _role(item: Any) -> str | None:
    role = item.get("role") if isinstance(item, dict) else None
    return role if isinstance(role, str) else None
