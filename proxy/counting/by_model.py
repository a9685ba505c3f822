"""Which bundled tokenizer a model's name says it uses, if any.

Names come as clients and servers spell them: Ollama tags (`qwen2.5:7b-instruct-q4_K_M`), Hugging Face
ids (`Qwen/Qwen2.5-7B-Instruct`, `meta-llama/Meta-Llama-3.1-8B-Instruct`), GGUF file names, OpenAI's
names with dates (`gpt-4o-2024-08-06`). Only families whose vocabulary a bundled tokenizer is exactly
are named: a fine-tune keeps its base's vocabulary, a distillation into another family does not
(`deepseek-r1:7b` is a Qwen model with DeepSeek's tokenizer: not named).
"""

from __future__ import annotations

import re

__all__ = ["tokenizer_for_model"]

# (pattern on the lowercased name without its organisation, tokenizer spec); the first match wins.
_FAMILIES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"^(qwen3\.[5-9]|qwen3\.\d{2})"), "qwen3.5"),
    (re.compile(r"^(qwen(1\.5|2|2\.5|3)?\b|qwen(1\.5|2|2\.5|3)[-_:.]|qwq)"), "qwen2.5"),
    (re.compile(r"^(gpt-4o|gpt-4\.1|gpt-4\.5|gpt-5|chatgpt-4o|o[134](-|$)|gpt-oss)"), "o200k_base"),
    (re.compile(r"^(gpt-4|gpt-3\.5|gpt-35)"), "cl100k_base"),
    (re.compile(r"^(meta-)?llama[-_]?3"), "llama3"),
)


def tokenizer_for_model(model: str) -> str | None:
    """The tokenizer spec `model`'s name says it uses (`qwen2.5`, `o200k_base`, ...), else None."""
    name = model.strip().lower().rsplit("/", 1)[-1]
    for pattern, spec in _FAMILIES:
        if pattern.search(name):
            return spec
    return None
