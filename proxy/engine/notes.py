"""The one-line note that replaces an old tool result (level 1), and the marker for dropped turns.

A note keeps what the next turn most likely needs, within a small budget: which tool was called
with which arguments, how big its result was, the head of the result, and the identifiers in it,
ranked by what an agent's next step uses (error lines and exception names, paths and test ids,
dotted module paths and ids such as order and part numbers, code names, then hashes and numbers;
escape codes and line numbers never), since a plain preview loses every fact past its first 150
characters. A note is shaped by what it holds: a file read keeps its line range and the names it
defines within a budget in tokens, top-level first (not `cat -n` line numbers), grep output the
files it matched, test and shell output its failing test ids, exception lines, summary line and
exit status. A recent result
too big for the window is capped instead (`cap_text`): its head, its tail and its error and summary
lines. Pure and deterministic: the same result always gives the same note, so a compacted prefix
stays byte-identical from one turn to the next.

Bounded work, since it runs on the event loop: every pattern is linear in what it reads (no start
rescans a run, no nested unbounded repetition), a note reads at most `SCAN_CHARS` of a result (its
head and tail), and a cap finds its error lines by their words with `str.find`, matching only those.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import orjson

NOTE_PREFIX = "[Truncated to save context:"
DROPPED_PREFIX = "[Earlier conversation dropped to save context:"
CAP_WORDS = "chars cut here to fit the context window"

ARGUMENT_CHARS = 120
FACT_CHARS = 360
MAX_CANDIDATES = 1_000  # facts considered per result: enough for rarity, bounded for huge results
# What a full facts section typically looks like, for costing a note before its facts are found.
TYPICAL_FACTS = (
    " Kept: order_id=4471; sku=BW-2231; name=front wheel 700c; price=129.00; qty=2; status=shipped; "
    "date=2026-11-30; tracking=1Z999AA10123456784; customer=C-10294; total=$258.00; invoice=INV-88213; "
    "warehouse=Lyon-2; part=RW-700C-32; src/shop/orders.py; shop.billing.totals; KeyError; "
    "refund_pending; ShippingLabel."
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
# Every pattern that runs over a whole result is linear: it starts only where a run of its characters
# starts (a lookbehind) and takes the run whole (possessive), so no start rescans a run, and nothing
# nests unbounded repetition. A tool result can be megabytes of one character.
_AMOUNT = (
    r"[$€£¥]\s?[0-9][0-9,]*+(?:\.[0-9]++)?"
    r"|(?<![\w#,.:/-])[0-9][0-9,]*+(?:\.[0-9]++)?\s?(?:USD|EUR|GBP|CNY|JPY|RMB|元)"
)
# Words, names, paths and ids, each taken whole (`_rank` says which are facts).
_IDENTIFIER = r"#?[A-Za-z0-9_\-./:]{3,}+"  # shorter ones are never facts
_FACT_TOKEN = re.compile(rf"(?:{_AMOUNT})|(?<![\w#\-./:])(?:{_IDENTIFIER})")
MAX_SCANNED = 20_000  # tokens or JSON leaves looked at per result: bounded work for any size
# What a note reads of a result: all of it up to this size, else its head and its tail (where a log
# ends on its errors and summary), so that a note costs the same bounded time for any size.
SCAN_CHARS = 65_536
ERROR_WORDS = ("error", "exception", "failed", "failure", "fatal", "traceback", "denied")
MAX_LINES = 1_000  # lines with such words looked at per result (a log of "0 errors" lines is bounded)
LINE_CHARS = 4_096  # of a line, what is matched: what makes it an error or summary line comes first
# `KeyError`, `AssertionError`, `CalledProcessError`: exception class names are error words too.
_ERROR_WORD = re.compile(rf"\b(?:{'|'.join(ERROR_WORDS)})\b|(?-i:\b[A-Z]\w*(?:Error|Exception)\b)", re.I)

# The outline's budget in tokens (by `_tokens`), not a cut in characters: its short parts first
# (line range, failures, errors, summary, exit status), then the files matched and the names
# defined share what is left, top-level names before nested ones, listed in file order.
OUTLINE_TOKENS = 160
OUTLINE_ITEM_CHARS = 120
# `cat -n` and agent read tools number each line: "    12\tcode" or "    12→code".
_NUMBERED_LINE = re.compile(r"^[ \t]*+([0-9]++)(?:\t|→|: )", re.M)
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
_DEFINITION = re.compile(
    r"^([ \t]*+)(?:[0-9]++(?:\t|→|:? )([ \t]*+))?"  # indentation, or a listing's number and indentation
    rf"(?:(?:{'|'.join(re.escape(m.strip()) for m in _MODIFIERS)}) ++)*+"
    rf"(?:{'|'.join(re.escape(w) for w in _DEFINITION_WORDS)}) ++([A-Za-z_$][\w$]*+)",
    re.M,
)
# grep/ripgrep output: "path:line:text".
_MATCH_LINE = re.compile(r"^([\w./@+-]+\.\w+):\d+:", re.M)
# `FAILED tests/x.py::t` (pytest's summary) or `tests/x.py::t FAILED` (verbose), `::` checked after.
_TEST_ID = re.compile(r"^(?:FAILED|ERROR)[ \t]++(\S++)|^(\S++)[ \t]++(?:FAILED|ERROR)\b", re.M)
_EXCEPTION_LINE = re.compile(
    r"^(?:E[ \t]++)?((?:[\w.]+\.)?[A-Z]\w*(?:Error|Exception|Exit|Interrupt)\b(?::[^\n]*+)?)$", re.M
)
# Up to the line's first `=` (pytest's `==== 1 failed, 2 passed in 0.1s ====`), at most 200 more chars.
_SUMMARY_LINE = re.compile(
    r"^[=\- ]*+((?:[0-9]++ (?:failed|passed|errors?|skipped|xfailed|xpassed|warnings?|deselected)"
    r"(?:, )?)++[^\n=]{0,200}+)",
    re.M,
)
_EXIT_STATUS = re.compile(
    r"(?:exit(?:ed)?(?: with)? (?:code|status)|return code|returncode)[:= ]++(-?[0-9]++)", re.I
)
_SUMMARY_WORDS = ("failed", "passed", "error", "skipped", "xfailed", "xpassed", "warning", "deselected")
_CUT_LINE_KINDS = (
    (_SUMMARY_LINE, _SUMMARY_WORDS),
    (_EXIT_STATUS, ("exit", "return code", "returncode")),
    (_ERROR_WORD, ERROR_WORDS),
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
    scanned = _scanned(text, SCAN_CHARS)
    outline = _outline(scanned)
    return _note(call, text, preview + outline, _kept(_pick_facts(text, preview + outline, fits)))


def note_without_facts(
    text: str, *, tool: str | None, arguments: str | None, preview_chars: int = 150
) -> str:
    """The note without its facts, which cost the most to find: for costing a note before writing it."""
    call, preview = _call_and_preview(text, tool, arguments, preview_chars)
    return _note(call, text, preview + _outline(_scanned(text, SCAN_CHARS)), "")


def _scanned(text: str, chars: int, head_share: float = 0.75) -> str:
    """`text` itself up to `chars`, else its head and its tail of `chars` in all, cut at line ends."""
    if len(text) <= chars:
        return text
    head = int(chars * head_share)
    head_end = text.rfind("\n", 0, head) + 1 or head
    tail_start = text.find("\n", len(text) - (chars - head)) + 1 or len(text) - (chars - head)
    return f"{text[:head_end]}\n{text[tail_start:]}"


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
    files = _unique(iter(_MATCH_LINE.findall(text))) if _MATCH_LINE.search(text, 0, 200) else []
    definitions: dict[str, bool] = {}
    for name, top in _definitions(text):
        definitions[name] = definitions.get(name, False) or top
    lists = len(parts)  # where the two lists go, once the short parts have taken their share
    # Each pattern runs only where its words occur: most results are neither test nor shell output.
    if "FAILED" in text or "ERROR" in text:
        failed = _unique(a or b for a, b in _TEST_ID.findall(text) if a or "::" in b)
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
    short = [_shorten(part, OUTLINE_ITEM_CHARS * 4) for part in parts]
    left = OUTLINE_TOKENS - sum(_tokens(part) + 1 for part in short)
    share = left // 2 if files and definitions else left
    listed: list[str] = []
    if files:
        chosen = _within(files, [True] * len(files), share)
        listed.append(f"{len(files)} files matched: {chosen}")
        left -= _tokens(listed[-1])
    if definitions:
        listed.append("defines " + _within(list(definitions), list(definitions.values()), left))
    parts = short[:lists] + listed + short[lists:]
    return f" Outline: {'; '.join(parts)}." if parts else ""


def _within(items: list[str], first: list[bool], budget: int) -> str:
    """`items` (in their order) within `budget` tokens: those marked `first` are chosen first, then
    the others, each while it fits; what is left out is counted."""
    chosen: set[int] = set()
    used = 0
    for wanted in (True, False):
        for i, item in enumerate(items):
            if first[i] is wanted and i not in chosen:
                cost = _tokens(item) + 1
                if used + cost <= budget:
                    chosen.add(i)
                    used += cost
    text = ", ".join(items[i] for i in sorted(chosen))
    more = len(items) - len(chosen)
    return f"{text} (+{more} more)" if more and text else text or f"{more} names"


_TOKEN_PIECE = re.compile(r"[A-Za-z]{1,10}|[0-9]{1,3}|[^\sA-Za-z0-9]")


def _tokens(text: str) -> int:
    """About how many tokens `text` is for a BPE tokenizer (words, 3-digit groups, symbols): a budget
    that holds across tokenizers, where characters would favour long names over many short ones."""
    return len(_TOKEN_PIECE.findall(text))


def _definitions(text: str) -> Iterator[tuple[str, bool]]:
    """The names `text` defines, each with whether it is top-level (not indented)."""
    if not any(f"{word} " in text for word in _DEFINITION_WORDS):
        return  # most results define nothing: skip the walk over their lines
    for match in _DEFINITION.finditer(text):
        indent = match.group(2) if match.group(2) is not None else match.group(1)
        yield match.group(3), not indent


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
    seen: set[str] = set()
    for regex, words in _CUT_LINE_KINDS:  # summaries first: the fewest, the most telling
        for start, end in _matching_lines(regex, middle, lowered, words):
            line = _shorten(middle[start:end].strip(), 200)
            if line not in seen:
                seen.add(line)
                yield line


def _matching_lines(
    regex: re.Pattern[str], text: str, lowered: str, words: tuple[str, ...], most: int = MAX_LINES
) -> Iterator[tuple[int, int]]:
    """Where each line that holds a match of `regex` starts and ends, in order, each line once. Lines
    are found by their `words` (`str.find`, far faster than a pattern tried at every position) and
    only those lines are matched; at most `most` lines are looked at, whatever the text's size."""
    pos = 0
    hits = {word: lowered.find(word) for word in words}
    while most:
        live = [hit for hit in hits.values() if hit >= 0]
        if not live:
            return
        hit = min(live)
        most -= 1
        start = text.rfind("\n", 0, hit) + 1
        end = text.find("\n", hit)
        end = len(text) if end < 0 else end
        if regex.search(text, start, min(end, start + LINE_CHARS)):
            yield start, end
        pos = end + 1
        hits = {word: h if h < 0 or h >= pos else lowered.find(word, pos) for word, h in hits.items()}


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit].rstrip() + "…"


