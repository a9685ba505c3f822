"""`compacting-proxy run <cli>` as a user runs it: the real command, a real proxy process it starts
in front of the stub upstream, and fake CLIs on a temporary PATH (tests/support/fake_clis.py) that
record what they were given and check the proxy while they run. The exit status comes back, signal
deaths as 128 + n, Ctrl-C reaches the CLI and not the proxy, the proxy is gone afterwards."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support import fake_clis
from tests.support.processes import free_port, running_module
from tests.support.upstreams.proxy_server import proxy_command, running_proxy, running_stub

pytestmark = pytest.mark.process
WINDOW = 8000


@pytest.fixture(scope="module")
def stub() -> Iterator[str]:
    with running_stub(WINDOW) as url:
        yield url


@pytest.fixture(scope="module")
def recording() -> Iterator[str]:
    """An upstream that keeps every request it gets, headers included (`GET /_recorded`)."""
    with running_module("tests.support.upstreams.formats", "--window", "100000", ready="/_recorded") as url:
        yield url


@pytest.fixture
def user(tmp_path: Path) -> dict[str, str]:
    """The environment of a user with the fake CLIs on the PATH and a HOME of their own."""
    home = tmp_path / "home"
    home.mkdir()
    bin_dir = fake_clis.install(tmp_path / "bin")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COMPACT_", "ANTHROPIC_", "OPENAI_"))}
    return env | {
        "PATH": f"{bin_dir}:{env.get('PATH', '/usr/bin:/bin')}",
        "HOME": str(home),
        "FAKE_RECORD": str(tmp_path / "seen.json"),
        "TMPDIR": str(tmp_path),
    }


def run(
    cli: str, options: list[str], cli_args: list[str], env: dict[str, str], timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    cmd = [*proxy_command(), "run", cli, *options, "--", *cli_args]
    return subprocess.run(
        cmd, env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )


def user_record(env: dict[str, str]) -> Path:
    return Path(env["FAKE_RECORD"])


def proxy_gone(root: str) -> bool:
    try:
        httpx.get(f"{root}/healthz", timeout=2)
    except httpx.TransportError:
        return True
    return False


@pytest.mark.parametrize("cli", ["claude", "codex", "opencode", "aider", "gemini"])
def test_each_cli_runs_against_the_proxy_it_started(
    cli: str, stub: str, user: dict[str, str], tmp_path: Path
) -> None:
    env = user | {"FAKE_MODE": "exit:3"}
    done = run(cli, ["--upstream", stub, "--window", str(WINDOW), "--model", "stub"], ["-x", "a task"], env)
    assert done.returncode == 3, done.stderr
    seen = fake_clis.recorded(tmp_path / "seen.json")
    assert seen["argv"][-2:] == ["-x", "a task"]
    assert seen["healthy"], "the proxy answered while the CLI ran"
    root = seen["root"]
    assert root.startswith("http://127.0.0.1:")
    assert f"watch it at {root}/ui" in done.stderr
    assert proxy_gone(root), "the proxy is stopped when the CLI exits"
    scratch = list(tmp_path.glob("compacting-proxy-run-*"))
    assert all(p.suffix == ".log" for p in scratch), f"the temporary files are removed: {scratch}"
    assert list((tmp_path / "home").iterdir()) == [], "nothing written into the user's home"


def test_the_cli_talks_to_a_compacting_proxy(stub: str, user: dict[str, str], tmp_path: Path) -> None:
    env = user | {"FAKE_CHAT": "1", "FAKE_MODEL": "stub"}
    done = run("opencode", ["--upstream", stub, "--window", str(WINDOW)], [], env)
    assert done.returncode == 0, done.stderr
    seen = fake_clis.recorded(tmp_path / "seen.json")
    assert seen["config"]["model"] == "compacting-proxy/stub", "the upstream's first model"
    chat = seen["chat"]
    assert chat["status"] == 200
    assert int(chat["before"]) > WINDOW > int(chat["after"])


def test_told_the_window_the_proxy_compacts_for(stub: str, user: dict[str, str], tmp_path: Path) -> None:
    done = run(
        "codex", ["--upstream", stub, "--window", "6000", "--model", "stub", "--tell-window"], [], user
    )
    assert done.returncode == 0, done.stderr
    overrides = fake_clis.recorded(tmp_path / "seen.json")["overrides"]
    assert "model_context_window=6000" in overrides
    done = run("codex", ["--upstream", stub, "--window", "6000", "--model", "stub"], [], user)
    overrides = fake_clis.recorded(tmp_path / "seen.json")["overrides"]
    assert not any(o.startswith("model_context_window") for o in overrides)


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGTERM, 143), (signal.SIGKILL, 137)])
def test_a_signal_death_is_reported_as_a_shell_does(
    signum: int, status: int, stub: str, user: dict[str, str]
) -> None:
    done = run("claude", ["--upstream", stub], [], user | {"FAKE_MODE": f"signal:{signum}"})
    assert done.returncode == status, done.stderr
    assert fake_clis.recorded(user_record(user))["env"]["ANTHROPIC_MODEL"] == "stub", "the upstream's model"


def wait_until_running(process: subprocess.Popen[str], ready: Path) -> None:
    """Until the fake CLI under `run` says it runs (by the file `ready`), 60 s at most: failing with
    `run`'s own output when it does not."""
    deadline = time.monotonic() + 60
    while not ready.exists() and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.05)
    assert ready.exists(), process.stderr.read() if process.stderr else ""


