"""The real image: the project's own Dockerfile built by podman (scripts/build_image.sh), then run.

No Docker Hub here, so the image is built on a local Debian bookworm + Python 3.11 base (what
python:3.11-slim-bookworm is); everything above the base is the Dockerfile as users build it.
As shipped, in its own network namespace (`--network none`), the image must pass its own HEALTHCHECK
on 8080 as uid 10001 and stop with status 0 on SIGTERM. On the host's network (no bridges here, so on
a free port), the official `openai` SDK sends a long chat through the container to a recording upstream
on the host, which must receive it compacted. It counts as a venv with the `tokenizers` extra: a
named model exactly with no network at all, and a paste the estimate's margin would refuse with the
heaviest real count, which forwards it.

Marked `slow` as well as `image`: the first build makes the base (about two minutes), so the fast
suite leaves these out and the full `scripts/test.sh` runs them.
"""

from __future__ import annotations

import math
import os
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import openai
import orjson
import pytest

from proxy.counting.tokenizers import load_text_counter
from proxy.counting.tokens import MESSAGE_OVERHEAD, REPLY_PRIMER, text_of
from proxy.planning.local_count import TEMPLATE_FACTOR
from tests.support.pastes import RESERVE, WINDOW, paste, real_size
from tests.support.processes import free_port
from tests.support.upstreams.chats import TOOLS, support_chat
from tests.support.upstreams.faulty import FaultyUpstream, serve_in_thread

pytestmark = [pytest.mark.image, pytest.mark.slow, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]
PODMAN_ENV = {"CONTAINERS_CONF": str(REPO / "scripts" / "containers.conf")}
BUILD_TIMEOUT_S = 840.0  # apt-get install podman runc debootstrap, the base (~2 min), the build
START_TIMEOUT_S = 30.0
GRACE_S = 10  # podman stop -t: SIGTERM, then SIGKILL after this long
UID = "10001"


def podman(*args: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["podman", *args],
        env={**os.environ, **PODMAN_ENV},
        capture_output=True,
        text=True,
        check=check,
        timeout=timeout,
    )


@pytest.fixture(scope="session")
def image() -> Iterator[str]:
    """The image built from this checkout, under a tag of its own (other checkouts build too)."""
    if os.geteuid() != 0 and not os.environ.get("CI"):
        pytest.skip("the image is built and run by root's podman (scripts/build_image.sh): run as root")
    tag = f"localhost/compacting-proxy:test-{uuid.uuid4().hex[:12]}"
    result = subprocess.run(
        [str(REPO / "scripts" / "build_image.sh")],
        env={**os.environ, "IMAGE": tag},
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
    )
    if result.returncode != 0:
        pytest.fail(f"scripts/build_image.sh failed ({result.returncode}):\n{result.stderr[-4000:]}")
    assert result.stdout.strip().splitlines()[-1] == tag
    yield tag
    podman("rmi", tag, check=False)


@contextmanager
def container(image: str, *args: str, network: str, env: dict[str, str] | None = None) -> Iterator[str]:
    """`podman run -d` the image with `args` after its name; yields the container's name, removed after.

    Locked down as deploy/ runs it (compose: read_only, cap_drop ALL, no-new-privileges; Kubernetes:
    readOnlyRootFilesystem): the image must need nothing more."""
    name = f"compacting-proxy-test-{uuid.uuid4().hex[:12]}"
    options = [f"--env={key}={value}" for key, value in (env or {}).items()]
    options += ["--read-only", "--cap-drop=all", "--security-opt=no-new-privileges"]
    podman("run", "--detach", f"--name={name}", f"--network={network}", *options, image, *args)
    try:
        yield name
    finally:
        podman("rm", "--force", "--time=0", name, check=False)


def state(name: str, field: str) -> str:
    return podman("inspect", f"--format={{{{.State.{field}}}}}", name).stdout.strip()


def logs(name: str) -> str:
    result = podman("logs", name, check=False)
    return result.stdout + result.stderr


