"""Texts of the kinds the default estimate undercounts most, for the never-over-the-window tests and
`benchmarks/counting/bench_margin.py`: Chinese, Japanese, source code, JSON, parse trees (tree-sitter-like
S-expressions and nested reprs: punctuation-dense tool output) and base64. Deterministic, built from
the corpus and seeded generators, tiled to any size."""

from __future__ import annotations

import ast
import base64
import functools
import inspect
import json
import random
import textwrap
from collections.abc import Callable
from typing import Any

from tests.support.corpus import CORPUS


def _sexp(node: ast.AST) -> str:
    kids = [_sexp(child) for child in ast.iter_child_nodes(node)]
    name = type(node).__name__.lower()
    return f"({name} {' '.join(kids)})" if kids else f"({name})"


def _nested(rnd: random.Random, depth: int) -> Any:
    if depth == 0:
        return rnd.choice([rnd.randint(0, 10**6), f"x{rnd.randint(0, 99)}", None, 3.5, True])
    shape = rnd.randrange(3)
    if shape == 0:
        return [_nested(rnd, depth - 1) for _ in range(3)]
    if shape == 1:
        return {f"k{i}": _nested(rnd, depth - 1) for i in range(3)}
    return (_nested(rnd, depth - 1), _nested(rnd, depth - 1))


def parse_tree(seed: int) -> str:
    """A parse-tree-like tool output: S-expressions of a stdlib module, then nested reprs."""
    rnd = random.Random(seed)
    source = inspect.getsource(textwrap)
    parts = [_sexp(ast.parse(source))[:20_000]]
    parts += [repr([_nested(rnd, 5) for _ in range(4)]) for _ in range(6)]
    return "\n".join(parts)


def base64_blob(seed: int) -> str:
    data = random.Random(seed).randbytes(30_000)
    return "\n".join(textwrap.wrap(base64.b64encode(data).decode(), 76))


KINDS: dict[str, Callable[[int], str]] = {
    "Chinese": lambda seed: "\n".join(CORPUS["Chinese prose"]),
    "Japanese": lambda seed: "\n".join(CORPUS["Japanese"]),
    "code": lambda seed: "\n".join(CORPUS["source code"]),
    "JSON": lambda seed: "\n".join(CORPUS["json tool output"]),
    "parse tree": parse_tree,
    "base64": base64_blob,
}


@functools.cache  # a parse tree takes tens of milliseconds to build, and the tests ask for it often
def _text(kind: str, seed: int) -> str:
    return KINDS[kind](seed)


def text_of_kind(kind: str, chars: int, seed: int = 1) -> str:
    """`chars` characters of `kind`, the kind's text tiled from an offset the seed picks."""
    text = _text(kind, seed)
    start = random.Random(seed).randrange(len(text))
    tiled = text[start:] + "\n" + text
    while len(tiled) < chars:
        tiled += "\n" + text
    return tiled[:chars]


def json_text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)
