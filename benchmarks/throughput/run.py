"""One command for the whole benchmark: ``python -m benchmarks.throughput.run [--quick]``.

It starts the fast fake upstream (``tests/support/upstreams/fast.py``) and every target in front of it on free loopback
ports, each as its own process, waits until each answers, checks one request of every body, then
runs the load matrix with ``wrk`` (small and large chat at 1/16/64 clients, plus streamed small
chats at 16), a streaming time-to-first-event run (``ttfb.py``), and samples each server's RSS
throughout. Cells are interleaved: for each cell every target runs in turn (in a rotating order),
``--rounds`` times, and the median is kept, so a noisy neighbour hits all targets alike. Every
figure is also given as a ratio to ``bare-httpx`` measured in the same run.

Targets:

- ``direct``: wrk straight at the fake upstream.
- ``bare-httpx``, ``bare-aiohttp`` (and with ``--all-bare``: ``bare-httpx-tuned``,
  ``bare-httpx-fixedpool``, ``bare-httpx-lean``, ``bare-aiohttp-lean``, ``bare-aiohttp-native``):
  ``bare_passthrough.py`` with that transport.
- ``proxy-under-line``: the real ``compacting-proxy`` with ``COMPACT_WINDOW=1000000``.
- ``proxy-before`` (``--before PATH``): ``proxy-under-line`` run by another checkout's
  ``compacting-proxy`` (e.g. ``main``'s ``.venv/bin/compacting-proxy``), for a before/after in one run.
- ``proxy-compacting``: the same with windows small enough that every request compacts
  (``--large-window`` for the large chat, ``--small-window`` for the small ones).
- ``litellm`` (``--litellm``): LiteLLM's proxy, installed into its own venv under
  ``~/.cache/compacting-proxy/litellm-venv`` on first use.

Targets that cannot run (no ``compacting-proxy`` yet, LiteLLM failed to install) are skipped
with a note. Everything listens on and sends to 127.0.0.1 only; every process started here gets
a lifetime and is stopped at the end (and dies with this script, by ``PR_SET_PDEATHSIG``).
Results: Markdown on stdout, and ``benchmarks/results/<time>.{md,json}``.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import http.client
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from benchmarks.throughput import ab, chat_bodies, ttfb
from tests.support.processes import free_port
from tests.support.upstreams import fast

HERE = Path(__file__).resolve().parent

PYTHON = sys.executable
HOST = "127.0.0.1"
BASELINE = "bare-httpx"
BENCH_KEY = "sk-bench-5f2c9a7e41d84b6f9e0c3a1b7d6e8f20"  # LiteLLM insists on a master key
DEFAULT_TARGETS = ["direct", "bare-httpx", "bare-aiohttp", "proxy-under-line", "proxy-compacting"]
EXTRA_BARE = [
    "bare-httpx-tuned",
    "bare-httpx-fixedpool",
    "bare-httpx-lean",
    "bare-aiohttp-lean",
    "bare-aiohttp-native",
]
LITELLM_VENV = Path.home() / ".cache" / "compacting-proxy" / "litellm-venv"


# --------------------------------------------------------------------------- processes


def _die_with_parent() -> None:
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@dataclass
class Instance:
    """One server process (or, for ``direct``, the fake upstream itself)."""

    name: str
    argv: list[str] | None
    env: dict[str, str] = field(default_factory=dict)
    port: int = 0
    ready_timeout: float = 30.0
    proc: subprocess.Popen[bytes] | None = None
    pid: int | None = None
    log: Path | None = None
    rss_idle: int = 0
    rss_peak: int = 0
    error: str | None = None

    def start(self, logdir: Path) -> None:
        if self.argv is None:
            return
        self.log = logdir / f"{self.name}.log"
        env = {**os.environ, **self.env}
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(
                self.argv,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                preexec_fn=_die_with_parent,
            )
        self.pid = self.proc.pid

    def wait_ready(self, body: bytes) -> None:
        deadline = time.monotonic() + self.ready_timeout
        last = "no answer"
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"exited with {self.proc.returncode}: {self.log_tail()}")
            try:
                status, _, _ = post(self.port, body, timeout=5)
                if status == 200:
                    return
                last = f"HTTP {status}"
            except OSError as exc:
                last = repr(exc)
            time.sleep(0.2)
        raise RuntimeError(f"not ready after {self.ready_timeout:.0f} s ({last}): {self.log_tail()}")

    def log_tail(self, n: int = 600) -> str:
        if self.log is None or not self.log.exists():
            return ""
        return self.log.read_bytes()[-n:].decode(errors="replace").strip().replace("\n", " | ")

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)


def post(port: int, body: bytes, timeout: float = 30) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection(HOST, port, timeout=timeout)
    try:
        conn.request(
            "POST",
            "/v1/chat/completions",
            body=body,
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {BENCH_KEY}"},
        )
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


class RssSampler(threading.Thread):
    """Samples the RSS of every instance (with its children) until stopped."""

    def __init__(self, instances: list[Instance], period: float = 0.25) -> None:
        super().__init__(daemon=True)
        self.instances = instances
        self.period = period
        self.halt = threading.Event()

    @staticmethod
    def rss(pid: int) -> int:
        import psutil  # type: ignore[import-untyped]  # its one use here; no stubs installed for it

        try:
            proc = psutil.Process(pid)
            procs = [proc, *proc.children(recursive=True)]
        except psutil.Error:
            return 0
        total = 0
        for p in procs:
            with contextlib.suppress(psutil.Error):
                total += p.memory_info().rss
        return total

    def run(self) -> None:
        while not self.halt.wait(self.period):
            for inst in self.instances:
                if inst.pid:
                    inst.rss_peak = max(inst.rss_peak, self.rss(inst.pid))


# --------------------------------------------------------------------------- targets


@dataclass
class Target:
    name: str
    instances: dict[str, Instance]  # body name -> the instance that serves it
    note: str = ""
    skipped: str | None = None

    def for_body(self, body: str) -> Instance:
        return self.instances.get(body) or self.instances["*"]

    def unique(self) -> list[Instance]:
        seen: dict[int, Instance] = {}
        for inst in self.instances.values():
            seen[id(inst)] = inst
        return list(seen.values())


def proxy_available() -> str | None:
    """None if ``compacting-proxy`` can run, else why not."""
    exe = Path(PYTHON).parent / "compacting-proxy"
    if not exe.exists():
        return f"{exe} not installed"
    check = subprocess.run([PYTHON, "-c", "import proxy.cli as c; c.main"], capture_output=True, timeout=60)
    if check.returncode != 0:
        return (
            "proxy.cli.main not importable yet: "
            + check.stderr.decode(errors="replace").strip().splitlines()[-1]
        )
    return None


def proxy_instance(
    name: str,
    upstream_port: int,
    window: int,
    extra: str,
    code: Path | None = None,
    exe: str | None = None,
) -> Instance:
    """The proxy of this checkout, or with `code` another checkout's `proxy` package on this venv,
    or with `exe` another checkout's own command."""
    port = free_port()
    env = {"COMPACT_UPSTREAM_URL": f"http://{HOST}:{upstream_port}/v1", "COMPACT_WINDOW": str(window)}
    if code is not None:  # the console script's own folder comes first on sys.path, then PYTHONPATH
        env["PYTHONPATH"] = str(code)
    return Instance(
        name,
        [
            exe or str(Path(PYTHON).parent / "compacting-proxy"),
            "--host",
            HOST,
            "--port",
            str(port),
            *extra.split(),
        ],
        env=env,
        port=port,
    )


