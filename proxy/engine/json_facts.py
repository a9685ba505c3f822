"""The facts of a JSON tool result: its leaves that look like facts (`key=value`), an order's number,
a part's price, a shipment's status, and long values only when they name an error.

Bounded work: a result is parsed only up to `JSON_CHARS`, and at most `MAX_SCANNED` values (leaves
and containers, empty ones too) are looked at, without recursion.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import orjson

from proxy.engine.scanning import ERROR_WORD, MAX_SCANNED, SCAN_CHARS, shorten

# JSON results up to this size are parsed for their `key=value` facts (orjson builds a 256 KB
# `[[],[],...]` in about 10 ms, a 4 MB one in 300); a larger one is read as text, head and tail.
JSON_CHARS = 262_144
# Keys whose values are facts a later turn asks about again.
_FACT_KEY = re.compile(
    r"(?:^|_)(?:id|ids|no|number|num|code|sku|part|order|invoice|ref|reference|serial|tracking|price|"
    r"amount|total|cost|balance|qty|quantity|stock|status|state|date|due|eta|error|email|phone|name|"
    r"title|version|account|user|customer)s?$",
    re.IGNORECASE,
)


def json_facts(root: Any) -> Iterator[str]:
    """Leaves of a JSON value that look like facts, depth first, without recursion (so any depth the
    parser accepts is fine and a leaf costs the same however deep it sits)."""
    stack: list[Iterator[tuple[str, Any]]] = [iter((("", root),))]
    fact_key: dict[str, bool] = {}
    leaves = 0
    while stack:
        for key, value in stack[-1]:
            leaves += 1  # containers too, empty ones included: `[[],[],...]` is bounded like text
            if leaves > MAX_SCANNED:
                return
            if isinstance(value, dict):
                stack.append((str(k), v) for k, v in value.items())
                break
            if isinstance(value, list):
                stack.append((key, v) for v in value)
                break
            if value is None:
                continue
            if key not in fact_key:
                fact_key[key] = bool(key) and _FACT_KEY.search(key) is not None
            if isinstance(value, bool) and not fact_key[key]:
                continue
            rendered = value if isinstance(value, str) else orjson.dumps(value).decode()
            if len(rendered) > 60:
                if ERROR_WORD.search(rendered, 0, SCAN_CHARS):
                    yield f"{key}={shorten(rendered, 100)}" if key else shorten(rendered, 100)
            elif fact_key[key] or any(ch.isdigit() for ch in rendered):
                yield f"{key}={rendered}" if key else rendered
        else:
            stack.pop()
