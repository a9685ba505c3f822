"""The facts a note keeps of a tool result: the identifiers a later turn most likely needs.

A plain preview loses every fact past its first 150 characters, so a note keeps, within a small
budget, the identifiers of the result ranked by what an agent reads back: first those its own
messages named (`agent_words.py`) and error lines; then exception names, paths and test ids, dotted
module paths and ids such as order and part numbers, code names, then hashes and numbers; escape
codes, tags, versions and line numbers never (unless the agent named them: a listing's line it named
by its number is kept with its code). Of a JSON result, its leaves that look like facts
(`json_facts.py`). The rarest kinds come first, so that in a result of many similar records the one
order number or error that stands alone is kept.

Bounded work: every pattern is linear in what it reads, at most `MAX_SCANNED` tokens or JSON values
are looked at; a JSON result over `JSON_CHARS` is read as text (its head and tail).
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from collections.abc import Callable, Iterator
from collections.abc import Set as AbstractSet

import orjson

from proxy.engine.json_facts import JSON_CHARS, json_facts
from proxy.engine.scanning import (
    LINE_CHARS,
    MAX_LINES,
    MAX_SCANNED,
    NUMBERED_LINE,
    SCAN_CHARS,
    error_lines,
    head_and_tail,
    shorten,
)

FACT_CHARS = 360
NAMED_LINES = 4  # lines of a listing kept because the agent named their numbers
NAMED_LINE_CHARS = 50
MAX_CANDIDATES = 1_000  # facts considered per result: enough for rarity, bounded for huge results
# What a full facts section typically looks like, for costing a note before its facts are found.
TYPICAL_FACTS = (
    " Kept: order_id=4471; sku=BW-2231; name=front wheel 700c; price=129.00; qty=2; status=shipped; "
    "date=2026-11-30; tracking=1Z999AA10123456784; customer=C-10294; total=$258.00; invoice=INV-88213; "
    "warehouse=Lyon-2; part=RW-700C-32; src/shop/orders.py; shop.billing.totals; KeyError; "
    "refund_pending; ShippingLabel."
)

_SHAPES = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789", "a" * 52 + "9" * 10)
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

# What a fact is, best first: an error line; an exception name; a file path or test id; a dotted
# module path or an id (order and part numbers, dates, key=value of JSON); a code name (snake_case,
# CamelCase, _private); a hash; a bare number. Escape codes, plain words and line numbers are none.
RANK_ERROR_LINE, RANK_ERROR, RANK_PATH, RANK_DOTTED, RANK_ID, RANK_NAME, RANK_HEX, RANK_NUMBER = range(8)
# A version (`3.13.0`, `1.14dev`, `pluggy-0.13.1`, pip's `>=1.0`) or a bare decimal says nothing of
# what happened: kept only where the agent's own messages use it.
RANK_VERSION = 8
_VERSION = re.compile(
    r"(?:[A-Za-z][\w.]*-)?v?[0-9]+\.[0-9]+(?:\.[0-9]+[\w.+]*|\.?(?:dev|rc|post|a|b)[0-9]*)?"
)
_EXCEPTION_WORD = re.compile(r"[A-Z]\w*(?:Error|Exception|Warning|Exit|Interrupt)")
_DIGIT = re.compile(r"[0-9]")
_ESCAPE = re.compile(r"u[0-9A-Fa-f]{4}|U[0-9A-Fa-f]{8}|x[0-9A-Fa-f]{2}|[nrtbfv0]")
_HEX = re.compile(r"(?:0x)?[0-9a-f]{6,}")
# grep's context lines (`80-def`, `src/a.py-15-from`): the line number is no part of the fact.
_GREP_CONTEXT = re.compile(r"(.+\.\w+)-[0-9]++(?:-|$)|()[0-9]++-(?=[A-Za-z_])")
# Noise an agent never asks about again: caches and build dirs of installers, licence URLs.
_NOISE_PATH = ("/.cache/", "/pip-", "/wheels/")
_NOISE_URL = ("licen", "pip.pypa.io/warnings", "opensource.org", "gnu.org/", "creativecommons")
_TAG = re.compile(r"/?[A-Za-z][\w-]*")
_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")
_LS_LINE = re.compile(r"^[-dlcbps][rwxsStT-]{9}[.+@]?[ \t]", re.M)
# `unusable.It`: a sentence run into the next one, not a dotted name.
_SENTENCE_STARTS = frozenset({
    "It", "The", "This", "That", "If", "In", "To", "You", "We", "For", "See", "Please", "Note", "Use",
    "Try", "When", "Consider", "Also", "Then", "Run", "Check", "And", "But", "Or", "As", "At", "On",
    "Is", "Was", "There", "These", "Those", "A", "An", "Make", "Set", "No", "Not",
})  # fmt: skip
_FILE_EXTENSIONS = frozenset({
    "py", "pyi", "js", "mjs", "cjs", "ts", "tsx", "jsx", "rs", "go", "java", "kt", "c", "h", "cc", "cpp",
    "hpp", "cs", "rb", "php", "swift", "scala", "sh", "md", "rst", "txt", "toml", "yaml", "yml", "json",
    "cfg", "ini", "lock", "html", "css", "sql", "proto", "log", "csv", "xml",
})  # fmt: skip


def facts_section(facts: list[str]) -> str:
    """The facts as a note writes them (nothing when there are none)."""
    return f" Kept: {'; '.join(facts)}." if facts else ""


def pick_facts(
    text: str,
    preview: str,
    fits: Callable[[str], bool] | None = None,
    used: AbstractSet[str] = frozenset(),
) -> list[str]:
    """Facts from `text` not already in the preview, within the budget, in the order they appear:
    first those the agent's own messages `used` (what it acted on is what it reads back: a name, a
    path, the line of a listing it named by its number), and error lines; then the rarest kinds.
    Rarest first: in a result of many similar records, the first records' fields would otherwise
    crowd out the one order number or error that stands alone. `fits` may bound the facts section
    further than its character budget."""
    candidates: list[str] = []
    rank: list[int] = []
    seen: Counter[str] = Counter()
    named = _named_lines(text, used) if used else []
    for fact, kind in itertools.chain(((line, RANK_ID) for line in named), _facts(text)):
        seen[fact] += 1
        if seen[fact] == 1 and fact.rpartition("=")[2] not in preview and len(candidates) < MAX_CANDIDATES:
            candidates.append(fact)
            rank.append(kind)
    kind_of = [fact.partition("=")[0] if "=" in fact else _shape(fact) for fact in candidates]
    kinds = Counter(kind_of)

    def order(i: int) -> tuple[bool, int, int, int]:
        # Ids and values: the rarest shape first (one order number among many records). Names and
        # paths: the most used first (what a file or a grep is about), then the first seen.
        often = kinds[kind_of[i]] if rank[i] in (RANK_ERROR_LINE, RANK_ID) else -seen[candidates[i]]
        later = rank[i] > RANK_ERROR_LINE and not _is_used(candidates[i], used) and candidates[i] not in named
        return later, rank[i], often, i

    chosen: list[int] = []
    spent = 0
    for i in sorted(range(len(candidates)), key=order):
        fact = candidates[i]
        if rank[i] == RANK_VERSION and fact not in used:
            break  # versions sort last
        if spent + len(fact) + 2 > FACT_CHARS or any(fact in candidates[j] for j in chosen):
            continue  # a shorter fact may still fit; one inside a fact already kept is kept
        if fits is not None and not fits(facts_section([candidates[j] for j in sorted([*chosen, i])])):
            break
        chosen.append(i)
        spent += len(fact) + 2
    return [candidates[i] for i in sorted(chosen)]


def _is_used(fact: str, used: AbstractSet[str]) -> bool:
    """Whether the agent's messages name `fact`, or a word of its value (`sku=BW-2231`)."""
    if not used:
        return False
    return fact in used or ("=" in fact and any(word in used for word in fact.partition("=")[2].split()))


