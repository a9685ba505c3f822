"""How a request is counted: the proxy's own counting modes, beside the exact tokenizers' specs.

`COMPACT_TOKENIZER` (and a model's `tokenizer`) names either one of these modes or an exact
tokenizer (`qwen2.5`, `cl100k_base`, `hf:/path/to/tokenizer.json`: `proxy.counting.tokenizers`).
A `Counting` is a `str`, so a value read from the settings compares equal to its member.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["HEAVIEST_OF", "Counting", "estimated"]


class Counting(StrEnum):
    """The proxy's own ways of counting (any other counter spec names an exact tokenizer)."""

    ESTIMATE = "estimate"  # the calibrated estimate, judged with its margin (`proxy.counting.margin`)
    CHARS4 = "chars4"  # the pattern's four characters a token
    UPSTREAM = "upstream"  # the estimate, counted again by the upstream's `/tokenize` near the line
    # Exact: the most any of the vocabularies the estimate's margin is fitted on spends on each text
    # (`HEAVIEST_OF`, all installed: the `tokenizers` extra). What the margin bounds, counted.
    HEAVIEST = "heaviest"


# The vocabularies `proxy.counting.margin`'s upper count is fitted to cover (an unnamed model may
# use any of them).
HEAVIEST_OF = ("cl100k_base", "o200k_base", "qwen2.5", "llama3")


def estimated(spec: str) -> bool:
    """Whether `spec` counts with an estimate scaled by the model's own calibration (not an exact
    tokenizer's, whose counts are calibrated apart: `proxy.upstream.prompt_reports.exact_key`)."""
    return spec in (Counting.ESTIMATE, Counting.CHARS4)