def bare_instance(name: str, transport: str, upstream_port: int, lifetime: float) -> Instance:
    port = free_port()
    argv = [
        PYTHON,
        str(HERE / "bare_passthrough.py"),
        "--port",
        str(port),
        "--transport",
        transport,
        "--upstream",
        f"http://{HOST}:{upstream_port}",
        "--lifetime",
        str(int(lifetime)),
    ]
    return Instance(name, argv, port=port)


def ensure_litellm(timeout: float) -> tuple[Path | None, str]:
    exe = LITELLM_VENV / "bin" / "litellm"
    if exe.exists():
        return exe, "cached"
    start = time.monotonic()
    try:
        LITELLM_VENV.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [sys.executable, "-m", "venv", str(LITELLM_VENV)], check=True, timeout=120, capture_output=True
        )
        pip = [str(LITELLM_VENV / "bin" / "python"), "-m", "pip", "install", "-q"]
        left = max(30.0, timeout - (time.monotonic() - start))
        subprocess.run([*pip, "litellm[proxy]"], check=True, timeout=left, capture_output=True)
    except (subprocess.SubprocessError, OSError) as exc:
        shutil.rmtree(LITELLM_VENV, ignore_errors=True)
        return None, f"install failed or took over {timeout:.0f} s: {str(exc)[:200]}"
    return (exe if exe.exists() else None), f"installed in {time.monotonic() - start:.0f} s"


