"""Run the real LiteLLM proxy (PyPI `litellm[proxy]` 1.108.7, from its own venv:
`scripts/litellm_venv.py`) on a free loopback port, with a config the test writes: its models and
its `headroom` guardrail pointed at a `compacting-proxy`.

LiteLLM is kept off the network: the model cost map is its local copy
(`LITELLM_LOCAL_MODEL_COST_MAP`), telemetry is off, and no database or UI is configured. Clients
send `MASTER_KEY` (LiteLLM 1.108 refuses to start without a master key).
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from scripts.litellm_venv import LITELLM
from tests.support.processes import free_port, log_tail, started

STARTUP_TIMEOUT_S = 180.0  # importing the proxy takes 10-40 s on a loaded two-core machine
GUARDRAIL = "headroom-compression"
MASTER_KEY = "sk-" + "0123456789abcdef" * 4  # LiteLLM refuses to start without a strong one


@dataclass(frozen=True)
class LiteLLM:
    base_url: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def log_tail(self, lines: int = 60) -> str:
        return log_tail(self.log_path, lines)


def require_litellm() -> Path:
    """The `litellm` command; a clear failure naming the install command when it is missing."""
    if not LITELLM.is_installed():
        pytest.fail("LiteLLM is not installed: python -m scripts.litellm_venv install", pytrace=False)
    return LITELLM.binary_path


def config(
    models: list[tuple[str, str, str]], compressor: str, *, guardrail_model: str | None
) -> dict[str, Any]:
    """LiteLLM's config: `models` as (name, upstream model, api_base), and the `headroom` guardrail
    on every request, calling `compressor` (its `/v1/compress`) with the model `guardrail_model`."""
    guardrail: dict[str, Any] = {
        "guardrail": "headroom",
        "mode": "pre_call",
        "api_base": compressor,
        "default_on": True,
    }
    if guardrail_model:
        guardrail["model"] = guardrail_model
    return {
        "model_list": [
            {
                "model_name": name,
                "litellm_params": {"model": f"openai/{upstream}", "api_base": api_base, "api_key": "none"},
            }
            for name, upstream, api_base in models
        ],
        "guardrails": [{"guardrail_name": GUARDRAIL, "litellm_params": guardrail}],
        "litellm_settings": {"telemetry": False, "drop_params": True},
        "general_settings": {"master_key": MASTER_KEY},
    }


@contextmanager
def running_litellm(settings: dict[str, Any]) -> Iterator[LiteLLM]:
    binary = require_litellm()
    with tempfile.TemporaryDirectory(prefix="litellm-") as tmp:
        path = Path(tmp) / "config.yaml"
        path.write_text(yaml.safe_dump(settings))
        port = free_port()
        log_path = Path(tmp) / "litellm.log"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("COMPACT_", "LITELLM_", "OPENAI_"))}
        env |= {"LITELLM_LOCAL_MODEL_COST_MAP": "True", "LITELLM_TELEMETRY": "False", "HOME": tmp}
        args = [
            str(binary),
            "--config",
            str(path),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--num_workers",
            "1",
        ]
        with started(
            args,
            port=port,
            health="/health/liveliness",
            log_path=log_path,
            name="litellm",
            cwd=Path(tmp),
            env=env,
            timeout=STARTUP_TIMEOUT_S,
        ) as process:
            yield LiteLLM(f"http://127.0.0.1:{port}", process, log_path)
