#!/usr/bin/env bash
# Install everything the test suite needs and run all of it: lint, types, fast tests, and the tests
# against real servers (llama.cpp's llama-server, built once and cached; Redis from Debian) and of the
# real image (built with podman by scripts/build_image.sh, as root; its base is made once and kept).
# Usage: ./scripts/test.sh [pytest args]      FAST=1 ./scripts/test.sh  runs only the fast tier
set -euo pipefail
cd "$(dirname "$0")/.."

VENV_EXTRAS=test,dev,tokenizers,bench . scripts/venv.sh
# The official Node clients (npm openai, ai + @ai-sdk/openai), pinned by tests/node/package-lock.json.
# Not for FAST=1: the fast tier starts no Node.
if [ "${FAST:-0}" != "1" ] && command -v npm >/dev/null 2>&1; then
    npm ci --prefix tests/node --no-audit --no-fund --loglevel=error
    # The real agent CLIs (Claude Code, Codex, opencode), pinned by tests/clis/package-lock.json.
    # `npm install` with the lock, not `npm ci`: the registry serves only this platform's opencode
    # binary, and `npm ci` refuses a lock without every platform's optional package.
    npm install --prefix tests/clis --no-audit --no-fund --no-save --loglevel=error
fi

# FAST=1: pyproject's default selection, the fast tier (no process, no network). Otherwise every tier:
# an empty -m overrides that default (a -m in the arguments overrides both).
MARKERS=()
if [ "${FAST:-0}" != "1" ]; then
    MARKERS=(-m "")
    if ! command -v redis-server >/dev/null 2>&1 || ! command -v wrk >/dev/null 2>&1 \
        || ! command -v docker-compose >/dev/null 2>&1 || ! command -v rg >/dev/null 2>&1 \
        || ! command -v haproxy >/dev/null 2>&1; then
        echo "installing redis-server, haproxy, wrk, docker-compose and ripgrep (Debian) for the shared-cache" \
            "and replica tests, the benchmarks, the compose files' check and opencode's grep tool" >&2
        SUDO=$([ "$(id -u)" = 0 ] && echo "" || echo sudo)
        $SUDO apt-get update -qq && $SUDO apt-get install -y -qq redis-server haproxy wrk docker-compose ripgrep >/dev/null
    fi
    if ! command -v chromium >/dev/null 2>&1; then
        echo "installing chromium (Debian) for the live page's browser tests" >&2
        SUDO=$([ "$(id -u)" = 0 ] && echo "" || echo sudo)
        $SUDO apt-get update -qq && $SUDO apt-get install -y -qq chromium >/dev/null
    fi
    .venv/bin/python scripts/llama_server.py build
    # aider (PyPI aider-chat) for the cli tier, in a venv of its own under the same cache: its pins
    # would disturb the project's.
    .venv/bin/python -m scripts.aider_venv install >/dev/null
    # The LiteLLM proxy (PyPI litellm[proxy], the version with the headroom guardrail) for the gateway
    # tier, in a venv of its own under the same cache (about 40 s, once).
    .venv/bin/python -m scripts.litellm_venv install >/dev/null
    # Up front, outside the tests' timeouts: podman & co. from Debian, the base image (first run only)
    # and the layers tests/image/test_image.py then builds on.
    ./scripts/build_image.sh >/dev/null
fi

.venv/bin/ruff check proxy tests scripts benchmarks
.venv/bin/ruff format --check proxy tests scripts benchmarks
.venv/bin/mypy proxy benchmarks
# The live page's store, layout and stream reader without a browser (Node's own test runner, no
# package): they are the page's ES modules as served. Its browser tier is tests/browser/.
if command -v node >/dev/null 2>&1; then
    node --test tests/live/page/
elif [ "${FAST:-0}" != "1" ]; then
    echo "node is needed for the live page's tests (tests/live/page/)" >&2
    exit 1
fi
.venv/bin/python -m pytest "${MARKERS[@]}" "$@"
