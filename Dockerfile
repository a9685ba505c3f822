# syntax=docker/dockerfile:1
#
# compacting-proxy: the proxy in a venv (/opt/venv) on a slim Python, served as uid 10001.
#
#   docker build -t compacting-proxy .
#   docker run --rm -p 8080:8080 -e COMPACT_UPSTREAM_URL=http://ollama:11434/v1 compacting-proxy
#
# Configuration is only COMPACT_* environment variables (see proxy/settings.py); arguments after the
# image name go to the command, e.g. `docker run ... compacting-proxy --workers 2 --log-level debug`.
# The command runs as PID 1 in exec form, so `docker stop` delivers SIGTERM to uvicorn itself: it stops
# accepting, lets open requests and streams finish (up to --timeout-graceful-shutdown, 30 s) and exits 0.
# Give it longer than that to stop (`docker stop -t 40`, compose `stop_grace_period`, Kubernetes
# `terminationGracePeriodSeconds`), or lower the timeout.
#
# Where Docker Hub cannot be reached, scripts/build_image.sh builds this file with podman on a local
# Debian bookworm + Python 3.11 base (PYTHON_IMAGE); tests/image/test_image.py builds, runs and stops it.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY proxy ./proxy
# A regular (non-editable) install: the final stage gets the venv and nothing from /src.
# The base install counts exactly, as a venv does: cl100k_base, o200k_base, Llama 3 and Qwen2.5 are
# files in `quicktok` (about 7 MB), read at start-up; nothing is fetched at runtime. Then out goes
# numpy (73 MB), which only quicktok's batch counter imports, never called by the proxy.
RUN python -m venv /opt/venv \
    && /opt/venv/bin/pip install --no-cache-dir . \
    && /opt/venv/bin/pip uninstall --yes numpy

FROM ${PYTHON_IMAGE} AS runtime
LABEL org.opencontainers.image.title="compacting-proxy" \
      org.opencontainers.image.description="OpenAI-compatible proxy that compacts long chats before they overflow the model's window" \
      org.opencontainers.image.licenses="MIT"
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PATH=/opt/venv/bin:$PATH
# Not named `proxy`: Debian's base-passwd already has a `proxy` user and group (uid/gid 13).
RUN groupadd --gid 10001 compacting-proxy \
    && useradd --uid 10001 --gid 10001 --no-log-init --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin compacting-proxy
# Root-owned and read-only to the server: it needs no writable path, so a read-only root fs works.
COPY --from=build /opt/venv /opt/venv
USER 10001:10001
EXPOSE 8080
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/healthz', timeout=4)"]
ENTRYPOINT ["compacting-proxy", "--host", "0.0.0.0", "--port", "8080"]