def litellm_instance(exe: Path, upstream_port: int, workdir: Path) -> Instance:
    port = free_port()
    config = workdir / "litellm.yaml"
    config.write_text(
        "model_list:\n"
        "  - model_name: '*'\n"
        "    litellm_params:\n"
        "      model: 'openai/*'\n"
        f"      api_base: 'http://{HOST}:{upstream_port}/v1'\n"
        "      api_key: 'sk-fake'\n"
        "litellm_settings:\n"
        "  telemetry: false\n"
        "  drop_params: false\n"
    )
    env = {
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "LITELLM_LOG": "ERROR",
        "LITELLM_TELEMETRY": "False",
        "DISABLE_SCHEMA_UPDATE": "True",
        "NO_DOCS": "True",
        "LITELLM_MASTER_KEY": BENCH_KEY,
    }
    argv = [str(exe), "--config", str(config), "--host", HOST, "--port", str(port), "--num_workers", "1"]
    return Instance("litellm", argv, env=env, port=port, ready_timeout=180.0)


# --------------------------------------------------------------------------- measuring


def run_wrk(port: int, body_path: Path, clients: int, duration: float, timeout: float) -> dict[str, Any]:
    seconds = max(1, round(duration))  # wrk takes whole seconds only
    cmd = [
        "wrk",
        "-t1",
        f"-c{clients}",
        f"-d{seconds}s",
        "--timeout",
        "30s",
        "--latency",
        "-s",
        str(HERE / "post_body.lua"),
        f"http://{HOST}:{port}/v1/chat/completions",
    ]
    try:
        out = subprocess.run(
            cmd,
            env={**os.environ, "BENCH_BODY": str(body_path), "BENCH_KEY": BENCH_KEY},
            capture_output=True,
            timeout=timeout,
            text=True,
        )
    except subprocess.TimeoutExpired:
        return {"error": "wrk timed out"}
    for line in out.stdout.splitlines():
        if line.startswith("BENCHJSON "):
            raw = json.loads(line.split(" ", 1)[1])
            secs = raw["duration_us"] / 1e6
            errors = raw["connect"] + raw["read"] + raw["write"] + raw["timeout"]
            return {
                "rps": raw["requests"] / secs if secs else 0.0,
                "p50_ms": raw["p50_us"] / 1000,
                "p99_ms": raw["p99_us"] / 1000,
                "requests": raw["requests"],
                "non2xx": raw["status"],
                "socket_errors": errors,
            }
    return {"error": (out.stderr or out.stdout)[-300:]}


def settle(inst: Instance, body: bytes) -> None:
    """Wait out what wrk left queued (a slow target may still be working off its backlog)."""
    with contextlib.suppress(OSError):
        post(inst.port, body, timeout=120)


def probe(inst: Instance, name: str, body: bytes) -> dict[str, Any]:
    """One request of this body: did it work, and did the upstream get a smaller body?"""
    try:
        status, headers, payload = post(inst.port, body)
    except OSError as exc:
        return {"ok": False, "detail": repr(exc)}
    result: dict[str, Any] = {
        "ok": status == 200,
        "status": status,
        "x_compaction": {k: v for k, v in headers.items() if k.startswith("x-compaction")},
    }
    if name.endswith("stream"):
        result["ok"] = result["ok"] and b"[DONE]" in payload
        return result
    try:
        seen = orjson.loads(payload)["usage"]["prompt_tokens"]
    except (orjson.JSONDecodeError, KeyError, TypeError):
        result["ok"] = False
        result["detail"] = payload[:200].decode(errors="replace")
        return result
    sent = len(body) // 4
    result.update(sent_tokens=sent, upstream_tokens=seen, compacted=seen < sent * 0.95)
    return result


