"""Exact counting by the model's name (issue 24, item 1): where the name says which bundled tokenizer
a model uses, the default count is that tokenizer's, unless `COMPACT_TOKENIZER_BY_MODEL=false`."""

from __future__ import annotations

import pytest

from proxy.counting.by_model import tokenizer_for_model
from proxy.counting.tokenizers import load_text_counter
from proxy.planning.planner import Planner
from proxy.settings import Settings
from tests.support.kinds import text_of_kind


@pytest.mark.parametrize(
    ("model", "spec"),
    [
        ("qwen2.5:7b-instruct-q4_K_M", "qwen2.5"),
        ("Qwen/Qwen2.5-7B-Instruct", "qwen2.5"),
        ("qwen3:8b", "qwen2.5"),
        ("qwq:32b", "qwen2.5"),
        ("qwen3.5-35b-a3b", "qwen3.5"),
        ("gpt-4o-2024-08-06", "o200k_base"),
        ("gpt-4.1-mini", "o200k_base"),
        ("gpt-5", "o200k_base"),
        ("o3-mini", "o200k_base"),
        ("gpt-oss:20b", "o200k_base"),
        ("gpt-4-turbo", "cl100k_base"),
        ("gpt-3.5-turbo", "cl100k_base"),
        ("llama3.1:8b", "llama3"),
        ("meta-llama/Meta-Llama-3.1-8B-Instruct", "llama3"),
        ("Llama-3.2-3B-Instruct", "llama3"),
        ("llama2:7b", None),
        ("deepseek-r1:7b", None),
        ("mistral-small", None),
        ("claude-sonnet-4-5", None),
        ("omni", None),
    ],
)
def test_the_tokenizer_a_name_says(model: str, spec: str | None) -> None:
    assert tokenizer_for_model(model) == spec


def chinese_request(model: str) -> dict[str, object]:
    return {"model": model, "messages": [{"role": "user", "content": text_of_kind("Chinese", 5200)}]}


@pytest.mark.parametrize("spec", ["qwen2.5", "cl100k_base", "o200k_base", "llama3"])
async def test_a_named_model_is_counted_exactly_by_default(spec: str) -> None:
    try:
        count = load_text_counter(spec)
    except RuntimeError:
        pytest.skip(f"{spec} is not installed (the tokenizers extra)")
    model = {
        "qwen2.5": "qwen2.5:7b",
        "cl100k_base": "gpt-4",
        "o200k_base": "gpt-4o",
        "llama3": "llama3.1:8b",
    }[spec]
    planner = Planner(Settings(_env_file=None, window=8192, upstream_kind="openai"))
    body = chinese_request(model)
    plan = await planner.plan(body)
    assert plan.counted_by == spec
    text = body["messages"][0]["content"]  # type: ignore[index]
    assert plan.result.tokens_before >= count(text)
    off = Planner(Settings(_env_file=None, window=8192, upstream_kind="openai", tokenizer_by_model=False))
    assert (await off.plan(body)).counted_by == "heaviest", "as an unnamed model is"


async def test_an_unnamed_model_is_counted_with_the_four_vocabularies() -> None:
    """Near its line (Chinese: the byte bound proves nothing), by the heaviest of the four."""
    planner = Planner(Settings(_env_file=None, window=8192, upstream_kind="openai"))
    plan = await planner.plan(chinese_request("my-finetune"))
    assert plan.counted_by == "heaviest" and plan.guessed and plan.factor == 1.02  # the template's


async def test_an_exact_count_is_never_scaled_by_other_requests_reports() -> None:
    """A server that counts more than the bundled vocabulary (its chat template, a fine-tune's tokens)
    is covered by the template's margin, never by a factor learned from earlier requests: the same
    request gets the same plan whatever the server reported before (issue 34, row 5)."""
    planner = Planner(Settings(_env_file=None, window=8192, upstream_kind="openai"))
    body = chinese_request("qwen2.5:7b")
    first = await planner.plan(body)
    assert first.counted_by == "qwen2.5" and first.factor == 1.02  # the template's allowance
    planner.read_report(first, int(first.result.tokens_after * 1.3))
    planner.read_report(first, int(first.result.tokens_after * 0.85))
    again = await planner.plan(body)
    assert again.factor == first.factor and again.result == first.result
