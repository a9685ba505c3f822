"""A huge request body parsed without freezing the other clients: read in a child process, handed
back in pieces, each piece parsed here in a worker thread.

orjson parses a body in one C call that holds the GIL throughout, in a worker thread too: a 15 MB
body of 200,000 items is 80-150 ms here in which the event loop answers nobody (`/healthz`
included). So a body whose parse would take longer than about `SPLIT_FROM` is sent to a child
process (spawned, a small pool), which parses it with `parse_json_object` (the same checks and the
same exactness: numbers beyond a double or 64 bits kept as their text, lone surrogates) and writes
each large container back as runs of its items, each run at most `PIECE_BYTES` of JSON. The main
process never unpickles a large structure: it receives a few hundred byte strings and parses them
one by one in a worker thread, each parse short enough for the loop to get the GIL in between.

The result is the value `parse_json_object(raw)` gives (`tests/bodies/test_split_parse.py`): a value
written by `dump_json` and read back is the same value, exact numbers and lone surrogates included.
The bytes the client sent are not touched (they are forwarded as they came when nothing is
compacted). When the pool cannot run (it broke, or no process can be started), the body is parsed
whole in a worker thread as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import multiprocessing
import os
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import forkserver
from typing import Any

import orjson

from proxy.bodies import body_files
from proxy.bodies.jsonbody import (
    MAX_JSON_DEPTH,
    _exact_float,
    _exact_int,
    _no_constants,
    _scan,
    dump_json,
    parse_json_object,
)
from proxy.bodies.offload import Offloader
from proxy.errors import ProxyError

PIECE_BYTES = 64 * 1024  # of JSON a piece holds, ~0.5 ms to parse at the densest seen here
SPLIT_FROM = 8_000_000  # weighed bytes (`weight`): about 15 ms of orjson's parse here
SPLIT_MIN_BYTES = 1024 * 1024  # smaller bodies are never weighed: under ~10 ms to parse
QUOTE_WEIGHT = 25  # a string costs orjson about 25 bytes' worth of parsing (50 ns against 2)
MAX_SPLIT_DEPTH = 16  # deeper large containers are sent whole (each level is dumped once more)
WORKERS = 2
COUNT_SLICE = 1024 * 1024
_KEPT: list[Any] = []  # in a child: the body it parsed, never freed (it exits after one body)

# A piece: JSON bytes of a whole value, or a large container as its parts in order. A list's part
# is ("items", bytes of a JSON array whose items extend it) or ("item", piece); a dict's part is
# ("keys", bytes of a JSON object whose keys update it) or ("key", name, piece).
Piece = bytes | tuple[str, list[tuple[Any, ...]]]


def weight(raw: bytes) -> int:
    """What parsing `raw` costs, in bytes of plain text: each string costs much more than its bytes.
    Counted a slice at a time, so another thread gets the GIL in between."""
    quotes = sum(raw.count(b'"', start, start + COUNT_SLICE) for start in range(0, len(raw), COUNT_SLICE))
    return len(raw) + QUOTE_WEIGHT * quotes // 2


# --- in the child process ------------------------------------------------------------------------


def split(raw: bytes, keep: list[Any] | None = None) -> tuple[Any, ...]:
    """("ok", exact, piece) for a body, or ("error", status, message, code) when it is refused.
    `exact` says the body took `parse_json_object`'s exact reading (the standard library's), so
    must each piece: the same steps as it, so the same value and the same refusals. The parsed
    body is appended to `keep`, if given (see `split_file`)."""
    try:
        plain = orjson.loads(raw)
        depth, exact = _scan(plain)
    except orjson.JSONDecodeError:
        exact = True
    try:
        if exact or not isinstance(plain, dict) or depth > MAX_JSON_DEPTH:
            plain = parse_json_object(raw)  # read exactly, or refused in its words
    except ProxyError as error:
        return ("error", error.status, error.message, error.code)
    if keep is not None:
        keep.append(plain)
    return ("ok", exact, _pieces(plain, 0))


def _pieces(value: Any, depth: int) -> Piece:
    if depth >= MAX_SPLIT_DEPTH:
        return dump_json(value)
    parts: list[tuple[Any, ...]] = []
    run: list[bytes] = []
    size = 0
    if isinstance(value, list):
        # Runs of items dumped at once (one call per run, not per item), the run's length halved
        # while its JSON is over a piece and doubled while it is under half of one.
        start, step = 0, 64
        while start < len(value):
            data = dump_json(value[start : start + step])
            if len(data) > PIECE_BYTES and step > 1:
                step //= 2
                continue
            item = value[start]
            if len(data) > PIECE_BYTES and isinstance(item, dict | list):
                parts.append(("item", _pieces(item, depth + 1)))
            else:
                parts.append(("items", data))
            start += step
            if len(data) < PIECE_BYTES // 2:
                step *= 2
        return ("list", parts)
    for key, item in value.items():
        data = dump_json(item)
        if len(data) > PIECE_BYTES and isinstance(item, dict | list):
            _flush(parts, run, "keys")
            run, size = [], 0
            parts.append(("key", key, _pieces(item, depth + 1)))
            continue
        run.append(dump_json(key) + b":" + data)
        size += len(run[-1]) + 1
        if size >= PIECE_BYTES:
            _flush(parts, run, "keys")
            run, size = [], 0
    _flush(parts, run, "keys")
    return ("dict", parts)


def _flush(parts: list[tuple[Any, ...]], run: list[bytes], kind: str) -> None:
    if run:
        open_, close = (b"[", b"]") if kind == "items" else (b"{", b"}")
        parts.append((kind, open_ + b",".join(run) + close))


# --- in this process -------------------------------------------------------------------------------


def assemble(piece: Any, exact: bool, data: bytes = b"") -> Any:
    """The value `piece` stands for, each of its byte strings parsed on its own (a worker thread
    running this gives the GIL away between them). A byte string is itself, or where it lies in
    `data`: (start, end)."""
    if isinstance(piece, bytes) or isinstance(piece[0], int):
        return _loads(piece, exact, data)
    kind, parts = piece
    if kind == "list":
        items: list[Any] = []
        for part in parts:
            if part[0] == "items":
                items.extend(_loads(part[1], exact, data))
            else:
                items.append(assemble(part[1], exact, data))
        return items
    mapping: dict[str, Any] = {}
    for part in parts:
        if part[0] == "keys":
            mapping.update(_loads(part[1], exact, data))
        else:
            mapping[part[1]] = assemble(part[2], exact, data)
    return mapping


def _loads(leaf: bytes | tuple[int, int], exact: bool, data: bytes) -> Any:
    text = leaf if isinstance(leaf, bytes) else memoryview(data)[leaf[0] : leaf[1]]
    if not exact:
        return orjson.loads(text)
    return json.loads(
        bytes(text).decode("utf-8"),
        parse_float=_exact_float,
        parse_int=_exact_int,
        parse_constant=_no_constants,
    )


# --- the files between the two (`body_files.py`): a body of 15 MB pickled is one C call of 20 ms


def in_child(path: str) -> tuple[Any, ...]:
    """`split_file` as a child runs it: the child serves this one body and exits without freeing
    it, so the collector is off and the parsed body is kept (a million objects cost 0.3 s to
    collect and as much to free, before the answer went back)."""
    gc.disable()
    body_files.serving(path)
    return split_file(path, _KEPT)


def split_file(path: str, keep: list[Any] | None = None) -> tuple[Any, ...]:
    """`split` of the body in the file at `path` (removed once read), its pieces' bytes written
    beside it (`body_files.write_out`) and each piece's place in them returned in their stead."""
    raw = body_files.read(path)
    with contextlib.suppress(OSError):
        os.unlink(path)
    done = split(raw, keep)
    del raw
    if done[0] != "ok":
        return done
    out = bytearray()
    located = _located(done[2], out)
    body_files.write_out(path, out)
    return ("ok", done[1], located)