def _named_lines(text: str, used: AbstractSet[str]) -> list[str]:
    """The lines of a numbered listing whose numbers the agent's messages name, as `169: code`."""
    numbers = {fact for fact in used if fact.isdigit()}
    text = head_and_tail(text, SCAN_CHARS)
    if not numbers or not NUMBERED_LINE.search(text, 0, 2000):
        return []
    lines: list[str] = []
    for match in itertools.islice(NUMBERED_LINE.finditer(text), MAX_SCANNED):
        if match.group(1) in numbers:
            end = text.find("\n", match.end(), match.end() + LINE_CHARS)
            code = " ".join(text[match.end() : end if end >= 0 else match.end() + LINE_CHARS].split())
            if code:
                lines.append(shorten(f"{match.group(1)}: {code}", NAMED_LINE_CHARS))
            if len(lines) == NAMED_LINES:
                break
    return lines


def agent_facts(text: str) -> frozenset[str]:
    """The facts an agent's own message names (its words, its calls' arguments), written as
    `pick_facts` writes them: a note keeps these first."""
    found: set[str] = set()
    for match in itertools.islice(_FACT_TOKEN.finditer(text), MAX_SCANNED):
        found.update(fact for fact, _ in _token_facts(match.group(0)))
    return frozenset(found)


def _shape(fact: str) -> str:
    """What kind of token a fact is (letters become a, digits 9): `BW-2231` and `BW-7810` are alike."""
    return fact.translate(_SHAPES)[:12]