def _compact_json(text: str) -> str:
    try:
        return orjson.dumps(orjson.loads(text)).decode()
    except (orjson.JSONDecodeError, TypeError):
        return _SPACE.sub(" ", text).strip()


# What a fact is, best first: an error line; an exception name; a file path or test id; a dotted
# module path or an id (order and part numbers, dates, key=value of JSON); a code name (snake_case,
# CamelCase, _private); a hash; a bare number. Escape codes, plain words and line numbers are none.
RANK_ERROR_LINE, RANK_ERROR, RANK_PATH, RANK_DOTTED, RANK_ID, RANK_NAME, RANK_HEX, RANK_NUMBER = range(8)
_EXCEPTION_WORD = re.compile(r"[A-Z]\w*(?:Error|Exception|Warning|Exit|Interrupt)")
_DIGIT = re.compile(r"[0-9]")
_JSON_ESCAPE = re.compile(r'\\(?:u[0-9A-Fa-f]{4}|[nrt"\\/])')
_ESCAPE = re.compile(r"u[0-9A-Fa-f]{4}|U[0-9A-Fa-f]{8}|x[0-9A-Fa-f]{2}|[nrtbfv0]")
_HEX = re.compile(r"(?:0x)?[0-9a-f]{6,}")
_FILE_EXTENSIONS = frozenset({
    "py", "pyi", "js", "mjs", "cjs", "ts", "tsx", "jsx", "rs", "go", "java", "kt", "c", "h", "cc", "cpp",
    "hpp", "cs", "rb", "php", "swift", "scala", "sh", "md", "rst", "txt", "toml", "yaml", "yml", "json",
    "cfg", "ini", "lock", "html", "css", "sql", "proto", "log", "csv", "xml",
})  # fmt: skip


