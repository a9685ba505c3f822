"""A request body read as JSON and written back: parsed exactly (numbers beyond a double, huge
integers and lone surrogates kept as the client sent them), refused with a clear 400 when it is not
a JSON object or nests too deep, and dumped the way it came in.

A number beyond a double (`1e4000`) or an integer beyond 64 bits (`10**30`) is kept as its text, an
`orjson.Fragment` that every `orjson.dumps` writes back as it came: never turned into an exact Python
integer (each such integer of thousands of digits cost milliseconds to build and to write, so 10,000
of them froze the loop for seconds), and never refused by orjson's 64-bit range where the proxy
counts. The standard library's encoder needs `default=fragment_text` for them.

Pure: bytes in, dicts out, and back.
"""

from __future__ import annotations

import json
import re
import secrets
from typing import Any

import orjson

from proxy.counting.tokens import fragment_text
from proxy.errors import ProxyError

_HUGE = float(2**63)
# Deeper JSON is refused with a 400 before anything walks it: the proxy's own recursive code (and
# the standard library's encoder) has room for this and more under Python's recursion limit, and no
# chat request nests anywhere near it.
MAX_JSON_DEPTH = 512
_INT64 = 2**63
_INT_DIGITS = 18  # an integer of this many digits or fewer fits in 64 bits


def _scan(value: Any) -> tuple[int, bool]:
    """How deep a parsed value nests, and whether it holds a number beyond 64 bits (one walk of the
    containers, level by level, no recursion; it stops past `MAX_JSON_DEPTH`). Only containers are
    kept for the next level: the scalars of one are looked at in its own loop."""
    if not isinstance(value, dict | list):
        return 0, type(value) is float and not -_HUGE < value < _HUGE
    level: list[Any] = [value]
    depth, huge = 0, False
    while level:
        depth += 1
        if depth > MAX_JSON_DEPTH:
            break
        below: list[Any] = []
        keep = below.append
        for item in level:
            for child in item.values() if type(item) is dict else item:
                kind = type(child)
                if kind is str:  # most values: checked first
                    continue
                if kind is dict or kind is list:
                    keep(child)
                elif kind is float and not -_HUGE < child < _HUGE:
                    huge = True
        level = below
    return depth, huge


def _exact_float(text: str) -> float | orjson.Fragment:
    """A JSON number with a fraction or exponent: a float, or its own text when it is beyond a
    double's range (1e400), so it is written back as the same value."""
    number = float(text)
    if number not in (float("inf"), float("-inf")):
        return number
    return orjson.Fragment(text)


def _exact_int(text: str) -> int | orjson.Fragment:
    """A JSON integer: an int within 64 bits, else its own text (never an int of thousands of digits)."""
    if len(text) <= _INT_DIGITS:
        return int(text)
    if len(text) <= _INT_DIGITS + 2 and -_INT64 <= (number := int(text)) < _INT64:
        return number
    return orjson.Fragment(text)


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
            body = json.loads(
                raw.decode("utf-8"),
                parse_float=_exact_float,
                parse_int=_exact_int,
                parse_constant=_no_constants,
            )
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
        # A lone surrogate (which the standard library's parser accepts), or an int beyond 64 bits
        # built by the proxy's caller: ASCII escapes keep it valid on the wire. Kept numbers go in
        # as placeholders, then their own text in their place.
        numbers: list[str] = []
        mark = secrets.token_hex(8)

        def placeholder(item: Any) -> str:
            numbers.append(fragment_text(item))
            return f"{mark}{len(numbers) - 1}{mark}"

        text = json.dumps(value, separators=(",", ":"), default=placeholder)
        if numbers:
            text = re.sub(f'"{mark}([0-9]+){mark}"', lambda m: numbers[int(m.group(1))], text)
        return text.encode()
