"""A huge body read in a child process and handed back in pieces (`proxy/bodies/split_parse.py`,
issue 23 row 9): the pieces make up the very value `parse_json_object` reads from the whole body,
exact numbers and lone surrogates included, and a refused body gets the same 400."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import orjson
import pytest

from proxy.bodies import split_parse
from proxy.bodies.jsonbody import dump_json, parse_json_object
from proxy.bodies.offload import Offloader
from proxy.bodies.shared_strings import MIN_SHARED, SHARED_CHARS, Shared
from proxy.bodies.split_parse import SplitParser, assemble, split, weight
from proxy.errors import ProxyError
from tests.support.hostile import function_calls


def same(a: Any, b: Any) -> bool:
    """Equal values of equal types all the way down (a kept number compared by its text)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, orjson.Fragment):
        return orjson.dumps(a) == orjson.dumps(b)
    if isinstance(a, float) and a != a:  # pragma: no cover - JSON has no NaN
        return b != b
    return bool(a == b)


def through_pieces(raw: bytes) -> dict[str, Any]:
    done = split(raw)
    if done[0] == "error":
        raise ProxyError(done[1], done[2], code=done[3])
    _, exact, piece = done
    return assemble(piece, exact)  # type: ignore[no-any-return]


big_text = "word " * 30_000


def nested(value: Any, levels: int) -> Any:
    for _ in range(levels):
        value = [value, "x"]
    return value


BODIES = {
    "function calls": function_calls(3_000),
    "huge numbers": json.dumps({"messages": [{"role": "user", "content": "x" * 70_000}] * 3})
    .replace(
        '"messages"',
        '"w": [1e4000, 123456789012345678901234567890, 1.5e30, -0.0, 18446744073709551615], "messages"',
    )
    .encode(),
    "an unsigned 64-bit integer beside a huge one": b'{"a": 18446744073709551615, "b": ['
    + b",".join([b'"' + b"y" * 1000 + b'"'] * 200)
    + b'], "c": 1e999}',
    "a lone surrogate": b'{"messages": [{"role": "user", "content": "\\ud800 alone"}], "pad": ['
    + b",".join([b'{"k": "' + b"z" * 500 + b'"}'] * 400)
    + b"]}",
    "a large dict": json.dumps(
        {"model": "m", "meta": {f"key{i}": [i, f"v{i}"] for i in range(20_000)}}
    ).encode(),
    "nested large containers": json.dumps(
        {
            "input": [[{"deep": [big_text, {"again": [big_text] * 3}]}], big_text],
            "tools": {"t": [big_text] * 4},
        }
    ).encode(),
    "deeper than the split goes": json.dumps({"a": nested([big_text] * 4, 20)}).encode(),
    "empty containers and scalars": json.dumps(
        {"a": [], "b": {}, "c": None, "d": True, "e": 0, "f": "", "g": [[]] * 20_000}
    ).encode(),
    "duplicate keys": b'{"a": 1, "b": [' + b",".join([b'"' + b"q" * 800 + b'"'] * 200) + b'], "a": 2}',
}


@pytest.mark.parametrize("name", list(BODIES))
def test_the_pieces_make_up_the_value_parse_json_object_reads(name: str) -> None:
    raw = BODIES[name]
    whole = parse_json_object(raw)
    pieced = through_pieces(raw)
    assert same(whole, pieced)
    assert dump_json(whole) == dump_json(pieced)
    done = split(raw)
    assert done[0] == "ok" and not isinstance(done[2], bytes)  # it was split, not sent whole


@pytest.mark.parametrize(
    "raw",
    [
        b"[1, 2]",
        b'{"a": ',
        b'{"a": NaN}',
        b"[" * 600 + b"]" * 600,
        b'{"a": ' + b"[" * 600 + b"]" * 600 + b"}",
    ],
)
def test_a_refused_body_gets_the_same_400(raw: bytes) -> None:
    with pytest.raises(ProxyError) as whole:
        parse_json_object(raw)
    with pytest.raises(ProxyError) as pieced:
        through_pieces(raw)
    assert (pieced.value.status, pieced.value.message, pieced.value.code) == (
        whole.value.status,
        whole.value.message,
        whole.value.code,
    )