def test_ctrl_c_reaches_the_cli_and_not_the_proxy(stub: str, user: dict[str, str], tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    env = user | {"FAKE_MODE": "wait", "FAKE_READY": str(ready)}
    cmd = [*proxy_command(), "run", "aider", "--upstream", stub, "--model", "stub"]
    # A session of its own, as a terminal's foreground job: the terminal's Ctrl-C is SIGINT to the group.
    process = subprocess.Popen(
        cmd, env=env, start_new_session=True, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    try:
        wait_until_running(process, ready)
        os.killpg(process.pid, signal.SIGINT)
        assert process.wait(timeout=30) == 130
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    seen = fake_clis.recorded(tmp_path / "seen.json")
    assert seen["healthy_after_sigint"], "the proxy kept serving after the CLI's Ctrl-C"
    assert proxy_gone(seen["root"])


def test_a_running_proxy_is_used_and_left_running(stub: str, user: dict[str, str], tmp_path: Path) -> None:
    with running_proxy(stub, WINDOW) as proxy:
        done = run("gemini", ["--proxy", proxy.base_url + "/"], [], user | {"FAKE_MODE": "exit:0"})
        assert done.returncode == 0, done.stderr
        seen = fake_clis.recorded(tmp_path / "seen.json")
        assert seen["root"] == proxy.base_url
        assert seen["files"]["settings"]["security"]["auth"]["selectedType"] == "gemini-api-key"
        assert not Path(seen["settings_path"]).exists(), "the temporary settings file is removed"
        assert httpx.get(f"{proxy.base_url}/healthz", timeout=5).status_code == 200


def test_a_cli_not_installed_is_said_in_one_line(user: dict[str, str]) -> None:
    env = user | {"PATH": "/nonexistent"}
    cmd = [*proxy_command(), "run", "codex", "--proxy", "http://127.0.0.1:9"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=30)
    assert done.returncode == 2
    assert done.stderr.strip() == "compacting-proxy run: codex is not on the PATH"


def test_a_proxy_that_cannot_start_is_reported_with_its_log(user: dict[str, str]) -> None:
    done = run("claude", ["--window", "-5"], [], user)
    assert done.returncode == 2
    assert "COMPACT_WINDOW" in done.stderr


def test_sigterm_to_run_is_passed_to_the_cli(stub: str, user: dict[str, str], tmp_path: Path) -> None:
    """`kill <run>` (a supervisor, a closed terminal's SIGHUP alike) ends the CLI, then the proxy."""
    ready = tmp_path / "ready"
    env = user | {"FAKE_MODE": "wait", "FAKE_READY": str(ready)}
    cmd = [*proxy_command(), "run", "codex", "--upstream", stub]
    process = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_until_running(process, ready)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 128 + signal.SIGTERM
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert proxy_gone(fake_clis.recorded(tmp_path / "seen.json")["root"])


def test_an_unreachable_proxy_is_said_and_the_cli_still_runs(user: dict[str, str], tmp_path: Path) -> None:
    port = free_port()
    done = run("claude", ["--proxy", f"http://127.0.0.1:{port}"], [], user)
    assert done.returncode == 0, done.stderr
    assert f"no answer from http://127.0.0.1:{port}/healthz" in done.stderr
    assert not fake_clis.recorded(tmp_path / "seen.json")["healthy"]


def test_no_proxy_outlives_a_killed_run(stub: str, user: dict[str, str], tmp_path: Path) -> None:
    """`run` killed outright (SIGKILL: no handler runs) still takes its proxy with it."""
    ready = tmp_path / "ready"
    env = user | {"FAKE_MODE": "wait", "FAKE_READY": str(ready)}
    cmd = [*proxy_command(), "run", "opencode", "--upstream", stub, "--model", "stub"]
    process = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_until_running(process, ready)
        process.kill()
        process.wait()
        root = fake_clis.recorded(tmp_path / "seen.json")["root"]
        deadline = time.monotonic() + 15
        while not proxy_gone(root) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert proxy_gone(root)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        # The fake CLI, orphaned by the kill as any CLI would be, is ended here.
        with contextlib.suppress(OSError, ValueError):
            os.kill(fake_clis.recorded(tmp_path / "seen.json")["pid"], signal.SIGTERM)


def wait_ready(process: subprocess.Popen[str], ready: Path) -> None:
    deadline = time.monotonic() + 60
    while not ready.exists() and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.05)
    assert ready.exists(), process.stderr.read() if process.stderr else ""


CHAT = {"model": "m", "messages": [{"role": "user", "content": "relay this for me"}]}


@pytest.mark.parametrize("cli", ["claude", "opencode", "gemini"])
def test_the_proxy_run_starts_answers_only_its_cli(
    cli: str, recording: str, user: dict[str, str], tmp_path: Path
) -> None:
    """Another local user who finds the proxy's port (in `ps`, or by trying them) can neither read
    its page's data nor relay a chat with the user's upstream key: the proxy has a key of its own,
    which only the CLI was given; the CLI's own chat goes through, with the user's key upstream."""
    httpx.delete(f"{recording}/_recorded", timeout=10)
    ready = tmp_path / "ready"
    user_key = {"claude": "ANTHROPIC_API_KEY", "opencode": "OPENAI_API_KEY", "gemini": "GEMINI_API_KEY"}[cli]
    env = user | {"FAKE_MODE": "wait", "FAKE_READY": str(ready), "FAKE_CHAT": "1", user_key: "sk-users-own"}
    cmd = [*proxy_command(), "run", cli, "--upstream", f"{recording}/v1", "--model", "m"]
    process = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_ready(process, ready)
        seen = fake_clis.recorded(tmp_path / "seen.json")
        root = seen["root"]
        assert seen["chat"]["status"] == 200, "the CLI's own chat goes through"
        other = [
            httpx.get(f"{root}/ui/conversations", timeout=10),
            httpx.post(f"{root}/v1/chat/completions", json=CHAT, timeout=10),
            httpx.post(f"{root}/v1/chat/completions", json=CHAT, headers={"x-api-key": "guess"}, timeout=10),
            httpx.get(f"{root}/v1/models", timeout=10),
        ]
        assert [r.status_code for r in other] == [401] * len(other)
        assert "relay this" not in other[0].text
        received = httpx.get(f"{recording}/_recorded", timeout=10).json()
        assert [r["path"] for r in received] == ["/v1/chat/completions"], "only the CLI's chat went up"
        headers = received[0]["headers"]
        sent_key = headers.get("authorization", "") + headers.get("x-api-key", "")
        assert sent_key.removeprefix("Bearer ") == "sk-users-own", "the user's key went on upstream"
        run_key = seen["env"]["COMPACTING_PROXY_API_KEY" if cli == "opencode" else key_variable(cli)]
        assert run_key != "sk-users-own" and run_key in str(seen["headers"]), "the CLI sends the proxy's key"
        assert not [line for line in command_lines() if run_key in line or "sk-users-own" in line], (
            "not in ps"
        )
    finally:
        process.send_signal(signal.SIGTERM)  # passed on to the CLI
        try:
            _, stderr = process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            _, stderr = process.communicate()
    assert f"watch it at {root}/ui (the page asks for this session's key: {run_key})" in stderr


def key_variable(cli: str) -> str:
    return {"claude": "ANTHROPIC_AUTH_TOKEN", "gemini": "GEMINI_API_KEY"}[cli]


def command_lines() -> list[str]:
    """Every process's command line, as `ps` shows them to any user."""
    lines = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            lines.append(cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:
            continue
    return lines