@dataclass
class Cell:
    body: str
    clients: int

    @property
    def key(self) -> str:
        return f"{self.body}@{self.clients}"


def matrix(bodies: list[str], clients: list[int], stream_clients: int | None) -> list[Cell]:
    cells = [Cell(b, c) for b in bodies for c in clients]
    if stream_clients:
        cells.append(Cell("small-stream", stream_clients))
    return cells


def median_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    good = [r for r in runs if "error" not in r]
    if not good:
        return {"error": runs[0].get("error", "no run") if runs else "no run"}
    return {
        "rps": statistics.median(r["rps"] for r in good),
        "p50_ms": statistics.median(r["p50_ms"] for r in good),
        "p99_ms": statistics.median(r["p99_ms"] for r in good),
        "non2xx": sum(r["non2xx"] for r in good),
        "socket_errors": sum(r["socket_errors"] for r in good),
        "rounds": len(good),
        "all_rps": [round(r["rps"]) for r in good],
    }


# --------------------------------------------------------------------------- report


def _ratio(value: float | None, base: float | None) -> str:
    if value is None or not base:
        return ""
    return f" ({value / base:.2f}x)"


def _fmt_rps(cell: dict[str, Any] | None, base: dict[str, Any] | None) -> str:
    if not cell or "error" in cell:
        return "—"
    errs = cell["non2xx"] + cell["socket_errors"]
    return f"{cell['rps']:,.0f}{_ratio(cell['rps'], base.get('rps') if base else None)}" + (
        f" ⚠{errs} err" if errs else ""
    )


def _fmt_ms(cell: dict[str, Any] | None, key: str, base: dict[str, Any] | None) -> str:
    if not cell or "error" in cell:
        return "—"
    return f"{cell[key]:.2f}{_ratio(cell[key], base.get(key) if base else None)}"


