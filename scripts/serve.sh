#!/usr/bin/env bash
# Install the proxy into ./.venv and start it. Configure it with COMPACT_* variables or a .env file,
# e.g. COMPACT_UPSTREAM_URL=http://localhost:11434/v1 COMPACT_WINDOW=8192 ./scripts/serve.sh
# Arguments go to the command: ./scripts/serve.sh --host 0.0.0.0 --port 8080
set -euo pipefail
cd "$(dirname "$0")/.."

VENV_EXTRAS= . scripts/venv.sh
exec .venv/bin/compacting-proxy "$@"