def wait_until(name: str, ready: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while not ready():
        if state(name, "Status") != "running":
            pytest.fail(f"the container exited ({state(name, 'ExitCode')}) before {what}:\n{logs(name)}")
        if time.monotonic() > deadline:
            pytest.fail(f"not {what} after {START_TIMEOUT_S:.0f} s:\n{logs(name)}")
        time.sleep(0.2)


def healthcheck_passes(name: str) -> bool:
    """The image's own HEALTHCHECK command, run in the container as podman (and Docker) run it."""
    return podman("healthcheck", "run", name, check=False).returncode == 0


def stop(name: str) -> float:
    """`podman stop -t GRACE_S` (SIGTERM, SIGKILL after the grace period): the seconds it took."""
    started = time.monotonic()
    podman("stop", f"--time={GRACE_S}", name, timeout=GRACE_S + 30)
    return time.monotonic() - started


def process_status(name: str) -> dict[str, str]:
    """/proc/1/status inside the container: PID 1 is the server itself (exec-form ENTRYPOINT)."""
    lines = podman("exec", name, "cat", "/proc/1/status").stdout.splitlines()
    return {key: value.strip() for key, _, value in (line.partition(":") for line in lines)}


def test_its_configuration_is_what_deploy_relies_on(image: str) -> None:
    config = orjson.loads(podman("image", "inspect", "--format={{json .Config}}", image).stdout)
    # Numeric, so Kubernetes' runAsNonRoot can check it (deploy/kubernetes: runAsUser 10001).
    assert config["User"] == f"{UID}:{UID}"
    assert list(config["ExposedPorts"]) == ["8080/tcp"]
    assert not [v for v in config["Env"] if v.startswith("COMPACT_")], "defaults live in proxy/settings.py"


def test_as_shipped_it_passes_its_healthcheck_as_a_non_root_user(image: str) -> None:
    with container(image, network="none") as name:
        wait_until(name, lambda: healthcheck_passes(name), "healthy")
        status = process_status(name)
        cmdline = podman("exec", name, "cat", "/proc/1/cmdline").stdout.split("\0")
        assert Path(cmdline[1]).name == "compacting-proxy", cmdline
        # real, effective, saved and filesystem uid (and gid) are all 10001, never root
        assert status["Uid"].split() == [UID] * 4 and status["Gid"].split() == [UID] * 4, status
        assert podman("exec", name, "id", "-un").stdout.strip() == "compacting-proxy"


def test_sigterm_stops_it_with_status_0_within_the_grace_period(image: str) -> None:
    with container(image, network="none") as name:
        wait_until(name, lambda: healthcheck_passes(name), "healthy")
        took = stop(name)
        assert state(name, "ExitCode") == "0", logs(name)
        assert took < GRACE_S, f"SIGKILLed after {took:.1f} s, not stopped by SIGTERM"
        assert "Application shutdown complete" in logs(name)
        assert not healthcheck_passes(name)


@pytest.fixture
def upstream() -> Iterator[FaultyUpstream]:
    with serve_in_thread() as server:
        yield server


@contextmanager
def proxy_on_host_network(
    image: str, upstream: FaultyUpstream, window: int, **settings: str
) -> Iterator[tuple[str, str]]:
    """The container in front of `upstream` on a free port of the host: its name and /v1 base URL."""
    port = free_port()
    env = {"COMPACT_UPSTREAM_URL": upstream.url, "COMPACT_WINDOW": str(window), **settings}
    with container(image, "--port", str(port), network="host", env=env) as name:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}", api_key="unused", max_retries=0)

        def healthy() -> bool:
            try:
                return client.get("/healthz", cast_to=object) == {"status": "ok"}
            except openai.APIConnectionError:
                return False

        wait_until(name, healthy, "answering /healthz")
        yield name, f"http://127.0.0.1:{port}/v1"


def test_a_long_chat_through_the_container_reaches_the_upstream_compacted(
    image: str, upstream: FaultyUpstream
) -> None:
    messages = support_chat(12, result_items=20)  # about 32 KB, some 8,000 tokens
    with proxy_on_host_network(image, upstream, window=4096) as (_, base_url):
        client = openai.OpenAI(base_url=base_url, api_key="sk-test", max_retries=0, timeout=30)
        raw = client.chat.completions.with_raw_response.create(
            model="faulty", messages=messages, tools=TOOLS, extra_headers={"x-fault": "ok; tag=image"}
        )
    assert raw.status_code == 200
    assert raw.parse().choices[0].message.content == "ok image"
    before = int(raw.headers["x-compaction-tokens-before"])
    after = int(raw.headers["x-compaction-tokens-after"])
    dropped = int(raw.headers["x-compaction-dropped"])
    assert before > 4096 > after and dropped > 0
    # The proxy also asks the upstream what it is (/api/version) and its windows: only one chat.
    (received,) = [r for c in upstream.connections for r in c.requests if r.target.endswith("/completions")]
    assert received.target == "/v1/chat/completions"
    forwarded = orjson.loads(received.body)["messages"]
    # The dropped messages are gone (one note may stand for them); the system prompt and the last
    # request are kept as they were.
    assert len(forwarded) <= len(messages) - dropped + 1
    assert forwarded[0] == messages[0] and forwarded[-1] == messages[-1]


