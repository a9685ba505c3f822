"""What `compacting-proxy run` gives the proxy it starts (proxy/run/launcher.py): a key of its own,
the CLI's upstream key unless one is configured (in the environment or the settings file), and for
Gemini CLI the model every bridged call goes to."""

from __future__ import annotations

from pathlib import Path

from proxy.run.launcher import RunOptions, proxy_environment


def test_the_proxy_gets_its_own_key_and_the_users_upstream_key(tmp_path: Path) -> None:
    options = RunOptions("claude", [], upstream="http://llm:8000/v1", env_file=str(tmp_path / "none.env"))
    env = proxy_environment(options, {"ANTHROPIC_API_KEY": "sk-ant-user", "COMPACT_API_KEYS": "theirs"}, "k1")
    assert env["COMPACT_API_KEYS"] == "k1", "only its CLI's key opens it"
    assert env["COMPACT_UPSTREAM_API_KEY"] == "sk-ant-user"
    assert env["COMPACT_UPSTREAM_URL"] == "http://llm:8000/v1"
    assert "COMPACT_GEMINI_MODEL" not in env


def test_an_upstream_key_the_user_configured_is_kept(tmp_path: Path) -> None:
    env_file = tmp_path / "proxy.env"
    env_file.write_text("COMPACT_UPSTREAM_API_KEY=from-the-file\n")
    options = RunOptions("codex", [], env_file=str(env_file))
    env = proxy_environment(options, {"OPENAI_API_KEY": "sk-user"}, "k")
    assert "COMPACT_UPSTREAM_API_KEY" not in env, "the file's key stands"
    env = proxy_environment(
        RunOptions("codex", []), {"OPENAI_API_KEY": "u", "COMPACT_UPSTREAM_API_KEY": "e"}, "k"
    )
    assert env["COMPACT_UPSTREAM_API_KEY"] == "e"


def test_gemini_cli_s_model_is_every_bridged_calls() -> None:
    env = proxy_environment(RunOptions("gemini", [], model="qwen3-coder"), {}, "k")
    assert env["COMPACT_GEMINI_MODEL"] == "qwen3-coder"
    assert "COMPACT_UPSTREAM_API_KEY" not in env, "no key of the user's: none sent on"