def _kept(facts: list[str]) -> str:
    return f" Kept: {'; '.join(facts)}." if facts else ""


def _pick_facts(text: str, preview: str, fits: Callable[[str], bool] | None = None) -> list[str]:
    """Facts from `text` not already in the preview, the rarest kinds first, within the budget, in
    the order they appear. Rarest first: in a result of many similar records, the first records'
    fields would otherwise crowd out the one order number or error that stands alone."""
    candidates: list[str] = []
    rank: list[int] = []
    seen: Counter[str] = Counter()
    for fact, kind in _facts(text):
        seen[fact] += 1
        if seen[fact] == 1 and fact.rpartition("=")[2] not in preview and len(candidates) < MAX_CANDIDATES:
            candidates.append(fact)
            rank.append(kind)
    kind_of = [fact.partition("=")[0] if "=" in fact else _shape(fact) for fact in candidates]
    kinds = Counter(kind_of)

    def order(i: int) -> tuple[int, int, int]:
        # Ids and values: the rarest shape first (one order number among many records). Names and
        # paths: the most used first (what a file or a grep is about), then the first seen.
        often = kinds[kind_of[i]] if rank[i] in (RANK_ERROR_LINE, RANK_ID) else -seen[candidates[i]]
        return rank[i], often, i

    chosen: list[int] = []
    used = 0
    for i in sorted(range(len(candidates)), key=order):
        fact = candidates[i]
        if used + len(fact) + 2 > FACT_CHARS or any(fact in candidates[j] for j in chosen):
            continue  # a shorter fact may still fit; one inside a fact already kept is kept
        if fits is not None and not fits(_kept([candidates[j] for j in sorted([*chosen, i])])):
            break
        chosen.append(i)
        used += len(fact) + 2
    return [candidates[i] for i in sorted(chosen)]


