"""The hot path's shortcuts give the same figures as the work they save (issue 27 part 1): the
margin of short texts from remembered runs, short texts' counts remembered, the JSON body's scan
level by level, the `Date` header written once a second."""

from __future__ import annotations

import random
import re
import time
from email.utils import parsedate_to_datetime

import orjson
import pytest

from proxy.bodies.jsonbody import MAX_JSON_DEPTH, parse_json_object
from proxy.counting.margin import MEMO_MIN_CHARS, MIN_MARGIN, SHORT_RUN, MarginMeter, text_bounds, texts
from proxy.counting.tokens import MemoTextCounter
from proxy.errors import ProxyError
from proxy.server.middleware import http_date

# Classes and pairs both counts read, wide text, a lone surrogate, and runs of one class that the
# pair counts (`pp`, `dl`) see differently by where a text is cut.
ALPHABET = [*"abXYZ 0129.,;:{}[]\"'\n\t-_/\\", "é", "中", "한", "Ж", "😀", "\ud800", "ไ", "€"]


# Random bytes turned into those characters by one `str.translate`: a draw per character would be
# most of this file's time (three million of them).
WIDE = {byte: ALPHABET[byte % len(ALPHABET)] for byte in range(256)}
NARROW = {byte: ALPHABET[byte % 29] for byte in range(256)}


def _text(rng: random.Random) -> str:
    size = rng.choice([1, 2, 5, 30, 100, MEMO_MIN_CHARS - 1, MEMO_MIN_CHARS, 600])
    table = WIDE if rng.random() < 0.5 else NARROW
    return rng.randbytes(size).decode("latin-1").translate(table)


def _margin_as_joined(messages: list[dict[str, object]]) -> float:
    """The margin as it was measured before runs were remembered: the short texts joined, once."""
    estimate = upper = 0.0
    short = []
    for text in texts(messages):
        if len(text) < MEMO_MIN_CHARS:
            short.append(text)
            continue
        e, u = text_bounds(text)
        estimate, upper = estimate + e, upper + u
    e, u = text_bounds("\n".join(short))
    estimate, upper = estimate + e, upper + u
    return max(MIN_MARGIN, upper / estimate - 1) if estimate else MIN_MARGIN


def test_the_margin_from_remembered_runs_is_the_joined_texts_own_to_the_last_bit() -> None:
    rng = random.Random(27)
    meter = MarginMeter()  # shared, as the planner's is: runs remembered across histories
    for _ in range(300):
        messages: list[dict[str, object]] = []
        for _ in range(rng.choice([0, 1, 3, SHORT_RUN - 1, SHORT_RUN + 1, 3 * SHORT_RUN])):
            message: dict[str, object] = {"role": "user", "content": _text(rng)}
            if rng.random() < 0.1:
                message["tool_calls"] = [{"id": "c", "function": {"name": "f", "arguments": _text(rng)}}]
            messages.append(message)
        expected = _margin_as_joined(messages)
        assert meter.margin(messages) == expected  # cold
        assert meter.margin(messages) == expected  # warm: every run remembered
        assert meter.margin([*messages, {"role": "user", "content": "one more"}]) == _margin_as_joined(
            [*messages, {"role": "user", "content": "one more"}]
        )  # the next turn: the last run changed


def test_a_short_text_is_counted_once_and_the_empty_one_never_remembered() -> None:
    calls: list[str] = []

    def count(text: str) -> int:
        calls.append(text)
        return len(text)

    counter = MemoTextCounter(count)
    assert [counter("ok"), counter("ok"), counter("a"), counter("a")] == [2, 2, 1, 1]
    assert calls == ["ok", "a"]
    assert counter("") == 0 and counter("") == 0
    assert calls == ["ok", "a", "", ""]


def test_the_text_memo_keeps_what_is_resent_and_forgets_what_is_not() -> None:
    calls: list[str] = []

    def count(text: str) -> int:
        calls.append(text)
        return len(text)

    counter = MemoTextCounter(count, size=4)  # two generations of 2 texts
    for text in ["a", "b", "c", "a", "d", "b", "a", "c"]:
        assert counter(text) == 1
    # "a", resent while "c" was young, moved along; "b" and then "c" were not, and were forgotten.
    assert calls == ["a", "b", "c", "d", "b", "c"]


@pytest.mark.parametrize("depth", [1, 2, MAX_JSON_DEPTH - 1, MAX_JSON_DEPTH])
def test_a_body_nested_up_to_the_limit_is_read(depth: int) -> None:
    raw = b'{"a":' + b"[" * (depth - 1) + b"1" + b"]" * (depth - 1) + b"}"
    assert parse_json_object(raw) == orjson.loads(raw)


@pytest.mark.parametrize("opening", [b"[", b'{"k":'])
def test_a_body_nested_past_the_limit_is_refused(opening: bytes) -> None:
    closing = b"]" if opening == b"[" else b"}"
    raw = b'{"a":' + opening * MAX_JSON_DEPTH + b"1" + closing * MAX_JSON_DEPTH + b"}"
    with pytest.raises(ProxyError) as refused:
        parse_json_object(raw)
    assert refused.value.status == 400 and "nests deeper" in refused.value.message


@pytest.mark.parametrize(
    "number", [b"-9223372036854775809", b"100000000000000000000000", b"1e400", b"-1e400"]
)
def test_a_number_past_64_bits_deep_in_a_list_keeps_its_text(number: bytes) -> None:
    raw = b'{"messages":[{"role":"user","content":"x","n":[{"v":[' + number + b']}]}],"t":0.5}'
    assert orjson.dumps(parse_json_object(raw)) == raw


def test_a_large_float_stays_a_float() -> None:
    raw = b'{"messages":[{"role":"user","content":"x","n":[{"v":[1e19,1.5e30]}]}]}'
    assert parse_json_object(raw)["messages"][0]["n"][0]["v"] == [1e19, 1.5e30]


def test_the_date_header_is_an_http_date_of_this_second() -> None:
    value = http_date()
    assert re.fullmatch(rb"[A-Z][a-z]{2}, \d{2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2} GMT", value)
    assert abs(parsedate_to_datetime(value.decode()).timestamp() - time.time()) < 2