def report(res: dict[str, Any]) -> str:
    targets: list[str] = res["targets_run"]
    results: dict[str, dict[str, Any]] = res["results"]
    lines = [f"# Benchmark run {res['started']}", ""]
    lines.append(
        f"`{res['command']}` — {res['rounds']} round(s) x {res['duration']} s per cell, wrk -t1, medians "
        f"of rounds; ratios (x) against `{BASELINE}` in this run. Machine: {os.cpu_count()} cores, shared."
    )
    lines.append("")
    base = results.get(BASELINE, {})
    direct = results.get("direct", {})
    for body in res["bodies"]:
        size = res["body_sizes"][body]
        lines += [f"## {body} chat ({size / 1024:,.1f} KB), non-streaming", ""]
        head = "| target |" + "".join(f" req/s @{c} | p50 ms @{c} | p99 ms @{c} |" for c in res["clients"])
        lines += [head, "|---" * (1 + 3 * len(res["clients"])) + "|"]
        for t in targets:
            row = f"| {t} |"
            for c in res["clients"]:
                cell = results.get(t, {}).get(f"{body}@{c}")
                bcell = base.get(f"{body}@{c}")
                p50, p99 = _fmt_ms(cell, "p50_ms", bcell), _fmt_ms(cell, "p99_ms", bcell)
                row += f" {_fmt_rps(cell, bcell)} | {p50} | {p99} |"
            lines.append(row)
        lines.append("")
        c1 = res["clients"][0]
        dcell = direct.get(f"{body}@{c1}")
        if dcell and "error" not in dcell:
            added: list[str] = []
            for t in targets:
                cell = results.get(t, {}).get(f"{body}@{c1}")
                if t != "direct" and cell and "error" not in cell:
                    added.append(f"{t} +{cell['p50_ms'] - dcell['p50_ms']:.2f} ms")
            lines += [f"Added p50 over direct at {c1} client(s): " + ", ".join(added) + ".", ""]

    lines += ["## Streaming and memory", ""]
    sc = res.get("stream_clients")
    lines += [
        f"| target | stream req/s @{sc} | first event ms (p50) | added vs direct | "
        "headers ms | stream total ms | relayed chunk by chunk | events | RSS idle MB | RSS peak MB |",
        "|---" * 10 + "|",
    ]
    dt = res["ttfb"].get("direct", {})
    bt = res["ttfb"].get(BASELINE, {})
    for t in targets:
        tt = res["ttfb"].get(t, {})
        cell = results.get(t, {}).get(f"small-stream@{sc}") if sc else None
        first = tt.get("first_event_ms")
        added_first = (
            f"+{first - dt['first_event_ms']:.2f}" if first is not None and dt.get("first_event_ms") else ""
        )
        mem = res["memory"].get(t, {})
        bmem = res["memory"].get(BASELINE, {})
        rps = _fmt_rps(cell, base.get(f"small-stream@{sc}")) if sc else ""
        first_s = (f"{first:.2f}" if first is not None else "—") + _ratio(first, bt.get("first_event_ms"))
        streamed = "yes" if tt.get("streamed") else "NO" if tt else "—"
        peak = f"{mem.get('peak_mb', 0):.0f}" + _ratio(mem.get("peak_mb"), bmem.get("peak_mb"))
        lines.append(
            f"| {t} | {rps} | {first_s} | {added_first} | {tt.get('headers_ms', 0) or 0:.2f} | "
            f"{tt.get('total_ms', 0) or 0:.1f} | {streamed} | {tt.get('events', '—')} | "
            f"{mem.get('idle_mb', 0):.0f} | {peak} |"
        )
    lines += [
        "",
        f"TTFB: {res['ttfb_requests']} sequential streamed small chats on one keep-alive connection, "
        f"upstream events {res['stream_delay_ms']} ms apart ({res['stream_events']} events).",
    ]

    lines += ["", "## Checks", ""]
    for t in targets:
        for body, pr in res["probes"].get(t, {}).items():
            if body.endswith("stream"):
                desc = "SSE ok" if pr.get("ok") else f"FAILED {pr}"
            elif pr.get("ok"):
                desc = (
                    f"200, upstream saw ~{pr['upstream_tokens']:,} of ~{pr['sent_tokens']:,} tokens "
                    f"({'compacted' if pr['compacted'] else 'unchanged'})"
                )
                if pr.get("x_compaction"):
                    desc += f", {pr['x_compaction']}"
            else:
                desc = f"FAILED {pr}"
            lines.append(f"- {t} / {body}: {desc}")
    for note in res["notes"]:
        lines.append(f"- note: {note}")

    against = ab.baseline_lines(res)
    if against:
        lines += ["", "## Against the baselines (--baseline)", "", *against]
    goals = goal_lines(res)
    if goals:
        lines += ["", "## Goals (issue 6)", "", *goals]
    return "\n".join(lines) + "\n"


def goal_lines(res: dict[str, Any]) -> list[str]:
    results = res["results"]
    out = []

    def get(t: str, key: str, field_: str) -> float | None:
        cell = results.get(t, {}).get(key)
        return cell[field_] if cell and "error" not in cell else None

    for cand in [t for t in res["targets_run"] if t.startswith(("proxy", "bare-aiohttp"))]:
        rps = get(cand, "small@16", "rps")
        base = get(BASELINE, "small@16", "rps")
        if rps and base:
            out.append(
                f"- {cand}: small chat @16 = {rps / base:.2f}x {BASELINE} (goal ≥ 2x): "
                f"{'met' if rps >= 2 * base else 'NOT met'}"
            )
        lit = get("litellm", "small@16", "rps")
        if rps and lit:
            out.append(
                f"- {cand}: small chat @16 = {rps / lit:.1f}x litellm (goal ≥ 10x): "
                f"{'met' if rps >= 10 * lit else 'NOT met'}"
            )
        p50, d50 = get(cand, "small@1", "p50_ms"), get("direct", "small@1", "p50_ms")
        if p50 is not None and d50 is not None:
            out.append(
                f"- {cand}: added p50 at 1 client = {p50 - d50:.2f} ms (goal < 1 ms): "
                f"{'met' if p50 - d50 < 1 else 'NOT met'}"
            )
    return out