def _located(piece: Piece, out: bytearray) -> Any:
    if isinstance(piece, bytes):
        start = len(out)
        out += piece
        return (start, len(out))
    kind, parts = piece
    located: list[tuple[Any, ...]] = []
    for part in parts:
        if part[0] in ("items", "keys", "item"):
            located.append((part[0], _located(part[1], out)))
        else:
            located.append((part[0], part[1], _located(part[2], out)))
    return (kind, located)


class SplitParser:
    """The child processes of one proxy process, started at the first huge body."""

    def __init__(self) -> None:
        self._pool: ProcessPoolExecutor | None = None
        self._context = multiprocessing.get_context("forkserver")
        self._context.set_forkserver_preload([__name__])

    def start(self) -> None:
        """Start the fork server now, while this process is small (the server's startup). Children
        are forked from it, never from this process: forking a process of hundreds of MB holds the
        GIL for 50-70 ms here (its page tables copied), and a fork of a process running threads
        and an event loop is unsafe; a fork of the small server is cheap, so each child serves one
        body and its memory is given back."""
        body_files.sweep()
        forkserver.ensure_running()

    def _executor(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(
                WORKERS,
                mp_context=self._context,
                max_tasks_per_child=1,
                initializer=body_files.tether,
                initargs=(os.getpid(),),
            )
        return self._pool

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    async def parse(self, raw: bytes, offloader: Offloader) -> dict[str, Any]:
        """`parse_json_object(raw)`, the event loop kept responsive however large the body."""
        if len(raw) < SPLIT_MIN_BYTES or await offloader.run(weight, raw) < SPLIT_FROM:
            return await offloader.run(parse_json_object, raw)
        path, child = "", None
        try:
            path = await offloader.run(body_files.write, raw)
            # Submitted from a worker thread: a submit may start a child, a round trip to the fork
            # server that held the loop for 100-400 ms.
            child = await offloader.run(self._executor().submit, in_child, path)
            done = await asyncio.wrap_future(child)
            if done[0] == "error":
                _, status, message, code = done
                raise ProxyError(status, message, code=code)
            data = await offloader.run(body_files.read, path + body_files.OUT)
        except (BrokenProcessPool, RuntimeError):
            self.close()  # started again for the next body
            return await offloader.run(parse_json_object, raw)
        except OSError:  # no room for the files (a full /dev/shm): parsed whole, as a smaller body
            return await offloader.run(parse_json_object, raw)
        finally:
            _remove_when_done(path, child)
        _, exact, piece = done
        body: dict[str, Any] = await offloader.run(assemble, piece, exact, data)
        return body


def _remove_when_done(path: str, child: Future[Any] | None) -> None:
    """The body's files removed now, or once the child is done with them (the request was given
    up while it worked: it would write its pieces after they were removed)."""
    if child is not None and not child.done():
        child.add_done_callback(lambda _: body_files.remove(path))
    elif path:
        body_files.remove(path)


SPLIT_PARSER = SplitParser()  # one pool per process