def test_sigterm_lets_an_open_stream_finish_then_exits_0(image: str, upstream: FaultyUpstream) -> None:
    with proxy_on_host_network(image, upstream, window=4096) as (name, base_url):
        client = openai.OpenAI(base_url=base_url, api_key="sk-test", max_retries=0, timeout=30)
        stream = client.chat.completions.create(
            model="faulty",
            messages=[{"role": "user", "content": "Count slowly."}],
            stream=True,
            extra_headers={"x-fault": "ok; chunks=12; delay=0.25; tag=drain"},
        )
        chunks = iter(stream)
        received = [next(chunks)]  # the stream is open: about 3 s of it to go
        took: list[float] = []
        stopping = threading.Thread(target=lambda: took.append(stop(name)))
        stopping.start()
        received += list(chunks)
        stopping.join()
        assert state(name, "ExitCode") == "0", logs(name)
    text = "".join(chunk.choices[0].delta.content or "" for chunk in received if chunk.choices)
    assert text == "".join(f"drain:{i} " for i in range(12)), "the whole stream, not cut at SIGTERM"
    assert received[-1].choices[0].finish_reason == "stop"
    # It waited for the stream (about 3 s of it were left), and no longer: SIGTERM, not SIGKILL.
    assert took, "podman stop failed"
    assert 1.0 < took[0] < GRACE_S, f"stopped after {took[0]:.1f} s"


# The image counts as a venv with the `tokenizers` extra does (issue 24, item 1): the vocabularies are
# in it. The 5cfd5c1 image, without them, counted the named model with the estimate and refused both
# pastes.


def test_a_model_named_for_a_bundled_vocabulary_is_counted_exactly_without_a_network(image: str) -> None:
    """Llama 3.1 by its Ollama name, in a container with no network at all: the dry run's count is
    Meta's tokenizer's, to the token, with the template's share (the vocabulary is a file in the
    image, nothing is fetched)."""
    messages = paste("Chinese", 0.7)
    llama3 = load_text_counter("llama3")
    # Each message's count by the vocabulary, and the 2% the proxy adds for the chat template around
    # it (`TEMPLATE_FACTOR`), rounded up a message at a time as the proxy does.
    exact = sum(
        math.ceil((llama3(text_of(m["content"])) + MESSAGE_OVERHEAD) * TEMPLATE_FACTOR) for m in messages
    ) + math.ceil(REPLY_PRIMER * TEMPLATE_FACTOR)
    request = orjson.dumps({"model": "llama3.1:8b", "messages": messages})
    post = (
        "import sys, urllib.request; "
        "r = urllib.request.Request('http://127.0.0.1:8080/compact', sys.stdin.buffer.read(), "
        "{'content-type': 'application/json'}); "
        "sys.stdout.buffer.write(urllib.request.urlopen(r, timeout=60).read())"
    )
    with container(image, network="none", env={"COMPACT_WINDOW": str(WINDOW)}) as name:
        wait_until(name, lambda: healthcheck_passes(name), "healthy")
        answer = subprocess.run(
            ["podman", "exec", "--interactive", name, "python", "-c", post],
            env={**os.environ, **PODMAN_ENV},
            input=request,
            capture_output=True,
            timeout=90,
        )
    assert answer.returncode == 0, answer.stderr.decode()
    report = orjson.loads(answer.stdout)["report"]
    assert (report["counted_by"], report["tokens_before"]) == ("llama3", exact)


@pytest.mark.parametrize(("kind", "fraction"), [("Japanese", 0.85), ("parse tree", 0.9)])
def test_what_fits_the_heaviest_vocabulary_is_forwarded_not_refused(
    image: str, upstream: FaultyUpstream, kind: str, fraction: float
) -> None:
    """A paste of an unnamed model that the estimate's margin puts over the window and the heaviest of
    cl100k, o200k, Qwen2.5 and Llama 3 fits with the reply's room (`bench_margin`'s false refusals):
    forwarded as it came, not refused with a 400."""
    messages = paste(kind, fraction)
    assert real_size(messages) + RESERVE <= WINDOW
    with proxy_on_host_network(image, upstream, window=WINDOW, COMPACT_UPSTREAM_KIND="openai") as (
        _,
        base_url,
    ):
        client = openai.OpenAI(base_url=base_url, api_key="sk-test", max_retries=0, timeout=60)
        raw = client.chat.completions.with_raw_response.create(
            model="m", messages=messages, extra_headers={"x-fault": "ok; tag=fits"}
        )
    assert raw.status_code == 200
    (received,) = [r for c in upstream.connections for r in c.requests if r.target.endswith("/completions")]
    assert orjson.loads(received.body)["messages"] == messages