# --------------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="2 s cells, 1 round, fewer TTFB samples (< 3 min)")
    p.add_argument("--targets", help=f"comma-separated targets (default: {','.join(DEFAULT_TARGETS)})")
    p.add_argument("--all-bare", action="store_true", help="also " + ", ".join(EXTRA_BARE))
    p.add_argument("--litellm", action="store_true", help="also LiteLLM (installed on first use)")
    p.add_argument("--litellm-install-timeout", type=float, default=600.0)
    p.add_argument("--bodies", default="small,large")
    p.add_argument("--clients", default="1,16,64")
    p.add_argument("--stream-clients", type=int, default=16, help="0: no streamed load cell")
    p.add_argument("--duration", type=int, help="whole seconds per wrk run (default 5, quick 2)")
    p.add_argument("--rounds", type=int, help="interleaved rounds per cell (default 2, quick 1)")
    p.add_argument("--warmup", type=int, default=1, help="whole seconds of load on each instance first")
    p.add_argument("--ttfb-requests", type=int, help="streamed requests for TTFB (default 40, quick 10)")
    p.add_argument("--stream-delay-ms", type=float, default=10.0)
    p.add_argument("--large-window", type=int, default=20000, help="COMPACT_WINDOW for the large chat")
    p.add_argument("--small-window", type=int, default=500, help="COMPACT_WINDOW for the small chats")
    p.add_argument("--proxy-args", default="--no-access-log", help="extra compacting-proxy arguments")
    p.add_argument(
        "--baseline",
        type=Path,
        action="append",
        default=[],
        metavar="DIR",
        help="another checkout (e.g. `git archive REV | tar -x -C DIR`), run as the target "
        "proxy-under-line@<DIR's name> on this venv; may be given more than once",
    )
    p.add_argument("--before", help="another checkout's compacting-proxy, run as the proxy-before target")
    p.add_argument("--out", type=Path, default=HERE.parent / "results")
    args = p.parse_args(argv)
    args.duration = args.duration or (2 if args.quick else 5)
    args.rounds = args.rounds or (1 if args.quick else 2)
    args.ttfb_requests = args.ttfb_requests or (10 if args.quick else 40)
    return args


def build_targets(
    names: list[str], args: argparse.Namespace, up: Instance, lifetime: float, workdir: Path, notes: list[str]
) -> list[Target]:
    transports = {
        "bare-httpx": "httpx",
        "bare-aiohttp": "aiohttp",
        "bare-httpx-tuned": "httpx-tuned",
        "bare-httpx-fixedpool": "httpx-fixedpool",
        "bare-httpx-lean": "httpx-lean",
        "bare-aiohttp-lean": "aiohttp-lean",
        "bare-aiohttp-native": "aiohttp-native",
    }
    proxy_missing = proxy_available() if any(n.startswith("proxy") for n in names) else None
    baselines = {path.name: path.resolve() for path in args.baseline}
    targets = []
    for name in names:
        if name == "direct":
            targets.append(Target(name, {"*": up}))
        elif name in transports:
            targets.append(Target(name, {"*": bare_instance(name, transports[name], up.port, lifetime)}))
        elif name.partition("@")[0] == "proxy-under-line":
            if proxy_missing:
                notes.append(f"{name} skipped: {proxy_missing}")
                continue
            code = baselines.get(name.partition("@")[2])
            instance = proxy_instance(name, up.port, 1_000_000, args.proxy_args, code)
            targets.append(Target(name, {"*": instance}, note=f"the code of {code}" if code else ""))
        elif name == "proxy-before":
            if not args.before:
                raise SystemExit("the proxy-before target needs --before PATH")
            before = proxy_instance(name, up.port, 1_000_000, args.proxy_args, exe=args.before)
            targets.append(Target(name, {"*": before}, note=f"{args.before}, COMPACT_WINDOW=1000000"))
        elif name == "proxy-compacting":
            if proxy_missing:
                notes.append(f"{name} skipped: {proxy_missing}")
                continue
            small = proxy_instance(f"{name}-small", up.port, args.small_window, args.proxy_args)
            large = proxy_instance(f"{name}-large", up.port, args.large_window, args.proxy_args)
            targets.append(
                Target(
                    name,
                    {"*": small, "large": large},
                    note=f"COMPACT_WINDOW={args.small_window} (small), {args.large_window} (large)",
                )
            )
        elif name == "litellm":
            exe, how = ensure_litellm(args.litellm_install_timeout)
            if exe is None:
                notes.append(f"litellm skipped: {how}")
                continue
            notes.append(f"litellm {how}: {litellm_version()}")
            targets.append(Target(name, {"*": litellm_instance(exe, up.port, workdir)}))
        else:
            raise SystemExit(f"unknown target {name!r}")
    return targets