def _facts(text: str) -> Iterator[tuple[str, int]]:
    """Each fact of `text` (repeats too: how often a name occurs says how central it is) with its rank."""
    stripped = text.lstrip()
    if stripped[:1] in ("{", "[") and len(stripped) <= JSON_CHARS:
        try:
            for fact in json_facts(orjson.loads(stripped)):
                yield fact, RANK_ID
            return
        except orjson.JSONDecodeError:
            pass
    text = head_and_tail(text, SCAN_CHARS)
    if NUMBERED_LINE.search(text, 0, 2000):
        text = NUMBERED_LINE.sub("", text)  # line numbers are not facts
    for line in error_lines(text, 2):
        yield line, RANK_ERROR_LINE
    listing = _LS_LINE.search(text, 0, 2000) is not None
    if listing:  # `ls -l`: the names are the facts, sizes and dates are not
        for row in itertools.islice(_LS_LINE.finditer(text), MAX_LINES):
            end = text.find("\n", row.end())
            name = text[row.end() : len(text) if end < 0 else end].rpartition(" ")[2]
            if name.strip(".") and len(name) <= 120:
                yield name, RANK_PATH
    ranks: dict[str, list[tuple[str, int]]] = {}  # a token's facts, found once per distinct token
    for match in itertools.islice(_FACT_TOKEN.finditer(text), MAX_SCANNED):
        token = match.group(0)
        before = text[match.start() - 1] if match.start() else ""
        if before == "\\" and (escape := _ESCAPE.match(token)):
            token = token[escape.end() :]  # `\u005c`, `\n` of JSON-escaped text are not facts
        elif before == "%" and len(token) > 2 and _HEX_DIGITS.issuperset(token[:2]):
            token = token[2:]  # `%2F` of a URL-escaped text
        elif before == "@" or text.startswith("@", match.end()):
            continue  # e-mail addresses: their domains and names are not what the next step uses
        elif text.startswith("%]", match.end()):
            continue  # a progress bar's `[100%]`
        elif before == "<" and text.startswith(">", match.end()) and _TAG.fullmatch(token):
            continue  # a tag's name (`<output_head>`, `</warning>`)
        if listing and token.isdigit():
            continue
        facts = ranks.get(token)
        if facts is None:
            ranks[token] = facts = _token_facts(token)
        yield from facts


def _token_facts(token: str) -> list[tuple[str, int]]:
    if token.isalpha() and (token.islower() or token.isupper() or token[1:].islower()):
        return []  # a plain word: the most common token by far, and never a fact
    token = token.rstrip(".:/-,").lstrip("-:")
    if len(token) <= 120 and (context := _GREP_CONTEXT.match(token)) is not None:
        rest = token[context.end() :]
        return [*_token_facts(context.group(1) or ""), *(_token_facts(rest) if len(rest) > 2 else [])]
    if "/" in token and any(noise in token for noise in _NOISE_PATH):
        return []
    if "://" in token and any(noise in token.lower() for noise in _NOISE_URL):
        return []
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
    parts = token.split(":")
    if "/" in parts[0] or parts[0].rpartition(".")[2] in _FILE_EXTENSIONS:
        return [part for part in parts if part and not part.isdigit()]  # grep's line numbers
    return [part for part in parts if part]


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
        if len(parts) == 2 and parts[1] in _SENTENCE_STARTS and parts[0].islower():
            return None
        if all(len(part) <= 1 for part in parts):
            return None  # `i.e`, `e.g`: abbreviations
        if all(part.isidentifier() for part in parts):
            if _EXCEPTION_WORD.fullmatch(parts[-1]):
                return RANK_ERROR
            if len(parts) == 2 and parts[1] in _FILE_EXTENSIONS:
                return RANK_PATH
            # `self.x` is an attribute, worth as much as a code name; `a.b.c`, `re.escape` module paths.
            return RANK_NAME if parts[0] in ("self", "cls") else RANK_DOTTED
    if _EXCEPTION_WORD.fullmatch(token):
        return RANK_ERROR
    if digits and _VERSION.fullmatch(token):
        return RANK_VERSION
    if digits:
        bare = token.lstrip("#$€£¥").replace(",", "").replace(".", "").replace("-", "")
        if bare.isdigit():
            return RANK_ID if "-" in token or "$" in token or len(bare) >= 4 else RANK_NUMBER
        if _HEX.fullmatch(token.lower()):
            return RANK_HEX
        return RANK_ID
    if (
        token.isidentifier()
        and token.strip("_")
        and ("_" in token.strip("_") or token[0] == "_" or (not token.isupper() and not token[1:].islower()))
    ):
        return RANK_NAME
    return None
