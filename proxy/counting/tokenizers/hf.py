"""Any Hugging Face `tokenizer.json` on disk (`hf:/path/to/tokenizer.json`), with `tokenizers`."""

from __future__ import annotations

from pathlib import Path

from proxy.counting.tokenizers.base import Backend, TextCounter, import_package

PREFIX = "hf:"


def load(spec: str) -> TextCounter:
    path_text = spec.removeprefix(PREFIX)
    path = Path(path_text).expanduser()
    if not path_text or not path.is_file():
        raise ValueError(f"hf tokenizer file not found: {path_text!r} (expected hf:/path/to/tokenizer.json)")
    tokenizers = import_package("tokenizers", "tokenizers", spec)
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


BACKEND = Backend(specs=(), load=load, example="hf:/path/to/tokenizer.json", prefix=PREFIX)
