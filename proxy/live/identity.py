"""Which conversation a request belongs to.

The agent CLIs say it themselves, in a header that stays the same for a whole session (read in their
bundles, and seen through the proxy from the pinned CLIs of `tests/clis`): Claude Code 2.1.332 sends
`X-Claude-Code-Session-Id`; Codex 0.171 `session-id` (earlier ones `session_id`, its thread id:
`codex-rs/codex-api/src/requests/headers.rs`); opencode 1.18 `x-session-affinity` and `X-Session-Id`
(and `x-opencode-session` to its own provider). Without one, a conversation is what compaction never
changes: the model, the leading system messages and the first user request, hashed. With
`COMPACT_API_KEYS`, the key that sent it is part of its identity too (`owners.py`): two keys never
share a conversation.

Names a client chooses (a model's, a tool's) are kept as `short_name` has them: a 4 MB model name
costs the page what a short one does, wherever it keeps or sends it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import orjson

# In order of preference; names as ASGI gives them (lowercase).
SESSION_HEADERS = (
    b"x-claude-code-session-id",
    b"session-id",
    b"session_id",
    b"x-session-affinity",
    b"x-session-id",
    b"x-opencode-session",
    b"conversation_id",
)
_NAMES = frozenset(SESSION_HEADERS)
LEADING_ROLES = frozenset({"system", "developer"})
MAX_ID_CHARS = 128
MAX_NAME_CHARS = 128
NAME_DIGEST_CHARS = 12


def session_header(headers: Iterable[tuple[bytes, bytes]]) -> tuple[str, str] | None:
    """The session header the client sent, as (name, value), the preferred one first."""
    found: dict[bytes, bytes] = {}
    for name, value in headers:
        # ASGI gives names lowercase, so the first test is the one that counts.
        if (name in _NAMES or name.lower() in _NAMES) and value.strip():
            found.setdefault(name.lower(), value.strip())
    if not found:
        return None
    for name in SESSION_HEADERS:
        if name in found:
            text = found[name][:MAX_ID_CHARS].decode("latin-1")
            return name.decode(), text if text.isprintable() else text.encode("unicode_escape").decode()
    return None


def conversation_key(headers: Iterable[tuple[bytes, bytes]], request: Mapping[str, Any]) -> tuple[str, str]:
    """The conversation's key and where it came from (a header's name, or `hash`)."""
    session = session_header(headers)
    if session is not None:
        name, value = session
        return _digest(name.encode(), value.encode()), name
    messages = request.get("messages")
    return _digest(b"model", str(request.get("model") or "").encode(), *_opening(messages)), "hash"


def owned_key(owner: str, key: str) -> str:
    """A conversation's key when keys tell clients apart: the sending key's own."""
    return _digest(b"owner", owner.encode(), key.encode())


def short_name(name: str) -> str:
    """A name as the page keeps it: whole up to `MAX_NAME_CHARS`, else its start and a digest of the
    whole (long names stay apart, and readable by their start)."""
    if len(name) <= MAX_NAME_CHARS:
        return name
    digest = hashlib.blake2b(name.encode("utf-8", "surrogatepass"), digest_size=NAME_DIGEST_CHARS // 2)
    return name[: MAX_NAME_CHARS - NAME_DIGEST_CHARS - 1] + "…" + digest.hexdigest()


def _opening(messages: object) -> list[bytes]:
    """The leading system messages and the first user request, as bytes."""
    if not isinstance(messages, Sequence):
        return []
    out: list[bytes] = []
    for message in messages:
        if not isinstance(message, Mapping):
            continue
        role = message.get("role")
        if role in LEADING_ROLES or role == "user":
            out.append(_content_bytes(message.get("content")))
        if role not in LEADING_ROLES:
            break
    return out


def _content_bytes(content: object) -> bytes:
    if isinstance(content, str):
        return content.encode("utf-8", "surrogatepass")
    try:
        return orjson.dumps(content, option=orjson.OPT_SORT_KEYS, default=repr)
    except TypeError:  # nested too deep to write (the request is refused elsewhere): its kind stands
        return type(content).__name__.encode()


def _digest(*parts: bytes) -> str:
    return hashlib.blake2b(b"\x00".join(parts), digest_size=8).hexdigest()
