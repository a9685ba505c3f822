"""How each agent CLI is pointed at the proxy without touching the user's own files.

Every CLI gets the same `Target` (the proxy's base URL, the model, the window to tell it or `None`)
and answers with a `Launch`: the command line and the environment variables to lay over the user's.
Files it needs (a settings file, a metadata file) are written into a temporary directory the caller
owns and removes; the user's `~/.codex/config.toml`, opencode config, Claude Code settings and
`.aider*` files are never written:

- Claude Code: environment only (`ANTHROPIC_BASE_URL`, the model variables, the switches that keep it
  off the network).
- Codex: `-c` overrides, which Codex applies in memory over `config.toml`: a `model_providers`
  table for the proxy, selected by `model_provider`; `CODEX_HOME` (auth, sessions) stays the user's.
- opencode: `OPENCODE_CONFIG_CONTENT`, which opencode merges last, over the user's config files.
- aider: its own flags (`--openai-api-base`, `--model openai/<m>`, `--model-metadata-file`).
- Gemini CLI: `GOOGLE_GEMINI_BASE_URL`, `GEMINI_API_KEY`, and `GEMINI_CLI_HOME`: a private mirror of
  the user's home whose one file of its own is the settings file, the user's settings with the
  API-key auth type on top (`proxy.run.gemini_home`).

With a proxy of its own (`Target.key`), a CLI gets that proxy's key, in the variable or setting it
takes its key from, and none of the user's: the user's key goes to the proxy, which sends it on.
A variable the user already set (a telemetry switch, a key for a running proxy) is otherwise kept.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from proxy.run import gemini_home

CLIS = ("claude", "codex", "opencode", "aider", "gemini")
# Said to the upstream where a CLI needs some key and the user has none: local servers ignore it,
# and COMPACT_UPSTREAM_API_KEY replaces it on the way out.
PLACEHOLDER_KEY = "compacting-proxy"
PROVIDER = "compacting-proxy"
# Without --model a CLI whose vendor's models the upstream lists keeps its own default model; any
# other gets the first model the upstream lists (a local server knows none of the vendors' names).
VENDOR_MODELS = {"claude": "claude", "codex": "gpt-", "gemini": "gemini"}
# Where each CLI finds the user's key for the upstream (the first one set): with a proxy of its own
# the CLI gets that proxy's key instead, and this one goes to the proxy (COMPACT_UPSTREAM_API_KEY).
UPSTREAM_KEYS = {
    "claude": ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN"),
    "codex": ("OPENAI_API_KEY",),
    "opencode": ("OPENAI_API_KEY",),
    "aider": ("OPENAI_API_KEY",),
    "gemini": ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
}
# The variable Codex and opencode read the proxy's key from (each names it in its provider).
PROXY_KEY_VARIABLE = "COMPACTING_PROXY_API_KEY"


def upstream_key(cli: str, environ: Mapping[str, str]) -> str | None:
    """The user's key for the upstream, as `cli` would have sent it, if any."""
    return next((environ[name] for name in UPSTREAM_KEYS.get(cli, ()) if environ.get(name)), None)


def default_model(cli: str, listed: list[str]) -> str | None:
    """The model for `cli` when the user names none: `None` keeps the CLI's own default."""
    vendor = VENDOR_MODELS.get(cli)
    if vendor is not None and (not listed or any(m.lower().startswith(vendor) for m in listed)):
        return None
    return listed[0] if listed else None


@dataclass(frozen=True, slots=True)
class Target:
    """Where and what the CLI should ask: the proxy's root URL (no `/v1`), the model name (or `None`
    for the CLI's own default), the window to tell the CLI (or `None` to tell it nothing), and the
    proxy's key (`None` for a proxy the user runs, which gets the user's own)."""

    proxy: str
    model: str | None = None
    window: int | None = None
    key: str | None = None


