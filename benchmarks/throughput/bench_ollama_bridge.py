"""What sending an OpenAI chat to Ollama's native `/api/chat` costs, against forwarding it to `/v1`.

``python -m benchmarks.throughput.bench_ollama_bridge [--quick] [--requests N]``

The fake Ollama of the tests (``tests/support/upstreams/ollama.py``) runs in its own process; two real
``compacting-proxy`` processes stand in front of it, one finding it is Ollama (the bridge: translate
the request, set ``num_ctx``, translate the answer back) and one told ``COMPACT_UPSTREAM_KIND=openai``
(forwarding to ``/v1`` as it is). A small non-streamed chat is sent to the fake directly, then through
each proxy, interleaved request by request so the machine's noise falls on all three alike. The
report is each path's median and each proxy's overhead over the direct call, as a ratio.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

import httpx

from tests.support.processes import ROOT, child_environment, free_port
from tests.support.upstreams.proxy_server import running_proxy

BODY = {
    "model": "llama3.2:3b",
    "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi! What are your opening hours on Saturday?"},
    ],
}
WARMUP = 100
FAKE = """
import uvicorn
from tests.support.upstreams.ollama import FakeOllama
uvicorn.run(FakeOllama().app(), host="127.0.0.1", port={port}, log_level="warning")
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, help="default 1500 (200 with --quick)")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    args.requests = args.requests or (200 if args.quick else 1500)
    port = free_port()
    # `python -c` imports `tests`: the checkout first on its path, as every child of the tests has it
    fake = subprocess.Popen([sys.executable, "-c", FAKE.format(port=port)], cwd=ROOT, env=child_environment())
    url = f"http://127.0.0.1:{port}"
    try:
        _wait(url)
        with (
            running_proxy(f"{url}/v1", None) as bridge,
            running_proxy(f"{url}/v1", None, upstream_kind="openai") as v1,
        ):
            bases = {"direct": url, "bridge": bridge.base_url, "v1": v1.base_url}
            clients = {name: httpx.Client(base_url=base, timeout=30) for name, base in bases.items()}
            times: dict[str, list[float]] = {name: [] for name in clients}
            for i in range(WARMUP + args.requests):
                for name, client in clients.items():
                    started = time.perf_counter()
                    response = client.post("/v1/chat/completions", json=BODY)
                    elapsed = time.perf_counter() - started
                    response.raise_for_status()
                    if i >= WARMUP:
                        times[name].append(elapsed)
    finally:
        fake.terminate()
        fake.wait()
    median = {name: statistics.median(values) * 1000 for name, values in times.items()}
    for name, ms in median.items():
        print(f"{name:>7}: median {ms:.3f} ms over {args.requests} requests")
    over_v1 = median["v1"] - median["direct"]
    over_bridge = median["bridge"] - median["direct"]
    print(
        f"proxy overhead: /v1 {over_v1:.3f} ms, bridge {over_bridge:.3f} ms, ratio {over_bridge / over_v1:.2f}"
    )


def _wait(url: str) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/api/version").status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.05)
    raise RuntimeError("the fake Ollama did not start")


if __name__ == "__main__":
    main()
