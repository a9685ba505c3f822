"""The one-line note that replaces an old tool result (level 1), and the marker for dropped turns.

A note keeps what the next turn most likely needs, within a small budget: which tool was called
with which arguments, how big its result was, the head of the result, and the identifiers in it
(order and part numbers, ids, amounts, dates, error lines), since a plain preview loses every fact
past its first 150 characters. A note is shaped by what it holds: a file read keeps its line range
and the names it defines (not `cat -n` line numbers), grep output the files it matched, test and
shell output its failing test ids, exception lines, summary line and exit status. A recent result
too big for the window is capped instead (`cap_text`): its head, its tail and its error and summary
lines. Pure and deterministic: the same result always gives the same note, so a compacted prefix
stays byte-identical from one turn to the next.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import orjson

NOTE_PREFIX = "[Truncated to save context:"
DROPPED_PREFIX = "[Earlier conversation dropped to save context:"
CAP_WORDS = "chars cut here to fit the context window"

ARGUMENT_CHARS = 120
FACT_CHARS = 240
MAX_CANDIDATES = 400  # facts considered per result: enough for rarity, bounded for huge results
# What a full facts section typically looks like, for costing a note before its facts are found.
TYPICAL_FACTS = (
    " Kept: order_id=4471; sku=BW-2231; name=front wheel 700c; price=129.00; qty=2; status=shipped; "
    "date=2026-11-30; tracking=1Z999AA10123456784; customer=C-10294; total=$258.00; invoice=INV-88213; "
    "warehouse=Lyon-2; part=RW-700C-32."
)

_SPACE = re.compile(r"\s+")
_SHAPES = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789", "a" * 52 + "9" * 10)
# Keys whose values are facts a later turn asks about again.
_FACT_KEY = re.compile(
    r"(?:^|_)(?:id|ids|no|number|num|code|sku|part|order|invoice|ref|reference|serial|tracking|price|"
    r"amount|total|cost|balance|qty|quantity|stock|status|state|date|due|eta|error|email|phone|name|"
    r"title|version|account|user|customer)s?$",
    re.IGNORECASE,
)
_AMOUNT = r"[$€£¥]\s?\d[\d,]*(?:\.\d+)?|\d[\d,]*(?:\.\d+)?\s?(?:USD|EUR|GBP|CNY|JPY|RMB|元)"
# Words with a digit in them: order numbers, part numbers, ids, versions, dates.
_IDENTIFIER = r"#?[A-Za-z0-9][A-Za-z0-9_\-./:]*\d[A-Za-z0-9_\-./:]*"
_FACT_TOKEN = re.compile(rf"(?:{_AMOUNT})|(?<![\w#])(?:{_IDENTIFIER})")
ERROR_WORDS = ("error", "exception", "failed", "failure", "fatal", "traceback", "denied")
# `KeyError`, `AssertionError`, `CalledProcessError`: exception class names are error words too.
_ERROR_WORD = re.compile(rf"\b(?:{'|'.join(ERROR_WORDS)})\b|(?-i:\b[A-Z]\w*(?:Error|Exception)\b)", re.I)
_EXCEPTION_NAME = re.compile(r"[A-Z]\w*(?:Error|Exception|Exit|Interrupt)\b")

OUTLINE_CHARS = 420
OUTLINE_ITEM_CHARS = 120
# `cat -n` and agent read tools number each line: "    12\tcode" or "    12→code".
_NUMBERED_LINE = re.compile(r"^[ \t]*(\d+)(?:\t|→|: )", re.M)
# Definitions: a line that starts (after its number, indentation and modifiers) with one of these.
_DEFINITION_WORDS = (
    "def",
    "class",
    "function",
    "function*",
    "const",
    "fn",
    "func",
    "interface",
    "struct",
    "enum",
    "trait",
    "type",
)
_MODIFIERS = (
    "export ",
    "default ",
    "pub ",
    "pub(crate) ",
    "async ",
    "static ",
    "public ",
    "private ",
    "abstract ",
)
_NAME = re.compile(r"[A-Za-z_$][\w$]*")
# grep/ripgrep output: "path:line:text".
_MATCH_LINE = re.compile(r"^([\w./@+-]+\.\w+):\d+:", re.M)
_TEST_ID = re.compile(r"^(?:FAILED|ERROR)\s+(\S+)|^(\S+::\S+)\s+(?:FAILED|ERROR)\b", re.M)
_EXCEPTION_LINE = re.compile(
    r"^(?:E\s+)?((?:[\w.]+\.)?[A-Z]\w*(?:Error|Exception|Exit|Interrupt)\b(?::[^\n]*)?)$", re.M
)
_SUMMARY_LINE = re.compile(
    r"^[=\- ]*((?:\d+ (?:failed|passed|errors?|skipped|xfailed|xpassed|warnings?|deselected)"
    r"(?:, )?)+[^\n=]*?)[= ]*$",
    re.M,
)
_EXIT_STATUS = re.compile(
    r"(?:exit(?:ed)?(?: with)? (?:code|status)|return code|returncode)[:= ]+(-?\d+)", re.I
)


def is_note(content: Any) -> bool:
    """Whether a content value is already a note (notes are never truncated again)."""
    return isinstance(content, str) and content.startswith(NOTE_PREFIX)


def is_dropped_marker(message: dict[str, Any]) -> bool:
    content = message.get("content")
    return isinstance(content, str) and content.startswith(DROPPED_PREFIX)


def dropped_marker(count: int) -> dict[str, Any]:
    """What stands where whole exchanges were dropped, so the model knows something is missing and
    strict templates still see a user turn answered by an assistant turn."""
    noun = "message" if count == 1 else "messages"
    return {"role": "assistant", "content": f"{DROPPED_PREFIX} {count} earlier {noun}.]"}


def build_note(
    text: str,
    *,
    tool: str | None,
    arguments: str | None,
    preview_chars: int = 150,
    fits: Callable[[str], bool] | None = None,
) -> str:
    """The note that stands in for a tool result whose plain text is `text`. `fits` may bound the
    facts section further than its character budget (the engine bounds it in tokens)."""
    call, preview = _call_and_preview(text, tool, arguments, preview_chars)
    outline = _outline(text)
    return _note(call, text, preview + outline, _kept(_pick_facts(text, preview + outline, fits)))


def note_without_facts(
    text: str, *, tool: str | None, arguments: str | None, preview_chars: int = 150
) -> str:
    """The note without its facts, which cost the most to find: for costing a note before writing it."""
    call, preview = _call_and_preview(text, tool, arguments, preview_chars)
    return _note(call, text, preview + _outline(text), "")


def _note(call: str, text: str, preview: str, kept: str) -> str:
    return f"{NOTE_PREFIX} {call} returned {len(text):,} chars. Preview: {preview}{kept}]"


def _call_and_preview(
    text: str, tool: str | None, arguments: str | None, preview_chars: int
) -> tuple[str, str]:
    call = f"{tool or 'tool'}({_shorten(_compact_json(arguments or ''), ARGUMENT_CHARS)})"
    head = text[: preview_chars * 8]
    if _NUMBERED_LINE.search(head, 0, 200):
        head = _NUMBERED_LINE.sub("", head)
    return call, _shorten(" ".join(head[: preview_chars * 4].split()), preview_chars)


def _outline(text: str) -> str:
    """What a file read or a test/shell run established, in a few words: where a listing starts and
    ends and the names it defines; the failing test ids, exception lines, summary and exit status."""
    parts: list[str] = []
    numbers = _NUMBERED_LINE.findall(text, 0, 4000)
    if len(numbers) >= 3:
        last = _NUMBERED_LINE.findall(text, max(0, len(text) - 400))
        parts.append(f"lines {numbers[0]}-{last[-1] if last else numbers[-1]}")
    matched = _MATCH_LINE.findall(text, 0, 200)
    if matched:
        files = _unique(iter(_MATCH_LINE.findall(text)))
        parts.append(f"{len(files)} files matched: " + ", ".join(files))
    names = _unique(_definitions(text))
    if names:
        parts.append("defines " + ", ".join(names))
    # Each pattern runs only where its words occur: most results are neither test nor shell output.
    if "FAILED" in text or "ERROR" in text:
        failed = _unique(a or b for a, b in _TEST_ID.findall(text))
        if failed:
            parts.append("failed " + ", ".join(failed))
    if "Error" in text or "Exception" in text or "Exit" in text or "Interrupt" in text:
        errors = _unique(_shorten(line.strip(), OUTLINE_ITEM_CHARS) for line in _EXCEPTION_LINE.findall(text))
        if errors:
            parts.append(" | ".join(errors))
    if " passed" in text or " failed" in text or " error" in text:
        summaries = [line.strip() for line in _SUMMARY_LINE.findall(text) if " in " in line or "," in line]
        if summaries:
            parts.append(_shorten(summaries[-1], OUTLINE_ITEM_CHARS))
    lowered = text.lower()
    if "exit" in lowered or "returncode" in lowered or "return code" in lowered:
        status = _EXIT_STATUS.findall(text)
        if status:
            parts.append(f"exit status {status[-1]}")
    return f" Outline: {_shorten('; '.join(parts), OUTLINE_CHARS)}." if parts else ""


def _definitions(text: str) -> Iterator[str]:
    if not any(f"{word} " in text for word in _DEFINITION_WORDS):
        return  # most results define nothing: skip the walk over their lines
    for line in text.splitlines():
        body = line.lstrip(" \t0123456789").lstrip("\t→: ") if line[:1] in " \t0123456789" else line
        while body.startswith(_MODIFIERS):
            body = body.split(" ", 1)[1].lstrip()
        word, _, rest = body.partition(" ")
        if word in _DEFINITION_WORDS and (name := _NAME.match(rest.lstrip())):
            yield name.group(0)


def _unique(items: Iterator[str]) -> list[str]:
    return list(dict.fromkeys(item for item in items if item))


def cap_text(text: str, chars: int, *, tool: str | None) -> str | None:
    """`text` cut to about `chars` characters: its head and its tail, with the error and summary lines
    of the part cut out, and a note saying how much was cut. None when `chars` is too small to say it."""
    keep = chars - 240  # the note's own words
    if keep < 80 or keep >= len(text):
        return None
    lines_budget = keep // 4
    head_chars = (keep - lines_budget) * 2 // 5
    tail_chars = keep - lines_budget - head_chars
    head_end = text.rfind("\n", 0, head_chars) + 1 or head_chars
    tail_start = text.find("\n", len(text) - tail_chars)
    tail_start = len(text) - tail_chars if tail_start < 0 else tail_start + 1
    middle = text[head_end:tail_start]
    kept_lines: list[str] = []
    used = 0
    for line in _cut_part_lines(middle):
        if used + len(line) + 1 > lines_budget:
            break
        kept_lines.append(line)
        used += len(line) + 1
    cut = len(middle) - used
    lines = "\n".join(kept_lines)
    found = f" Its error and summary lines:]\n{lines}\n[…]" if kept_lines else "]"
    return (
        f"{text[:head_end]}\n[{cut:,} of {len(text):,} {CAP_WORDS}; "
        f"call {tool or 'the tool'} again (e.g. for a narrower range) to see them.{found}"
        f"\n{text[tail_start:]}"
    )


def _cut_part_lines(middle: str) -> Iterator[str]:
    """The lines of a cut part worth keeping: errors, exceptions, failing tests, summaries, exit status."""
    lowered = middle.lower()
    words = ("error", "exception", "fail", "fatal", "traceback", "denied", "exit", "passed")
    if not any(word in lowered for word in words) and not _EXCEPTION_NAME.search(middle):
        return
    seen: set[str] = set()
    for regex in (_SUMMARY_LINE, _EXIT_STATUS, _ERROR_WORD):  # summaries first: the fewest, the most telling
        for match in regex.finditer(middle):
            start = middle.rfind("\n", 0, match.start()) + 1
            end = middle.find("\n", match.end())
            line = _shorten(middle[start : len(middle) if end < 0 else end].strip(), 200)
            if line not in seen:
                seen.add(line)
                yield line


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit].rstrip() + "…"


def _compact_json(text: str) -> str:
    try:
        return orjson.dumps(orjson.loads(text)).decode()
    except (orjson.JSONDecodeError, TypeError):
        return _SPACE.sub(" ", text).strip()


def _kept(facts: list[str]) -> str:
    return f" Kept: {'; '.join(facts)}." if facts else ""


def _pick_facts(text: str, preview: str, fits: Callable[[str], bool] | None = None) -> list[str]:
    """Facts from `text` not already in the preview, the rarest kinds first, within the budget, in
    the order they appear. Rarest first: in a result of many similar records, the first records'
    fields would otherwise crowd out the one order number or error that stands alone."""
    candidates: list[str] = []
    seen: set[str] = set()
    for fact in _facts(text):
        if fact not in seen and fact.rpartition("=")[2] not in preview:
            seen.add(fact)
            candidates.append(fact)
            if len(candidates) >= MAX_CANDIDATES:
                break
    kind_of = [fact.partition("=")[0] if "=" in fact else _shape(fact) for fact in candidates]
    kinds = Counter(kind_of)
    ranked = sorted(range(len(candidates)), key=lambda i: (kinds[kind_of[i]], i))
    chosen: list[int] = []
    used = 0
    for i in ranked:
        fact = candidates[i]
        if used + len(fact) + 2 > FACT_CHARS:
            continue  # a shorter fact may still fit
        if fits is not None and not fits(_kept([candidates[j] for j in sorted([*chosen, i])])):
            break
        chosen.append(i)
        used += len(fact) + 2
    return [candidates[i] for i in sorted(chosen)]


def _shape(fact: str) -> str:
    """What kind of token a fact is (letters become a, digits 9): `BW-2231` and `BW-7810` are alike."""
    return fact.translate(_SHAPES)[:12]


def _facts(text: str) -> Iterator[str]:
    stripped = text.lstrip()
    if stripped[:1] in ("{", "["):
        try:
            yield from _json_facts(orjson.loads(stripped))
            return
        except orjson.JSONDecodeError:
            pass
    if _NUMBERED_LINE.search(text, 0, 200):
        text = _NUMBERED_LINE.sub("", text)  # line numbers are not facts
    yield from _error_lines(text, 2)
    for match in _FACT_TOKEN.finditer(text):
        yield match.group(0).rstrip(".:/-")


def _error_lines(text: str, most: int) -> Iterator[str]:
    """The first lines that name an error, found word first (a line pattern backtracks on every line)."""
    lowered = text.lower()
    if not any(word in lowered for word in ERROR_WORDS):
        return
    end = -1
    for match in _ERROR_WORD.finditer(text):
        if match.start() <= end:
            continue  # another word on a line already given
        start = text.rfind("\n", 0, match.start()) + 1
        end = text.find("\n", match.end())
        end = len(text) if end < 0 else end
        yield _shorten(text[start:end].strip(), 100)
        most -= 1
        if not most:
            return


def _json_facts(root: Any) -> Iterator[str]:
    """Leaves of a JSON value that look like facts, depth first, without recursion (so any depth the
    parser accepts is fine and a leaf costs the same however deep it sits)."""
    stack: list[Iterator[tuple[str, Any]]] = [iter((("", root),))]
    fact_key: dict[str, bool] = {}
    while stack:
        for key, value in stack[-1]:
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
                if _ERROR_WORD.search(rendered):
                    yield f"{key}={_shorten(rendered, 100)}" if key else _shorten(rendered, 100)
            elif fact_key[key] or any(ch.isdigit() for ch in rendered):
                yield f"{key}={rendered}" if key else rendered
        else:
            stack.pop()