def test_the_pieces_read_from_the_file_are_the_same(tmp_path: Any) -> None:
    raw = BODIES["huge numbers"] + b" "
    path = tmp_path / "body.json"
    path.write_bytes(raw)
    done = split_parse.split_file(str(path))
    assert done[0] == "ok"
    out = tmp_path / "body.json.out"
    pieced = assemble(done[2], done[1], out.read_bytes())
    assert same(pieced, parse_json_object(raw))
    assert not path.exists(), "the body's file is removed once read"
    assert out.stat().st_mode & 0o777 == 0o600, "the client's text readable by no other user"


def test_the_items_short_strings_are_one_object_each() -> None:
    """Equal short values share one object (a 200,000-item body: 40 MB less), long ones and the
    value as a whole as they were."""
    raw = function_calls(1_000)  # through_pieces: no data, room for the minimum (4,096 strings)
    pieced = through_pieces(raw)
    assert same(pieced, parse_json_object(raw))
    items = pieced["input"]
    calls, outputs = items[0:-1:2], items[1:-1:2]
    assert len({id(item["type"]) for item in calls}) == 1
    assert all(call["call_id"] is output["call_id"] for call, output in zip(calls, outputs, strict=True))
    shared = Shared(body_bytes=0)  # room for the minimum only
    distinct = [{"id": f"id-{n}"} for n in range(MIN_SHARED * 2)]
    again = [{"id": f"id-{n}"} for n in range(MIN_SHARED * 2)]
    shared.strings_of(distinct)
    shared.strings_of(again)
    assert len(shared.first) == MIN_SHARED
    assert again[0]["id"] is distinct[0]["id"] and again[-1]["id"] is not distinct[-1]["id"]
    long = {"text": "x" * (SHARED_CHARS + 1)}
    assert shared.strings_of([long, {"text": "x" * (SHARED_CHARS + 1)}])[1]["text"] is not long["text"]


def test_every_piece_is_short_to_parse() -> None:
    raw = function_calls(20_000)
    done = split(raw)

    def sizes(piece: Any) -> list[int]:
        if isinstance(piece, bytes):
            return [len(piece)]
        return [
            n
            for part in piece[1]
            for n in (sizes(part[-1]) if not isinstance(part[-1], bytes) else [len(part[-1])])
        ]

    assert max(sizes(done[2])) <= split_parse.PIECE_BYTES + 200


@pytest.mark.process
def test_a_weighty_body_is_parsed_in_a_child_process_and_a_light_one_here(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    heavy, light = function_calls(40_000), json.dumps({"messages": [{"content": "a" * 3_000_000}]}).encode()
    assert (
        weight(heavy) >= split_parse.SPLIT_FROM > weight(light) and len(light) >= split_parse.SPLIT_MIN_BYTES
    )
    calls: list[bool] = []
    original = split_parse.assemble

    def assembled(piece: Any, exact: bool, data: bytes = b"", shared: Any = None) -> Any:
        calls.append(exact)
        return original(piece, exact, data, shared)

    monkeypatch.setattr(split_parse, "assemble", assembled)  # here: the pieces the child sent

    async def both() -> tuple[dict[str, Any], int, dict[str, Any]]:
        parser, offloader = SplitParser(), Offloader()
        parser.start()
        try:
            first = await parser.parse(heavy, offloader)
            pieced = len(calls)
            return first, pieced, await parser.parse(light, offloader)
        finally:
            parser.close()

    got_heavy, pieced, got_light = asyncio.run(both())
    assert same(got_heavy, parse_json_object(heavy)) and same(got_light, parse_json_object(light))
    assert pieced >= 1 and len(calls) == pieced  # the heavy body came in pieces, the light one whole


@pytest.mark.process
def test_a_broken_pool_falls_back_to_parsing_here() -> None:
    heavy = function_calls(40_000)

    async def parsed() -> dict[str, Any]:
        parser, offloader = SplitParser(), Offloader()
        pool = parser._executor()
        pool.shutdown()  # submitting now raises RuntimeError, as a pool that cannot run
        try:
            return await parser.parse(heavy, offloader)
        finally:
            parser.close()

    assert same(asyncio.run(parsed()), parse_json_object(heavy))
