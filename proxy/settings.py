"""The proxy's one configuration object, read from `COMPACT_*` environment variables or a `.env` file.

Per-model overrides come from two variables that are merged: `COMPACT_MODELS` (JSON, any knob) and
`COMPACT_MODEL_WINDOWS` (the short form for the common case, `"llama3.1:8b=8192,gpt-4o*=128000"`).
Keys are model names or glob patterns; an exact name beats a pattern, a longer pattern a shorter one.
"""

from __future__ import annotations

import fnmatch
import urllib.parse
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PositiveInt,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from proxy.counting.modes import Counting
from proxy.counting.tokenizers import is_known, known_specs

ENV_PREFIX = "COMPACT_"


# Counters of the proxy's own; the exact ones are the backends of `proxy.counting.tokenizers`.
OWN_COUNTERS = tuple(Counting)


def check_tokenizer(value: str) -> str:
    if value in OWN_COUNTERS or is_known(value):
        return value
    raise ValueError(f"must be one of {', '.join((*OWN_COUNTERS, *known_specs()))}")


class ModelOverride(BaseModel):
    """Knobs one model (or one glob of models) sets differently from the defaults."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    window: PositiveInt | Literal["auto"] | None = None
    tokenizer: str | None = None
    threshold: float | None = Field(default=None, gt=0, le=1)
    target: float | None = Field(default=None, gt=0, le=1)
    keep_recent_turns: int | None = Field(default=None, ge=1)
    keep_recent_tool_results: int | None = Field(default=None, ge=0)
    reply_reserve: int | None = Field(default=None, ge=0)

    @field_validator("tokenizer")
    @classmethod
    def _check_tokenizer(cls, value: str | None) -> str | None:
        return None if value is None else check_tokenizer(value)


@dataclass(frozen=True, slots=True)
class ModelWindow:
    """The resolved knobs for one model: its window, its line and what compaction aims for.
    With `auto`, `window` is the fallback until the upstream has said how big the window is."""

    window: int
    threshold: float
    target: float
    keep_recent_turns: int
    reply_reserve: int
    tokenizer: str = Counting.AUTO
    keep_recent_tool_results: int = 3
    auto: bool = False
    requested: int | None = None  # the window the request set itself (Ollama's `num_ctx`)
    stops_at_end: bool = False  # the server ends a reply at the window's end (llama.cpp, Ollama)


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, env_file=".env", env_file_encoding="utf-8", extra="ignore", frozen=True
    )

    upstream_url: str = "http://localhost:11434/v1"
    upstream_api_key: SecretStr | None = None

    upstream_kind: Literal["auto", "ollama", "openai", "anthropic"] = "auto"
    ollama_num_ctx: bool = True
    ollama_max_num_ctx: int = Field(default=32768, gt=0)
    # Gemini API requests: to a Gemini-speaking upstream as they are, or bridged to its Chat
    # Completions; `auto`: native for Google's generativelanguage API, else the bridge.
    gemini_upstream: Literal["auto", "native", "chat"] = "auto"
    # The model every bridged Gemini API request asks the upstream for, whatever its path names
    # (Gemini CLI's own side calls name Google's models); unset: the path's.
    gemini_model: str | None = None

    window: PositiveInt | Literal["auto"] = "auto"
    fallback_window: int = Field(default=8192, gt=0)
    window_refresh: float = Field(default=600.0, gt=0)
    # `/readyz` fails while the upstream does not answer; off: ready once started (replicas behind a
    # load balancer that should keep answering in the client's protocol while a shared upstream is down).
    ready_needs_upstream: bool = True
    # How a request near its line is counted: `auto`, the upstream's `/tokenize` where it has one,
    # else the vocabulary the model's name says, else the four bundled ones (`proxy.planning`).
    tokenizer: str = Counting.AUTO
    # With `auto`: count with the vocabulary a model's name says (Qwen, GPT, Llama 3), where it has one.
    tokenizer_by_model: bool = True
    exact_count_from: float = Field(default=0.5, ge=0)
    calibrate: bool = True
    clamp_max_tokens: bool | Literal["auto"] = "auto"
    threshold: float = Field(default=0.8, gt=0, le=1)
    target: float = Field(default=0.6, gt=0, le=1)
    # Once old exchanges must go, they go down to this share of the target, not just to the target:
    # the next turns then append to an unchanged prefix (the server's prompt cache) for longer.
    drop_to: float = Field(default=0.8, gt=0, le=1)
    # Inside an agent loop, notes must leave room for this many more calls like the last one, or the
    # older exchanges are dropped at once (0: only when the line needs it). Fewer breaks of the
    # server's prompt cache, less history (BENCHMARKS.md, "a loop that cuts in large steps").
    loop_room_calls: float = Field(default=0.0, ge=0)
    keep_recent_turns: int = Field(default=2, ge=1)
    keep_recent_tool_results: int = Field(default=3, ge=0)
    reply_reserve: int = Field(default=1024, ge=0)
    models: dict[str, ModelOverride] = Field(default_factory=dict)
    model_windows: Annotated[dict[str, int], NoDecode] = Field(default_factory=dict)
    overflow: Literal["forward", "reject"] = "forward"
    # Whether the upstream answers a prompt over its window with an error, never cutting it silently:
    # what only the pessimistic count puts over the window then goes for its verdict. `auto`: the
    # APIs of OpenAI (and Azure OpenAI) and Anthropic.
    upstream_rejects_overflow: bool | Literal["auto"] = "auto"
    remote_compaction: Literal["auto", "proxy", "upstream"] = "auto"
    compaction_key: SecretStr | None = None

    protected_tools: Annotated[tuple[str, ...], NoDecode] = ()
    preview_chars: int = Field(default=150, ge=0)
    image_tokens: int = Field(default=768, ge=0)

    summarize: bool = False
    summary_model: str | None = None
    summary_url: str | None = None
    summary_api_key: SecretStr | None = None
    summary_tokens: int = Field(default=512, ge=16)
    summary_timeout: float = Field(default=30.0, gt=0)
    cache_url: str | None = None
    cache_size: int = Field(default=1024, ge=1)
    cache_ttl: int = Field(default=7 * 24 * 3600, ge=1)
    memo_bytes: int = Field(default=64 * 1024 * 1024, ge=0)  # each in-process memo's bound

    # The gateway contract (`proxy.gateway`): originals of what `/v1/compress` cut, kept for
    # `/v1/retrieve/{hash}` (off: it keeps content) for this long and up to these bytes; audit mode
    # forwards requests untouched and reports what compaction would have cut.
    retrieve: bool = False
    retrieve_ttl: int = Field(default=1800, ge=1)
    retrieve_bytes: int = Field(default=64 * 1024 * 1024, ge=0)
    audit: bool = False

    api_keys: Annotated[tuple[SecretStr, ...], NoDecode] = ()
    admin_keys: Annotated[tuple[SecretStr, ...], NoDecode] = ()  # of api_keys: see every page's data
    log_format: Literal["text", "json"] = "text"
    log_bodies: bool = False
    # The live page `GET /ui`: on or off, message previews, and how much it keeps (in memory).
    ui: bool = True
    ui_content: bool = False
    ui_conversations: int = Field(default=20, ge=1)
    ui_requests: int = Field(default=200, ge=1)
    ui_streams: int = Field(default=32, ge=1)  # pages watching at once (event streams), per worker
    max_messages: int = Field(default=50_000, ge=1)

    connect_timeout: float = Field(default=10.0, gt=0)
    read_timeout: float = Field(default=600.0, gt=0)
    write_timeout: float = Field(default=60.0, gt=0)
    pool_timeout: float = Field(default=30.0, gt=0)
    max_connections: int = Field(default=512, ge=1)
    # Seconds an idle pooled upstream connection is kept for reuse (closed within about twice this).
    upstream_keep_alive: float = Field(default=30.0, gt=0)
    max_body_bytes: int = Field(default=32 * 1024 * 1024, gt=0)
    max_header_bytes: int = Field(default=64 * 1024, ge=1024)
    # Slow clients (read by `proxy.connections.protocol` in every worker): seconds to a complete request head,
    # seconds a request body may send nothing, seconds a kept-alive connection may idle, and the
    # most client connections open at once.
    header_timeout: float = Field(default=10.0, gt=0)
    body_timeout: float = Field(default=30.0, gt=0)
    keep_alive_timeout: float = Field(default=5.0, gt=0)
    max_client_connections: int = Field(default=1000, ge=1)
    # Seconds an answer may wait with its client taking none of it (nginx's send_timeout); then reset.
    send_timeout: float = Field(default=60.0, gt=0)
    # Under load (half the cap open), a body slower than this on average after the grace gets 408; 0: never.
    min_body_rate: float = Field(default=240.0, ge=0)
    min_body_rate_grace: float = Field(default=5.0, gt=0)

    @field_validator("upstream_url", "summary_url")
    @classmethod
    def _check_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        value = value.strip().rstrip("/")
        if not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL, e.g. http://localhost:11434/v1")
        return value

    @field_validator("cache_url")
    @classmethod
    def _check_cache_url(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("must be a redis:// (or rediss://, unix://) URL, e.g. redis://localhost:6379/0")
        return value

    @field_validator("tokenizer")
    @classmethod
    def _check_tokenizer(cls, value: str) -> str:
        return check_tokenizer(value)

    @field_validator("model_windows", mode="before")
    @classmethod
    def _parse_model_windows(cls, value: Any) -> Any:
        if not isinstance(value, str):
            return value
        windows: dict[str, int] = {}
        for item in filter(None, (part.strip() for part in value.split(","))):
            name, sep, size = item.rpartition("=")
            if not sep or not name.strip() or not size.strip().isdigit() or int(size) <= 0:
                raise ValueError(f"expected NAME=TOKENS pairs separated by commas, got {item!r}")
            windows[name.strip()] = int(size)
        return windows

    @field_validator("protected_tools", "api_keys", "admin_keys", mode="before")
    @classmethod
    def _parse_names(cls, value: Any, info: ValidationInfo) -> Any:
        if isinstance(value, str):
            names = tuple(filter(None, (part.strip() for part in value.split(","))))
            if info.field_name == "api_keys" and value and not names:
                # Set but holding no key: starting with auth off would be a silent open relay.
                raise ValueError(f"holds no key ({value!r}): give comma-separated keys, or unset it")
            return names
        return value

    @model_validator(mode="after")
    def _check_target(self) -> Settings:
        if self.target > self.threshold:
            raise ValueError(f"target ({self.target}) must not exceed threshold ({self.threshold})")
        return self

    @model_validator(mode="after")
    def _check_admin_keys(self) -> Settings:
        keys = {key.get_secret_value() for key in self.api_keys}
        if any(key.get_secret_value() not in keys for key in self.admin_keys):
            raise ValueError("every key of COMPACT_ADMIN_KEYS must also be one of COMPACT_API_KEYS")
        return self

    def override_for(self, model: str) -> ModelOverride:
        """The override that applies to `model`: exact name first, else the longest matching glob."""
        merged = self._merged_overrides()
        if model in merged:
            return merged[model]
        patterns = [key for key in merged if fnmatch.fnmatchcase(model, key)]
        return merged[max(patterns, key=len)] if patterns else ModelOverride()

    @property
    def upstream_host(self) -> str:
        """The upstream's host name, lower case (what says which server's API it is)."""
        return (urllib.parse.urlsplit(self.upstream_url).hostname or "").lower()

    def window_for(self, model: str) -> ModelWindow:
        """Every knob for `model`, its override laid over the defaults."""
        o = self.override_for(model)
        threshold = self.threshold if o.threshold is None else o.threshold
        window = self.window if o.window is None else o.window
        fallback = self.window if isinstance(self.window, int) else self.fallback_window
        return ModelWindow(
            window=fallback if window == "auto" else window,
            auto=window == "auto",
            tokenizer=self.tokenizer if o.tokenizer is None else o.tokenizer,
            threshold=threshold,
            target=min(threshold, self.target if o.target is None else o.target),
            keep_recent_turns=self.keep_recent_turns if o.keep_recent_turns is None else o.keep_recent_turns,
            keep_recent_tool_results=(
                self.keep_recent_tool_results
                if o.keep_recent_tool_results is None
                else o.keep_recent_tool_results
            ),
            reply_reserve=self.reply_reserve if o.reply_reserve is None else o.reply_reserve,
        )

    def _merged_overrides(self) -> dict[str, ModelOverride]:
        merged = {name: ModelOverride(window=size) for name, size in self.model_windows.items()}
        for name, override in self.models.items():
            base = merged.get(name, ModelOverride())
            merged[name] = base.model_copy(update=override.model_dump(exclude_none=True))
        return merged


def describe_validation_error(error: ValidationError) -> str:
    """One line per problem, each naming the environment variable a user has to fix."""
    lines = []
    for problem in error.errors():
        loc = [str(part) for part in problem.get("loc", ())]
        variable = ENV_PREFIX + loc[0].upper() if loc else "configuration"
        where = f" (at {'.'.join(loc[1:])})" if len(loc) > 1 else ""
        lines.append(f"{variable}{where}: {problem['msg']}")
    return "invalid configuration:\n  " + "\n  ".join(lines)
