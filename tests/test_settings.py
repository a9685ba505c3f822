from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from proxy.settings import Settings, describe_validation_error


def from_env(monkeypatch: pytest.MonkeyPatch, **env: str) -> Settings:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return Settings(_env_file=None)  # type: ignore[call-arg]


def test_defaults() -> None:
    s = Settings(_env_file=None)  # type: ignore[call-arg]
    assert s.upstream_url == "http://localhost:11434/v1"
    w = s.window_for("anything")
    assert (w.window, w.threshold, w.keep_recent_turns) == (8192, 0.8, 2)


def test_keep_recent_tool_results_default_env_and_per_model(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings(_env_file=None).window_for("m").keep_recent_tool_results == 3  # type: ignore[call-arg]
    s = from_env(
        monkeypatch,
        COMPACT_KEEP_RECENT_TOOL_RESULTS="5",
        COMPACT_MODELS='{"coder*": {"keep_recent_tool_results": 1}}',
    )
    assert s.window_for("other").keep_recent_tool_results == 5
    assert s.window_for("coder-7b").keep_recent_tool_results == 1
    with pytest.raises(ValidationError):
        from_env(monkeypatch, COMPACT_KEEP_RECENT_TOOL_RESULTS="-1")


def test_short_form_and_json_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    s = from_env(
        monkeypatch,
        COMPACT_WINDOW="4096",
        COMPACT_MODEL_WINDOWS="llama3.1:8b=8192, gpt-4o*=128000,qwen2.5*=32768",
        COMPACT_MODELS='{"qwen2.5:7b": {"threshold": 0.7}, "qwen2.5*": {"keep_recent_turns": 3}, "q*": {"window": 1}}',
    )
    assert s.window_for("llama3.1:8b").window == 8192
    assert s.window_for("gpt-4o-mini").window == 128000
    assert s.window_for("unknown").window == 4096
    exact = s.window_for("qwen2.5:7b")
    assert (exact.window, exact.threshold, exact.keep_recent_turns) == (4096, 0.7, 2)  # exact beats patterns
    longest = s.window_for("qwen2.5:14b")
    assert (longest.window, longest.keep_recent_turns) == (32768, 3)  # longer pattern beats "q*"
    assert s.window_for("qwq").window == 1


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("COMPACT_THRESHOLD", "1.5"),
        ("COMPACT_WINDOW", "lots"),
        ("COMPACT_KEEP_RECENT_TURNS", "0"),
        ("COMPACT_MODEL_WINDOWS", "llama3=big"),
        ("COMPACT_MODELS", '{"m": {"windw": 5}}'),
        ("COMPACT_UPSTREAM_URL", "localhost:11434"),
        ("COMPACT_OVERFLOW", "explode"),
    ],
)
def test_invalid_settings_name_the_variable(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> None:
    with pytest.raises(ValidationError) as error:
        from_env(monkeypatch, **{name: value})
    assert name in describe_validation_error(error.value)


def test_target_above_threshold_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValidationError):
        from_env(monkeypatch, COMPACT_THRESHOLD="0.5", COMPACT_TARGET="0.7")


def test_protected_tools_accept_commas(monkeypatch: pytest.MonkeyPatch) -> None:
    s = from_env(monkeypatch, COMPACT_PROTECTED_TOOLS="charge_card, payments.*")
    assert s.protected_tools == ("charge_card", "payments.*")


def test_dotenv_file_is_read(tmp_path: Path) -> None:
    env = tmp_path / ".env"
    env.write_text("COMPACT_WINDOW=2048\nCOMPACT_UPSTREAM_URL=http://vllm:8000/v1/\n")
    s = Settings(_env_file=env)  # type: ignore[call-arg]
    assert s.window == 2048 and s.upstream_url == "http://vllm:8000/v1"