def litellm_version() -> str:
    with contextlib.suppress(Exception):
        out = subprocess.run(
            [
                str(LITELLM_VENV / "bin" / "python"),
                "-c",
                "import importlib.metadata as m; print(m.version('litellm'))",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        return "litellm " + out.stdout.strip()
    return "litellm ?"


@contextlib.contextmanager
def running(instances: list[Instance]) -> Iterator[None]:
    try:
        yield
    finally:
        for inst in reversed(instances):
            inst.stop()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if shutil.which("wrk") is None:
        raise SystemExit("wrk not found: apt-get install -y wrk")
    names = args.targets.split(",") if args.targets else list(DEFAULT_TARGETS)
    if args.all_bare:
        names += [n for n in EXTRA_BARE if n not in names]
    if args.litellm and "litellm" not in names:
        names.append("litellm")
    names += [f"proxy-under-line@{path.name}" for path in args.baseline]
    bodies = [b for b in args.bodies.split(",") if b]
    clients = [int(c) for c in args.clients.split(",") if c]
    stream_clients = args.stream_clients or None
    cells = matrix(bodies, clients, stream_clients)
    budget = len(cells) * len(names) * args.rounds * (args.duration + 1.5) + len(names) * 60 + 600
    signal.alarm(int(budget + args.litellm_install_timeout))  # the whole run stops by itself

    started = time.strftime("%Y-%m-%d %H:%M:%S")
    workdir = Path(tempfile.mkdtemp(prefix="bench-"))
    body_paths = chat_bodies.write_bodies(workdir)
    stream_body = orjson.loads(body_paths["small-stream"].read_bytes())
    ttfb_body = orjson.dumps({**stream_body, "model": f"fake-model@delay={args.stream_delay_ms:g}"})
    stream_events = len(chat_bodies_events(stream_body))
    notes: list[str] = []
    small_body = body_paths["small"].read_bytes()

    up_port = free_port()
    up = Instance(
        "fake-upstream",
        fast.command(up_port, int(budget)),
        port=up_port,
    )
    up.start(workdir)
    up.wait_ready(body_paths["small"].read_bytes())
    targets = build_targets(names, args, up, budget, workdir, notes)
    instances = [up] + [i for t in targets for i in t.unique() if i is not up]
    sampler = RssSampler(instances)
    probes: dict[str, dict[str, Any]] = {}
    ttfb_res: dict[str, Any] = {}
    raw: dict[str, dict[str, list[dict[str, Any]]]] = {t.name: {} for t in targets}
    with running(instances):
        for inst in instances[1:]:
            inst.start(workdir)
        live: list[Target] = []
        for t in targets:
            try:
                for inst in t.unique():
                    inst.wait_ready(body_paths["small"].read_bytes())
            except RuntimeError as exc:
                notes.append(f"{t.name} skipped: {exc}")
                continue
            live.append(t)
        for inst in instances:
            if inst.pid:
                inst.rss_idle = RssSampler.rss(inst.pid)
        sampler.start()
        for t in live:
            probes[t.name] = {
                b: probe(t.for_body(b), b, body_paths[b].read_bytes())
                for b in [*bodies, *(["small-stream"] if stream_clients else [])]
            }
            for b in {c.body for c in cells}:
                inst = t.for_body(b)
                run_wrk(inst.port, body_paths[b], 16, args.warmup, timeout=args.warmup + 60)
                settle(inst, small_body)
        for cell in cells:
            for rnd in range(args.rounds):
                shift = rnd % max(len(live), 1)
                for t in live[shift:] + live[:shift]:
                    inst = t.for_body(cell.body)
                    cpu = ab.cpu_seconds_of(inst.pid)
                    r = run_wrk(
                        inst.port,
                        body_paths[cell.body],
                        cell.clients,
                        args.duration,
                        timeout=args.duration + 90,
                    )
                    after = ab.cpu_seconds_of(inst.pid)
                    if "error" not in r and cpu is not None and after is not None and r["requests"]:
                        r["cpu_us"] = (after - cpu) / r["requests"] * 1e6
                    raw[t.name].setdefault(cell.key, []).append(r)
                    settle(inst, small_body)
                    print(
                        f"  {cell.key:<16} round {rnd + 1} {t.name:<22} "
                        + (
                            f"{r['rps']:8.0f} req/s  p50 {r['p50_ms']:.2f} ms"
                            if "error" not in r
                            else r["error"]
                        ),
                        file=sys.stderr,
                        flush=True,
                    )
        for t in live:
            inst = t.for_body("small-stream")
            try:
                m = ttfb.measure(
                    HOST, inst.port, "/v1/chat/completions", ttfb_body, args.ttfb_requests, key=BENCH_KEY
                )
                m.pop("samples", None)
                ttfb_res[t.name] = m
            except OSError as exc:
                ttfb_res[t.name] = {"error": repr(exc)}
        sampler.halt.set()
        sampler.join(timeout=5)

    memory = {}
    for t in live:
        insts = t.unique()
        memory[t.name] = {
            "idle_mb": max(i.rss_idle for i in insts) / 2**20,
            "peak_mb": max(i.rss_peak for i in insts) / 2**20,
        }
    for t in live:
        if t.note:
            notes.append(f"{t.name}: {t.note}")
    res = {
        "started": started,
        "command": "python -m benchmarks.throughput.run "
        + " ".join(argv if argv is not None else sys.argv[1:]),
        "rounds": args.rounds,
        "duration": args.duration,
        "bodies": bodies,
        "clients": clients,
        "stream_clients": stream_clients,
        "ttfb_requests": args.ttfb_requests,
        "stream_delay_ms": args.stream_delay_ms,
        "stream_events": stream_events,
        "body_sizes": {b: p.stat().st_size for b, p in body_paths.items()},
        "targets_run": [t.name for t in live],
        "results": {t: {k: median_of(v) for k, v in cells_.items()} for t, cells_ in raw.items()},
        "raw": raw,
        "probes": probes,
        "ttfb": ttfb_res,
        "memory": memory,
        "notes": notes,
        "versions": versions(),
    }
    md = report(res)
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    (args.out / f"{stamp}.md").write_text(md)
    (args.out / f"{stamp}.json").write_text(json.dumps(res, indent=1))
    print(md)
    print(f"(written to {args.out / stamp}.md and .json)", file=sys.stderr)
    shutil.rmtree(workdir, ignore_errors=True)
    return 0


def chat_bodies_events(stream_body: dict[str, Any]) -> list[str]:
    """The SSE events the fake upstream sends for this body (5 content chunks by default)."""
    usage = bool(stream_body.get("stream_options", {}).get("include_usage"))
    return ["role", *["content"] * 5, "finish", *(["usage"] if usage else []), "[DONE]"]


def versions() -> dict[str, str]:
    from importlib import metadata

    out = {"python": sys.version.split()[0]}
    for dist in (
        "httpx",
        "httpcore",
        "aiohttp",
        "httpx-aiohttp",
        "uvicorn",
        "fastapi",
        "starlette",
        "uvloop",
        "httptools",
        "anyio",
        "sniffio",
        "compacting-proxy",
    ):
        with contextlib.suppress(metadata.PackageNotFoundError):
            out[dist] = metadata.version(dist)
    with contextlib.suppress(Exception):
        out["wrk"] = subprocess.run(["wrk", "-v"], capture_output=True, text=True, timeout=10).stdout.split()[
            1
        ]
    return out


if __name__ == "__main__":
    raise SystemExit(main())