@dataclass(frozen=True, slots=True)
class Launch:
    """The command to run, the variables to set over the user's environment and those to take out
    of it, and what to do once the CLI has exited (before the scratch directory goes)."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    unset: tuple[str, ...] = ()
    finish: Callable[[], object] | None = None

    def environment(self, environ: Mapping[str, str]) -> dict[str, str]:
        """The CLI's environment: the user's, less `unset`, with `env` over it."""
        return {k: v for k, v in environ.items() if k not in self.unset} | self.env


def launch(cli: str, args: list[str], target: Target, scratch: Path, environ: Mapping[str, str]) -> Launch:
    """The launch of `cli` with the user's `args`, pointed at `target`. `scratch` is a private
    temporary directory for files the CLI must read; `environ` is the user's environment."""
    try:
        plan = PLANS[cli]
    except KeyError:
        raise ValueError(f"unknown CLI {cli!r}: one of {', '.join(CLIS)}") from None
    return plan(args, target, scratch, environ)


def _defaults(environ: Mapping[str, str], values: Mapping[str, str]) -> dict[str, str]:
    """`values` less those the user has set already."""
    return {k: v for k, v in values.items() if k not in environ}


def claude(args: list[str], target: Target, scratch: Path, environ: Mapping[str, str]) -> Launch:
    env = {"ANTHROPIC_BASE_URL": target.proxy}
    env |= _defaults(
        environ,
        {
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_ERROR_REPORTING": "1",
        },
    )
    # A bearer token, not ANTHROPIC_API_KEY: Claude Code asks once whether to use an API key from
    # the environment and writes the answer into ~/.claude.json.
    unset: tuple[str, ...] = ()
    if target.key:
        env["ANTHROPIC_AUTH_TOKEN"] = target.key
        unset = ("ANTHROPIC_API_KEY",)  # the user's key went to the proxy
    elif not environ.get("ANTHROPIC_API_KEY") and not environ.get("ANTHROPIC_AUTH_TOKEN"):
        env["ANTHROPIC_AUTH_TOKEN"] = PLACEHOLDER_KEY
    if target.model:
        # The background calls (titles, summaries of tool output) use the "haiku" model: the same
        # local model, or they would name a model the upstream does not have.
        for name in (
            "MODEL",
            "DEFAULT_OPUS_MODEL",
            "DEFAULT_SONNET_MODEL",
            "DEFAULT_HAIKU_MODEL",
            "SMALL_FAST_MODEL",
        ):
            env[f"ANTHROPIC_{name}"] = target.model
        # Claude Code knows the windows of its own models; it reads this for any other id only.
        if target.window and not target.model.lower().startswith("claude"):
            env["CLAUDE_CODE_MAX_CONTEXT_TOKENS"] = str(target.window)
    return Launch(["claude", *args], env, unset)


def _toml_string(value: str) -> str:
    return json.dumps(value)  # a JSON string is a valid TOML basic string


def codex(args: list[str], target: Target, scratch: Path, environ: Mapping[str, str]) -> Launch:
    provider = {
        "name": _toml_string(PROVIDER),
        "base_url": _toml_string(f"{target.proxy}/v1"),
        "wire_api": _toml_string("responses"),
    }
    env = {}
    if target.key:  # read from the environment: an override would show the key in `ps`
        provider["env_key"] = _toml_string(PROXY_KEY_VARIABLE)
        env[PROXY_KEY_VARIABLE] = target.key
    elif environ.get("OPENAI_API_KEY"):
        provider["env_key"] = _toml_string("OPENAI_API_KEY")
    table = "{" + ", ".join(f"{k} = {v}" for k, v in provider.items()) + "}"
    overrides = [
        f"model_providers.compacting_proxy={table}",
        'model_provider="compacting_proxy"',
        "check_for_update_on_startup=false",
        "analytics.enabled=false",
    ]
    if target.model:
        overrides.append(f"model={_toml_string(target.model)}")
    if target.window:
        overrides.append(f"model_context_window={target.window}")
    argv = ["codex"]
    for override in overrides:
        argv += ["-c", override]
    return Launch([*argv, *args], env)


