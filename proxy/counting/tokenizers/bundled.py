"""The four vocabularies the default install counts with, from `quicktok` (PyPI `quicktok-v1`, a base
dependency): OpenAI's `cl100k_base` (GPT-4, GPT-3.5) and `o200k_base` (GPT-4o, 4.1, 5, o-series),
Meta's Llama 3 (3, 3.1, 3.2, 3.3 share it) and Qwen2.5's (Qwen2, 2.5 and 3 share it). Each is a file
inside the package (about 7 MB for the four), read once (0.1-1 s each), and counts with ids identical
to the reference implementations (tiktoken, Hugging Face `tokenizers`), 5-30x faster than they do.

Special-token text inside the counted string (`<|im_start|>` in a user's message) is counted as
ordinary text, so counting never raises on user content.
"""

from __future__ import annotations

from proxy.counting.tokenizers.base import Backend, TextCounter, import_package

# Our spec -> quicktok's encoding name.
ENCODINGS = {
    "cl100k_base": "cl100k_base",
    "o200k_base": "o200k_base",
    "llama3": "llama3",
    "qwen2.5": "qwen3",
    "qwen3": "qwen3",
}


def load(spec: str) -> TextCounter:
    quicktok = import_package("quicktok", "quicktok-v1", spec)
    encoding = quicktok.get_encoding(ENCODINGS[spec])  # cached by quicktok: one per vocabulary
    count: TextCounter = encoding.count  # `encode_ordinary`'s length, without the list of ids
    return count


BACKEND = Backend(specs=tuple(ENCODINGS), load=load, example="cl100k_base")
