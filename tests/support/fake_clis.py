"""Fake agent CLIs for `compacting-proxy run`: small scripts named `claude`, `codex`, `opencode`,
`aider` and `gemini` on a temporary PATH. Each records what it was given (argv, environment, the
contents of the files its variables and flags name), finds the proxy's root URL the way its real
namesake would read it, and its key where it would send it, checks that the proxy answers while it
runs (and, with `FAKE_CHAT`, sends it a chat with that key, which must be compacted), then ends as
`FAKE_MODE` says: `exit:N`, `signal:N` (kills itself), or `wait` (writes `FAKE_READY` and waits for
SIGINT, then checks the proxy is still up, and exits 130).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

SCRIPT = r"""
import json, os, re, signal, sys, time, urllib.request

name = os.path.basename(sys.argv[0])
args = sys.argv[1:]
env = dict(os.environ)
seen = {"name": name, "argv": args, "env": env, "files": {}, "pid": os.getpid()}


def after(flag):
    return args[args.index(flag) + 1] if flag in args else None


headers = {}  # the key, where the real CLI sends it
if name == "claude":
    root = env["ANTHROPIC_BASE_URL"]
    if env.get("ANTHROPIC_AUTH_TOKEN"):
        headers["authorization"] = "Bearer " + env["ANTHROPIC_AUTH_TOKEN"]
    if env.get("ANTHROPIC_API_KEY"):
        headers["x-api-key"] = env["ANTHROPIC_API_KEY"]
elif name == "codex":
    overrides = [args[i + 1] for i, a in enumerate(args) if a == "-c"]
    seen["overrides"] = overrides
    table = next(o for o in overrides if o.startswith("model_providers.compacting_proxy="))
    root = re.search(r'base_url = "([^"]+)/v1"', table).group(1)
    if found := re.search(r'env_key = "([^"]+)"', table):
        headers["authorization"] = "Bearer " + env[found.group(1)]
elif name == "opencode":
    config = json.loads(env["OPENCODE_CONFIG_CONTENT"])
    seen["config"] = config
    options = config["provider"]["compacting-proxy"]["options"]
    root = options["baseURL"][: -len("/v1")]
    if found := re.fullmatch(r"\{env:(\w+)\}", options.get("apiKey", "")):
        headers["authorization"] = "Bearer " + env[found.group(1)]
elif name == "aider":
    root = after("--openai-api-base")[: -len("/v1")]
    headers["authorization"] = "Bearer " + env["OPENAI_API_KEY"]
    if after("--model-metadata-file"):
        seen["files"]["metadata"] = json.loads(open(after("--model-metadata-file")).read())
else:
    root = env["GOOGLE_GEMINI_BASE_URL"]
    headers["x-goog-api-key"] = env["GEMINI_API_KEY"]
    path = os.path.join(env["GEMINI_CLI_HOME"], ".gemini", "settings.json")
    seen["files"]["settings"] = json.loads(open(path).read())
    seen["settings_path"] = path
seen["root"] = root
seen["headers"] = headers


def healthy():
    try:
        return urllib.request.urlopen(root + "/healthz", timeout=5).status == 200
    except OSError:
        return False


seen["healthy"] = healthy()
if env.get("FAKE_CHAT"):
    big = "x" * 4000
    messages = [{"role": "system", "content": "You are a fake agent."}]
    for i in range(40):
        messages += [{"role": "user", "content": f"step {i}: " + big}, {"role": "assistant", "content": "ok"}]
    messages.append({"role": "user", "content": "and now?"})
    body = json.dumps({"model": env.get("FAKE_MODEL", "stub"), "messages": messages}).encode()
    request = urllib.request.Request(
        root + "/v1/chat/completions", data=body, headers={"content-type": "application/json", **headers}
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        seen["chat"] = {
            "status": answer.status,
            "before": answer.headers.get("x-compaction-tokens-before"),
            "after": answer.headers.get("x-compaction-tokens-after"),
        }


def save():
    with open(env["FAKE_RECORD"], "w") as out:
        json.dump(seen, out)


mode = env.get("FAKE_MODE", "exit:0")
if mode == "wait":
    def on_sigint(signum, frame):
        time.sleep(1.0)  # a proxy that got the Ctrl-C too has stopped by then
        seen["healthy_after_sigint"] = healthy()
        save()
        sys.exit(130)

    signal.signal(signal.SIGINT, on_sigint)
    save()
    open(env["FAKE_READY"], "w").close()
    for _ in range(600):
        time.sleep(0.1)
    sys.exit(99)
save()
kind, _, number = mode.partition(":")
if kind == "signal":
    if int(number) != signal.SIGKILL:
        signal.signal(int(number), signal.SIG_DFL)
    os.kill(os.getpid(), int(number))
    time.sleep(5)
sys.exit(int(number))
"""


def install(
    bin_dir: Path, names: tuple[str, ...] = ("claude", "codex", "opencode", "aider", "gemini")
) -> Path:
    """Write the fake CLIs into `bin_dir`; `bin_dir`."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name in names:
        path = bin_dir / name
        path.write_text(f"#!{sys.executable}\n{SCRIPT}")
        path.chmod(0o755)
    return bin_dir


def recorded(path: Path) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(path.read_text())
    return value
