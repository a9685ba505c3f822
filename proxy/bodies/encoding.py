"""Request bodies sent compressed (`Content-Encoding: gzip` or `deflate`), decoded for compaction.

Clients that compress large histories (some SDKs and gateways do) must not get "not valid JSON".
The compacting routes decode the body within the body limit (a small compressed body may expand to
gigabytes) and forward it decoded; an encoding the proxy cannot read is answered 415, saying so.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator

from proxy.errors import ProxyError

# zlib's wbits: gzip's header and trailer, zlib's, or (deflate as some clients send it) none.
_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


def decode_body(raw: bytes, content_encoding: str | None, limit: int) -> bytes:
    """`raw` decoded as its `Content-Encoding` says (codings applied in order, undone in reverse),
    refused with 413 past `limit` decoded bytes and with 415 for a coding the proxy cannot decode."""
    codings = [c.strip().lower() for c in (content_encoding or "").split(",") if c.strip()]
    for coding in reversed(codings):
        if coding == "identity":
            continue
        if coding not in _WBITS:
            raise ProxyError(
                415,
                f"The request body's Content-Encoding {coding!r} is not supported by the proxy: send it "
                "uncompressed, or compressed with gzip or deflate.",
                code="unsupported_content_encoding",
            )
        raw = _inflate(raw, coding, limit)
    return raw


def _inflate(data: bytes, coding: str, limit: int) -> bytes:
    wbits = _WBITS[coding]
    try:
        try:
            inflater = zlib.decompressobj(wbits)
            out = inflater.decompress(data, limit + 1)
        except zlib.error:
            if coding != "deflate":
                raise
            inflater = zlib.decompressobj(-zlib.MAX_WBITS)  # raw deflate, without zlib's header
            out = inflater.decompress(data, limit + 1)
        if len(out) > limit or inflater.unconsumed_tail:
            raise ProxyError(
                413,
                f"The request body is larger than the proxy's limit of {limit} bytes once decoded.",
                code="request_too_large",
            )
        if not inflater.eof:
            raise zlib.error("the compressed body ends early")
    except zlib.error as exc:
        raise ProxyError(
            400, f"The request body is not valid {coding} data: {exc}.", code="invalid_content_encoding"
        ) from None
    return out


class Inflater:
    """Incremental decoding of an upstream body's `Content-Encoding`, in pieces of at most `piece`
    bytes however much one compressed read expands to (a gzip bomb is a few KB that inflate to GBs),
    so whoever reads it can stop at its own bound. Only gzip and deflate (what the proxy's own
    requests accept); anything else raises `ValueError`."""

    def __init__(self, content_encoding: str | None, *, piece: int = 1 << 20) -> None:
        codings = [c.strip().lower() for c in (content_encoding or "").split(",") if c.strip()]
        codings = [c for c in codings if c != "identity"]
        if len(codings) > 1 or (codings and codings[0] not in _WBITS):
            raise ValueError(f"unsupported Content-Encoding {content_encoding!r}")
        self.coding = codings[0] if codings else None
        self.piece = piece
        self._inflater = zlib.decompressobj(_WBITS[self.coding]) if self.coding else None
        self._started = False

    def pieces(self, data: bytes) -> Iterator[bytes]:
        if self._inflater is None:
            yield data
            return
        try:
            out = self._inflater.decompress(data, self.piece)
        except zlib.error:
            if self.coding != "deflate" or self._started:
                raise ValueError("the upstream's compressed body is corrupt") from None
            self._inflater = zlib.decompressobj(-zlib.MAX_WBITS)  # raw deflate, without zlib's header
            out = self._inflater.decompress(data, self.piece)
        self._started = True
        while True:
            if out:
                yield out
            tail = self._inflater.unconsumed_tail
            if not tail:
                return
            try:
                out = self._inflater.decompress(tail, self.piece)
            except zlib.error:
                raise ValueError("the upstream's compressed body is corrupt") from None
