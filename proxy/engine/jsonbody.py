"""A request body read as JSON and written back: parsed exactly (numbers beyond a double, huge
integers and lone surrogates kept as the client sent them), refused with a clear 400 when it is not
a JSON object or nests too deep, and dumped the way it came in.

Pure: bytes in, dicts out, and back.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import orjson

from proxy.errors import ProxyError

_HUGE = float(2**63)
# Deeper JSON is refused with a 400 before anything walks it: the proxy's own recursive code (and
# the standard library's encoder) has room for this and more under Python's recursion limit, and no
# chat request nests anywhere near it.
MAX_JSON_DEPTH = 512
_MAX_EXPONENT = 4000  # Python turns integers of more digits than about this into text only slowly


def _scan(value: Any) -> tuple[int, bool]:
    """How deep a parsed value nests, and whether it holds a number beyond 64 bits (one walk of the
    containers, no recursion; it stops past `MAX_JSON_DEPTH`)."""
    stack = [(value, 1)]
    deepest, huge = 0, False
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth)
            if deepest > MAX_JSON_DEPTH:
                break
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
        elif type(item) is float and not -_HUGE < item < _HUGE:
            huge = True
    return deepest, huge


def _exact_float(text: str) -> float | int:
    """A JSON number with a fraction or exponent: a float, or the integer it is when it is beyond a
    double's range (1e400 is exactly ten to the 400th), so it can be written back as the same value."""
    number = float(text)
    if number not in (float("inf"), float("-inf")):
        return number
    exact = Decimal(text)
    if abs(exact.adjusted()) > _MAX_EXPONENT:
        raise ValueError(f"number {text[:40]!r} is out of range")
    return int(exact)


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def parse_json_object(raw: bytes) -> dict[str, Any]:
    """The request body as a JSON object, or a 400 that says what is wrong with it. orjson reads it;
    what orjson refuses although it is valid JSON (a number beyond a double, an integer of hundreds
    of digits, a lone surrogate escape) the standard library reads, exactly."""
    try:
        try:
            body = orjson.loads(raw)
            depth, exact = _scan(body)  # orjson made a float of an integer beyond 64 bits: keep it exact
        except orjson.JSONDecodeError:
            exact = True
        if exact:
            body = json.loads(raw.decode("utf-8"), parse_float=_exact_float, parse_constant=_no_constants)
            depth = _scan(body)[0]
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise ProxyError(400, f"The request body is not valid JSON: {exc}.", code="invalid_json") from None
    if not isinstance(body, dict):
        raise ProxyError(400, "The request body must be a JSON object.", code="invalid_json")
    if depth > MAX_JSON_DEPTH:
        raise ProxyError(
            400,
            f"The request body nests deeper than the proxy's limit of {MAX_JSON_DEPTH} levels.",
            code="invalid_json",
        )
    return body


def dump_json(value: Any) -> bytes:
    """`value` as JSON bytes, compact, as orjson writes it (or the standard library, past 64 bits)."""
    try:
        return orjson.dumps(value)
    except TypeError:
        # Integers beyond 64 bits. ASCII escapes keep even a lone surrogate (which the standard
        # library's parser accepts) valid on the wire.
        return json.dumps(value, separators=(",", ":")).encode()
