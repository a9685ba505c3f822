"""`context_management.edits` read and checked before the proxy applies them itself: every field
the proxy reads must have the type Anthropic documents, else a 400 `invalid_request_error` that names
the field (`context_management.edits.0.exclude_tools: ...`, Anthropic's own dotted wording), never a
500 deeper in.

The shapes follow anthropic-sdk-python's `BetaClearToolUses20250919EditParam` and
`BetaClearThinking20251015EditParam` (docs.claude.com, "Context editing"):

- `clear_tool_uses_20250919`: `trigger` `{"type": "input_tokens" | "tool_uses", "value": int}`,
  `keep` `{"type": "tool_uses", "value": int}`, `clear_at_least` `{"type": "input_tokens", "value":
  int}`, `exclude_tools` a list of tool names, `clear_tool_inputs` a bool or a list of tool names;
- `clear_thinking_20251015`: `keep` `{"type": "thinking_turns", "value": int}` or `"all"`.

Other edit types (`compact_20260112`) are left to the proxy's own compaction, unread. Anthropic
documents no limit on the number of edits; there are two strategies the proxy applies, so more than
`MAX_EDITS` edits is refused (nginx and Envoy refuse an oversized list of anything with a 400 too).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from proxy.errors import ProxyError

CLEAR_THINKING = "clear_thinking_20251015"
CLEAR_TOOL_USES = "clear_tool_uses_20250919"
DEFAULT_TRIGGER_TOKENS = 100_000
DEFAULT_KEEP_TOOL_USES = 3
DEFAULT_KEEP_THINKING_TURNS = 1
MAX_EDITS = 16
MAX_TOOL_NAMES = 1024  # in `exclude_tools` or `clear_tool_inputs`; a request has at most a few hundred tools


@dataclass(frozen=True, slots=True)
class ClearThinking:
    keep: int | None  # the last turns whose thinking stays; None keeps all


@dataclass(frozen=True, slots=True)
class ClearToolUses:
    trigger_kind: str  # "input_tokens" or "tool_uses"
    trigger: int
    keep: int
    clear_at_least: int | None
    exclude_tools: frozenset[str]
    clear_all_inputs: bool
    input_tools: frozenset[str]


Edit = ClearThinking | ClearToolUses


def read_edits(body: dict[str, Any]) -> list[Edit]:
    """The edits the proxy applies itself, in order, each checked; a 400 for the first wrong field."""
    management = body.get("context_management")
    if management is None:
        return []
    if not isinstance(management, dict):
        raise _invalid("context_management", "Input should be a valid object")
    edits = management.get("edits")
    if edits is None:
        return []
    if not isinstance(edits, list):
        raise _invalid("context_management.edits", "Input should be a valid array")
    if len(edits) > MAX_EDITS:
        raise _invalid(
            "context_management.edits",
            f"at most {MAX_EDITS} edits are accepted by this proxy, got {len(edits)}",
        )
    out: list[Edit] = []
    for i, edit in enumerate(edits):
        where = f"context_management.edits.{i}"
        if not isinstance(edit, dict):
            raise _invalid(where, "Input should be a valid object")
        kind = edit.get("type")
        if not isinstance(kind, str):
            raise _invalid(f"{where}.type", "Field required, a string")
        if kind == CLEAR_THINKING:
            out.append(_clear_thinking(edit, where))
        elif kind == CLEAR_TOOL_USES:
            out.append(_clear_tool_uses(edit, where))
    return out


def _clear_thinking(edit: dict[str, Any], where: str) -> ClearThinking:
    keep = edit.get("keep")
    if keep == "all":
        return ClearThinking(None)
    return ClearThinking(_setting(keep, f"{where}.keep", ("thinking_turns",), DEFAULT_KEEP_THINKING_TURNS)[1])


def _clear_tool_uses(edit: dict[str, Any], where: str) -> ClearToolUses:
    kind, trigger = _setting(
        edit.get("trigger"), f"{where}.trigger", ("input_tokens", "tool_uses"), DEFAULT_TRIGGER_TOKENS
    )
    keep = _setting(edit.get("keep"), f"{where}.keep", ("tool_uses",), DEFAULT_KEEP_TOOL_USES)[1]
    at_least = edit.get("clear_at_least")
    clear_at_least = (
        None if at_least is None else _setting(at_least, f"{where}.clear_at_least", ("input_tokens",), 0)[1]
    )
    excluded = _names(edit.get("exclude_tools"), f"{where}.exclude_tools")
    inputs = edit.get("clear_tool_inputs")
    clear_all = inputs is True
    input_tools: frozenset[str] = frozenset()
    if inputs is not None and not isinstance(inputs, bool):
        if not isinstance(inputs, list):
            raise _invalid(
                f"{where}.clear_tool_inputs", "Input should be a valid boolean or array of strings"
            )
        input_tools = _names(inputs, f"{where}.clear_tool_inputs")
    return ClearToolUses(kind, trigger, keep, clear_at_least, excluded, clear_all, input_tools)


def _setting(spec: Any, where: str, kinds: tuple[str, ...], default: int) -> tuple[str, int]:
    """A `{"type": kind, "value": N}` setting (N a non-negative integer) as (kind, N); absent, the
    first kind and `default`."""
    if spec is None:
        return kinds[0], default
    if not isinstance(spec, dict):
        raise _invalid(where, "Input should be a valid object")
    kind = spec.get("type")
    if kind not in kinds:
        raise _invalid(f"{where}.type", "Input should be " + " or ".join(repr(k) for k in kinds))
    value = spec.get("value")
    if type(value) is not int or value < 0:  # not a bool, a float, an exact huge number
        raise _invalid(f"{where}.value", "Input should be a non-negative integer")
    return kind, value


def _names(value: Any, where: str) -> frozenset[str]:
    """A list of tool names (absent: none)."""
    if value is None:
        return frozenset()
    if not isinstance(value, list):
        raise _invalid(where, "Input should be a valid array of strings")
    if len(value) > MAX_TOOL_NAMES:
        raise _invalid(where, f"at most {MAX_TOOL_NAMES} tool names are accepted, got {len(value)}")
    for j, name in enumerate(value):
        if not isinstance(name, str):
            raise _invalid(f"{where}.{j}", "Input should be a valid string")
    return frozenset(value)


def _invalid(field: str, message: str) -> ProxyError:
    return ProxyError(400, f"{field}: {message}.", param=field)