def _output_limit(window: int) -> int:
    return min(4096, window // 4)


def opencode(args: list[str], target: Target, scratch: Path, environ: Mapping[str, str]) -> Launch:
    model = target.model or "default"
    entry: dict[str, Any] = {"name": model}
    if target.window:
        entry["limit"] = {"context": target.window, "output": _output_limit(target.window)}
    options: dict[str, Any] = {"baseURL": f"{target.proxy}/v1"}
    if target.key:
        options["apiKey"] = f"{{env:{PROXY_KEY_VARIABLE}}}"
    elif environ.get("OPENAI_API_KEY"):
        options["apiKey"] = "{env:OPENAI_API_KEY}"
    config = {
        "$schema": "https://opencode.ai/config.json",
        "provider": {
            PROVIDER: {
                "npm": "@ai-sdk/openai-compatible",
                "name": PROVIDER,
                "options": options,
                "models": {model: entry},
            }
        },
        "model": f"{PROVIDER}/{model}",
        "autoupdate": False,
        "share": "disabled",
    }
    env = {"OPENCODE_CONFIG_CONTENT": json.dumps(config)}
    if target.key:
        env[PROXY_KEY_VARIABLE] = target.key
    env |= _defaults(
        environ,
        {
            # Its own summary request carries the whole history in one user message, which no
            # compaction may cut: behind the proxy it only gets refused (README, Agent CLIs).
            "OPENCODE_DISABLE_AUTOCOMPACT": "1",
            "OPENCODE_DISABLE_AUTOUPDATE": "1",
            "OPENCODE_DISABLE_MODELS_FETCH": "1",
            "OPENCODE_DISABLE_SHARE": "1",
        },
    )
    return Launch(["opencode", *args], env)


def aider(args: list[str], target: Target, scratch: Path, environ: Mapping[str, str]) -> Launch:
    model = f"openai/{target.model or 'default'}"
    argv = [
        "aider",
        "--openai-api-base",
        f"{target.proxy}/v1",
        "--model",
        model,
        "--no-check-update",
        "--no-analytics",
        "--no-show-release-notes",
        "--no-show-model-warnings",
    ]
    # Always a metadata entry for the model: aider otherwise downloads LiteLLM's whole price list
    # (from GitHub, once a day) to look it up. The window goes in only when it is to be told.
    entry: dict[str, Any] = {
        "input_cost_per_token": 0,
        "output_cost_per_token": 0,
        "litellm_provider": "openai",
        "mode": "chat",
    }
    if target.window:
        output = _output_limit(target.window)
        entry |= {"max_input_tokens": target.window, "max_tokens": output, "max_output_tokens": output}
    metadata = scratch / "aider-model-metadata.json"
    metadata.write_text(json.dumps({model: entry}))
    argv += ["--model-metadata-file", str(metadata)]
    # LiteLLM (inside aider) fetches a model price list from GitHub at import unless told not to.
    env = _defaults(environ, {"LITELLM_LOCAL_MODEL_COST_MAP": "True"})
    if target.key:  # not --openai-api-key, which `ps` shows
        env["OPENAI_API_KEY"] = target.key
    elif not environ.get("OPENAI_API_KEY"):
        env["OPENAI_API_KEY"] = PLACEHOLDER_KEY
    return Launch([*argv, *args], env)


# Laid over the user's Gemini CLI settings: the auth type a base URL needs (FACTS.md: "Invalid auth
# method selected"), and no usage statistics, telemetry or update checks (no deprecated names).
GEMINI_SETTINGS = {
    "security": {"auth": {"selectedType": "gemini-api-key"}},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
    "general": {"enableAutoUpdate": False, "enableAutoUpdateNotification": False},
}


def gemini(args: list[str], target: Target, scratch: Path, environ: Mapping[str, str]) -> Launch:
    real_home = Path(environ.get("GEMINI_CLI_HOME") or environ.get("HOME") or Path.home())
    home = scratch / "gemini-home"
    home.mkdir()
    gemini_home.lay_out(real_home, home, GEMINI_SETTINGS)
    env = {"GOOGLE_GEMINI_BASE_URL": target.proxy, "GEMINI_CLI_HOME": str(home)}
    if target.key:
        env["GEMINI_API_KEY"] = target.key
    elif not environ.get("GEMINI_API_KEY"):
        env["GEMINI_API_KEY"] = PLACEHOLDER_KEY
    if target.model:
        env["GEMINI_MODEL"] = target.model
    return Launch(["gemini", *args], env, finish=lambda: gemini_home.bring_back(real_home, home))


PLANS: dict[str, Callable[[list[str], Target, Path, Mapping[str, str]], Launch]] = {
    "claude": claude,
    "codex": codex,
    "opencode": opencode,
    "aider": aider,
    "gemini": gemini,
}
