"""How `compacting-proxy run` points each CLI at the proxy (proxy/run/agents.py), as plain data: the
overrides Codex parses as TOML, the config opencode merges, the variables Claude Code and Gemini CLI
read, aider's flags; and that a user's own key or switch is never overwritten."""

from __future__ import annotations

import itertools
import json
import tomllib
from pathlib import Path

import pytest

from proxy.run.agents import (
    CLIS,
    PLACEHOLDER_KEY,
    PROXY_KEY_VARIABLE,
    Target,
    default_model,
    launch,
    upstream_key,
)

PROXY = "http://127.0.0.1:9999"


def codex_overrides(argv: list[str]) -> dict[str, object]:
    """Codex's `-c key=value` as Codex reads them: the value is TOML, the key a dotted path."""
    parsed: dict[str, object] = {}
    for flag, value in itertools.pairwise(argv):
        if flag == "-c":
            key, _, raw = value.partition("=")
            parsed[key] = tomllib.loads(f"v = {raw}")["v"]
    return parsed


def test_every_cli_runs_with_the_users_arguments_last(tmp_path: Path) -> None:
    for cli in CLIS:
        scratch = tmp_path / cli
        scratch.mkdir()
        plan = launch(cli, ["--flag", "a task"], Target(PROXY, "m", 32_000), scratch, {"HOME": str(tmp_path)})
        assert plan.argv[0] == cli
        assert plan.argv[-2:] == ["--flag", "a task"]


def test_claude_code_by_environment_only(tmp_path: Path) -> None:
    plan = launch("claude", [], Target(PROXY, "qwen3-coder", 32_000), tmp_path, {})
    assert plan.argv == ["claude"]
    assert plan.env["ANTHROPIC_BASE_URL"] == PROXY
    assert plan.env["ANTHROPIC_AUTH_TOKEN"] == PLACEHOLDER_KEY
    assert plan.env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1"
    assert plan.env["DISABLE_TELEMETRY"] == plan.env["DISABLE_AUTOUPDATER"] == "1"
    assert plan.env["ANTHROPIC_MODEL"] == plan.env["ANTHROPIC_DEFAULT_HAIKU_MODEL"] == "qwen3-coder"
    assert plan.env["CLAUDE_CODE_MAX_CONTEXT_TOKENS"] == "32000"
    assert list(tmp_path.iterdir()) == []


def test_claude_code_keeps_the_users_key_and_its_own_windows(tmp_path: Path) -> None:
    user = {"ANTHROPIC_API_KEY": "sk-ant-user", "DISABLE_TELEMETRY": "0"}
    plan = launch("claude", [], Target(PROXY, "claude-sonnet-4-5", 32_000), tmp_path, user)
    assert "ANTHROPIC_AUTH_TOKEN" not in plan.env and "ANTHROPIC_API_KEY" not in plan.env
    assert "DISABLE_TELEMETRY" not in plan.env
    assert "CLAUDE_CODE_MAX_CONTEXT_TOKENS" not in plan.env, "Claude Code knows its own models' windows"
    assert "ANTHROPIC_MODEL" not in launch("claude", [], Target(PROXY), tmp_path, {}).env


def test_codex_by_overrides_it_parses_as_toml(tmp_path: Path) -> None:
    plan = launch("codex", ["exec", "task"], Target(PROXY, "qwen3", 32_000), tmp_path, {})
    assert plan.env == {}, "CODEX_HOME (auth, sessions) stays the user's"
    overrides = codex_overrides(plan.argv)
    assert overrides["model_provider"] == "compacting_proxy"
    assert overrides["model_providers.compacting_proxy"] == {
        "name": "compacting-proxy",
        "base_url": f"{PROXY}/v1",
        "wire_api": "responses",
    }
    assert overrides["model"] == "qwen3"
    assert overrides["model_context_window"] == 32_000
    assert overrides["check_for_update_on_startup"] is False
    assert overrides["analytics.enabled"] is False


def test_codex_uses_the_users_openai_key_and_tells_no_window_when_not_asked(tmp_path: Path) -> None:
    plan = launch("codex", [], Target(PROXY), tmp_path, {"OPENAI_API_KEY": "sk-user"})
    overrides = codex_overrides(plan.argv)
    assert overrides["model_providers.compacting_proxy"]["env_key"] == "OPENAI_API_KEY"  # type: ignore[index]
    assert "model" not in overrides and "model_context_window" not in overrides