def _shape(fact: str) -> str:
    """What kind of token a fact is (letters become a, digits 9): `BW-2231` and `BW-7810` are alike."""
    return fact.translate(_SHAPES)[:12]


def _facts(text: str) -> Iterator[tuple[str, int]]:
    """Each fact of `text` (repeats too: how often a name occurs says how central it is) with its rank."""
    stripped = text.lstrip()
    if stripped[:1] in ("{", "["):
        try:
            for fact in _json_facts(orjson.loads(stripped)):
                yield fact, RANK_ID
            return
        except orjson.JSONDecodeError:
            pass
    text = _scanned(text, SCAN_CHARS)
    if _NUMBERED_LINE.search(text, 0, 2000):
        text = _NUMBERED_LINE.sub("", text)  # line numbers are not facts
    for line in _error_lines(text, 2):
        yield line, RANK_ERROR_LINE
    ranks: dict[str, list[tuple[str, int]]] = {}  # a token's facts, found once per distinct token
    for match in itertools.islice(_FACT_TOKEN.finditer(text), MAX_SCANNED):
        token = match.group(0)
        if text[match.start() - 1] == "\\" and match.start() and (escape := _ESCAPE.match(token)):
            token = token[escape.end() :]  # `\u005c`, `\n` of JSON-escaped text are not facts
        facts = ranks.get(token)
        if facts is None:
            ranks[token] = facts = _token_facts(token)
        yield from facts


def _token_facts(token: str) -> list[tuple[str, int]]:
    if token.isalpha() and (token.islower() or token.isupper() or token[1:].islower()):
        return []  # a plain word: the most common token by far, and never a fact
    token = token.rstrip(".:/-,").lstrip("-:")
    facts = []
    for part in _parts(token[2:] if token.startswith("./") else token):
        kind = _rank(part)
        if kind is not None:
            facts.append((part, kind))
    return facts


