"""How a request is counted: the proxy's own counting modes, beside the exact tokenizers' specs.

`COMPACT_TOKENIZER` (and a model's `tokenizer`) names either one of these modes or an exact
tokenizer (`qwen2.5`, `cl100k_base`, `hf:/path/to/tokenizer.json`: `proxy.counting.tokenizers`).
A `Counting` is a `str`, so a value read from the settings compares equal to its member.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["HEAVIEST_OF", "OWN_MODES", "Counting", "estimated"]


class Counting(StrEnum):
    """The proxy's own ways of counting (any other counter spec names an exact tokenizer)."""

    # The default rule: the upstream's own `/tokenize` where it has one, else the vocabulary the
    # model's name says, else the four bundled vocabularies (`HEAVIEST` compacts, the lightest refuses).
    AUTO = "auto"
    ESTIMATE = "estimate"  # the calibrated estimate, judged with its margin (`proxy.counting.margin`)
    CHARS4 = "chars4"  # the pattern's four characters a token
    UPSTREAM = "upstream"  # the upstream's own count (what a plan counted by the server says it was)
    # Exact: the most any of the four bundled vocabularies (`HEAVIEST_OF`) spends on each text.
    HEAVIEST = "heaviest"


# The modes that are no tokenizer of their own (their text counter is the estimate).
OWN_MODES = (Counting.AUTO, Counting.ESTIMATE, Counting.CHARS4, Counting.UPSTREAM)

# The vocabularies of the default install, which an unnamed model may use any of (and which
# `proxy.counting.margin`'s upper count is fitted to cover).
HEAVIEST_OF = ("cl100k_base", "o200k_base", "qwen2.5", "llama3")


def estimated(spec: str) -> bool:
    """Whether `spec` counts with an estimate scaled by the model's own calibration (an exact
    tokenizer's counts are never scaled)."""
    return spec in (Counting.ESTIMATE, Counting.CHARS4)