def test_opencode_by_config_content(tmp_path: Path) -> None:
    plan = launch("opencode", ["run", "task"], Target(PROXY, "qwen3", 32_000), tmp_path, {})
    config = json.loads(plan.env["OPENCODE_CONFIG_CONTENT"])
    provider = config["provider"]["compacting-proxy"]
    assert provider["npm"] == "@ai-sdk/openai-compatible"
    assert provider["options"]["baseURL"] == f"{PROXY}/v1"
    assert provider["models"]["qwen3"]["limit"] == {"context": 32_000, "output": 4096}
    assert config["model"] == "compacting-proxy/qwen3"
    assert config["autoupdate"] is False
    assert plan.env["OPENCODE_DISABLE_AUTOCOMPACT"] == "1"
    assert plan.env["OPENCODE_DISABLE_AUTOUPDATE"] == "1"
    assert "OPENCODE_CONFIG" not in plan.env, "the user's own config file is still read"
    untold = json.loads(
        launch("opencode", [], Target(PROXY, "qwen3"), tmp_path, {}).env["OPENCODE_CONFIG_CONTENT"]
    )
    assert "limit" not in untold["provider"]["compacting-proxy"]["models"]["qwen3"]


def test_aider_by_its_flags(tmp_path: Path) -> None:
    plan = launch("aider", ["--yes"], Target(PROXY, "qwen3", 16_000), tmp_path, {})
    argv = plan.argv
    assert argv[argv.index("--openai-api-base") + 1] == f"{PROXY}/v1"
    assert argv[argv.index("--model") + 1] == "openai/qwen3"
    assert {"--no-check-update", "--no-analytics"} <= set(argv)
    metadata = json.loads(Path(argv[argv.index("--model-metadata-file") + 1]).read_text())
    assert metadata["openai/qwen3"]["max_input_tokens"] == 16_000
    assert plan.env == {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "OPENAI_API_KEY": PLACEHOLDER_KEY}
    untold = launch("aider", [], Target(PROXY, "q"), tmp_path, {}).argv
    entry = json.loads(Path(untold[untold.index("--model-metadata-file") + 1]).read_text())["openai/q"]
    assert "max_input_tokens" not in entry, "an entry all the same: aider then fetches no price list"


def lay_out_gemini_user(home: Path) -> dict[Path, bytes]:
    """A user who has run Gemini CLI before: settings with a comment, a session, an env file."""
    gemini = home / ".gemini"
    (gemini / "tmp" / "proj" / "chats").mkdir(parents=True)
    (gemini / "settings.json").write_text(
        '// mine\n{"ui": {"theme": "GitHub"}, "security": {"auth": {"selectedType": "oauth-personal"}},'
        ' "mcpServers": {"s": {"command": "https://x//y"}}}\n'
    )
    (gemini / "projects.json").write_text('{"projects": {}}\n')
    (gemini / "tmp" / "proj" / "chats" / "old.jsonl").write_text("{}\n")
    (home / ".env").write_text("FOO=1\n")
    return {p: p.read_bytes() for p in home.rglob("*") if p.is_file()}


def test_gemini_by_a_private_home_with_the_users_settings_under_runs(tmp_path: Path) -> None:
    home = tmp_path / "home"
    before = lay_out_gemini_user(home)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    environ = {"HOME": str(home), "GEMINI_API_KEY": "user-key"}
    plan = launch("gemini", [], Target(PROXY, "gemini-2.5-flash"), scratch, environ)
    assert plan.env["GOOGLE_GEMINI_BASE_URL"] == PROXY
    assert "GEMINI_API_KEY" not in plan.env, "a running proxy of the user's gets the user's key"
    assert plan.env["GEMINI_MODEL"] == "gemini-2.5-flash"
    assert "GEMINI_CLI_SYSTEM_SETTINGS_PATH" not in plan.env, "a user's file there is skipped"
    own = Path(plan.env["GEMINI_CLI_HOME"])
    assert own.parent == scratch and own.stat().st_mode & 0o777 == 0o700
    settings = json.loads((own / ".gemini" / "settings.json").read_text())
    assert settings["security"] == {"auth": {"selectedType": "gemini-api-key"}}
    assert settings["ui"] == {"theme": "GitHub"} and settings["mcpServers"]["s"]["command"] == "https://x//y"
    assert settings["general"] == {"enableAutoUpdate": False, "enableAutoUpdateNotification": False}
    assert settings["privacy"] == {"usageStatisticsEnabled": False}
    assert (own / ".gemini" / "projects.json").resolve() == home / ".gemini" / "projects.json"
    assert (own / ".env").resolve() == home / ".env", "the rest of the home as it is"
    assert {p: p.read_bytes() for p in home.rglob("*") if p.is_file()} == before