def _parts(token: str) -> list[str]:
    """`src/app.py:12:def` is a path, a line number and a word; `a.py::test_x` and URLs stay whole."""
    if ":" not in token or "::" in token or "://" in token or token.replace(":", "").isdigit():
        return [token] if token else []
    return [part for part in token.split(":") if part]


def _rank(token: str) -> int | None:
    """What a token is worth to the next step (lower is better), None for no fact at all."""
    if len(token) < 3 or len(token) > 120:
        return None
    if "/" in token or "::" in token:
        last = token.rpartition("/")[2]
        if "::" in token or "." in last.strip(".") or token.count("/") >= 2:
            return RANK_PATH
        return RANK_NAME if len(last) > 1 and not last.isalpha() else None  # `</NOTE>` is no path
    digits = _DIGIT.search(token) is not None
    if "." in token and not token[0].isdigit():
        parts = token.split(".")
        if all(part.isidentifier() for part in parts):
            if _EXCEPTION_WORD.fullmatch(parts[-1]):
                return RANK_ERROR
            if len(parts) == 2 and parts[1] in _FILE_EXTENSIONS:
                return RANK_PATH
            # `self.x` is an attribute, worth as much as a code name; `a.b.c`, `re.escape` module paths.
            return RANK_NAME if parts[0] in ("self", "cls") else RANK_DOTTED
    if _EXCEPTION_WORD.fullmatch(token):
        return RANK_ERROR
    if digits:
        bare = token.lstrip("#$€£¥").replace(",", "").replace(".", "").replace("-", "")
        if bare.isdigit():
            return RANK_ID if "-" in token or "$" in token or len(bare) >= 4 else RANK_NUMBER
        if _HEX.fullmatch(token.lower()):
            return RANK_HEX
        return RANK_ID
    if token.isidentifier() and (
        "_" in token.strip("_") or token[0] == "_" or (not token.isupper() and not token[1:].islower())
    ):
        return RANK_NAME
    return None


def _error_lines(text: str, most: int) -> Iterator[str]:
    """The first lines that name an error, found word first (a line pattern backtracks on every line)."""
    lowered = text.lower()
    if not any(word in lowered for word in ERROR_WORDS):
        return
    for start, end in _matching_lines(_ERROR_WORD, text, lowered, ERROR_WORDS):
        if end - start > 100:  # a long line (JSON-escaped output): around its last error word
            found = [m.start() for m in _ERROR_WORD.finditer(text, start, min(end, start + LINE_CHARS))]
            start = max(start, found[-1] - 40) if found else start
        yield _shorten(_JSON_ESCAPE.sub(" ", text[start : min(end, start + 400)]).strip(), 100)
        most -= 1
        if not most:
            return


def _json_facts(root: Any) -> Iterator[str]:
    """Leaves of a JSON value that look like facts, depth first, without recursion (so any depth the
    parser accepts is fine and a leaf costs the same however deep it sits)."""
    stack: list[Iterator[tuple[str, Any]]] = [iter((("", root),))]
    fact_key: dict[str, bool] = {}
    leaves = 0
    while stack and leaves < MAX_SCANNED:
        for key, value in stack[-1]:
            if isinstance(value, dict):
                stack.append((str(k), v) for k, v in value.items())
                break
            if isinstance(value, list):
                stack.append((key, v) for v in value)
                break
            leaves += 1
            if value is None:
                continue
            if key not in fact_key:
                fact_key[key] = bool(key) and _FACT_KEY.search(key) is not None
            if isinstance(value, bool) and not fact_key[key]:
                continue
            rendered = value if isinstance(value, str) else orjson.dumps(value).decode()
            if len(rendered) > 60:
                if _ERROR_WORD.search(rendered, 0, SCAN_CHARS):
                    yield f"{key}={_shorten(rendered, 100)}" if key else _shorten(rendered, 100)
            elif fact_key[key] or any(ch.isdigit() for ch in rendered):
                yield f"{key}={rendered}" if key else rendered
        else:
            stack.pop()