def test_what_gemini_cli_makes_in_its_home_lands_in_the_users(tmp_path: Path) -> None:
    home = tmp_path / "home"
    before = lay_out_gemini_user(home)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    plan = launch("gemini", [], Target(PROXY, key="k"), scratch, {"HOME": str(home)})
    own = Path(plan.env["GEMINI_CLI_HOME"]) / ".gemini"
    (own / "tmp" / "proj" / "chats" / "new.jsonl").write_text("{}\n")  # through the link
    (own / "history").mkdir()  # a new folder
    (own / "history" / "h").write_text("ls\n")
    (own / "projects.json").unlink()  # a file written by rename
    (own / "projects.json").write_text('{"projects": {"a": 1}}\n')
    (own / "settings.json").write_text("{}")  # its settings: run's, not kept
    assert plan.finish is not None
    plan.finish()
    gemini = home / ".gemini"
    assert (gemini / "tmp" / "proj" / "chats" / "new.jsonl").exists()
    assert (gemini / "history" / "h").read_text() == "ls\n"
    assert json.loads((gemini / "projects.json").read_text()) == {"projects": {"a": 1}}
    assert (gemini / "settings.json").read_bytes() == before[gemini / "settings.json"]
    assert plan.env["GEMINI_API_KEY"] == "k"


def test_with_a_proxy_of_its_own_each_cli_gets_its_key_and_none_of_the_users(tmp_path: Path) -> None:
    user = {"HOME": str(tmp_path), "ANTHROPIC_API_KEY": "sk-ant-user", "OPENAI_API_KEY": "sk-user"}
    target = Target(PROXY, "m", key="run-key")
    claude = launch("claude", [], target, tmp_path, user)
    assert claude.environment(user)["ANTHROPIC_AUTH_TOKEN"] == "run-key"
    assert "ANTHROPIC_API_KEY" not in claude.environment(user)
    codex = launch("codex", [], target, tmp_path, user)
    provider = codex_overrides(codex.argv)["model_providers.compacting_proxy"]
    assert provider["env_key"] == PROXY_KEY_VARIABLE  # type: ignore[index]
    assert codex.env[PROXY_KEY_VARIABLE] == "run-key"
    assert "run-key" not in " ".join(codex.argv), "not on a command line `ps` shows"
    opencode = launch("opencode", [], target, tmp_path, user)
    options = json.loads(opencode.env["OPENCODE_CONFIG_CONTENT"])["provider"]["compacting-proxy"]["options"]
    assert options["apiKey"] == "{env:COMPACTING_PROXY_API_KEY}"
    assert opencode.env[PROXY_KEY_VARIABLE] == "run-key"
    aider = launch("aider", [], target, tmp_path, user)
    assert aider.env["OPENAI_API_KEY"] == "run-key" and "run-key" not in " ".join(aider.argv)
    assert upstream_key("claude", user) == "sk-ant-user"
    assert upstream_key("gemini", user) is None


def test_an_unknown_cli_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown CLI"):
        launch("cursor", [], Target(PROXY), tmp_path, {})


def test_without_a_model_a_cli_asks_for_what_the_upstream_has() -> None:
    local = ["qwen3-coder:30b", "llama3.1:8b"]
    assert [default_model(cli, local) for cli in CLIS] == ["qwen3-coder:30b"] * len(CLIS)
    assert default_model("claude", ["claude-sonnet-4-5", "claude-haiku-4-5"]) is None, "its own default"
    assert default_model("codex", ["gpt-5.5", "o3"]) is None
    assert default_model("gemini", ["gemini-2.5-pro"]) is None
    assert default_model("opencode", ["gpt-5.5"]) == "gpt-5.5"
    assert default_model("claude", []) is None, "nothing listed: the CLI's own default"
    assert default_model("aider", []) is None
