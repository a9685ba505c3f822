"""Whether a change to the hot path left the proxy's output byte for byte the same: the bytes it
forwards upstream and the answer of `/compact`, for varied bodies at several windows, cold and warm,
hashed, against another checkout:

    python -m benchmarks.engine.check_same_output --baseline DIR

`DIR` is another checkout (e.g. `git worktree add DIR 5cfd5c1`), whose `proxy` package runs on this
venv (`PYTHONPATH`), as `run.py --baseline` does. Each checkout runs in its own process over
`httpx.ASGITransport`, in front of a recording mock upstream; every case's hashes are compared and
the differing ones named. Exit status 1 when any differs.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import orjson

WINDOWS = (500, 4_000, 32_768, 200_000, 1_000_000)


def bodies() -> dict[str, bytes]:
    """Small to 2,000-message chats; heavy text (Chinese, digits), numbers past 64 bits and beyond a
    double, a lone surrogate escape, tools, a reply limit and vendor fields."""
    from benchmarks.engine.bench_engine import history
    from benchmarks.throughput.chat_bodies import large_chat, small_chat
    from tests.support.conversations import agent_chat, bike_shop_chat

    small, large = small_chat(), large_chat()
    chinese = [
        {"role": "system", "content": "你是一个乐于助人的助手。"},
        *[
            {"role": role, "content": f"这是第{i}段很长的中文内容。" * 40}
            for i, role in enumerate(["user", "assistant"] * 30)
        ],
        {"role": "user", "content": "总结一下。"},
    ]
    digits = {"model": "m", "messages": agent_chat(40, seed=3, result_items=20), "max_tokens": 3000}
    return {
        "small": orjson.dumps(small),
        "large": orjson.dumps(large),
        "history-2000": history(2000),
        "history-300": history(300),
        "bike-shop": orjson.dumps({"model": "m", "messages": bike_shop_chat(), "tools": small.get("tools")}),
        "chinese": orjson.dumps({"model": "qwen", "messages": chinese, "max_completion_tokens": 500}),
        "agent-digits": orjson.dumps(digits),
        "big-numbers": orjson.dumps({**small, "seed": 1, "extra": [1.5, -3]})[:-1]
        + b',"huge":100000000000000000000000000000,"far":1e400,"vendor":{"x":[1,2,{"y":null}]}}',
        "surrogate": b'{"model":"m","messages":[{"role":"user","content":"lone \\ud800 half"},'
        b'{"role":"assistant","content":"ok"},{"role":"user","content":"again \\udfff"}]}',
    }


async def outputs(cases: Path) -> dict[str, str]:
    """Every case's hash (the bodies read from the files in `cases`), from the `proxy` package on
    `sys.path`."""
    import httpx

    from proxy.server.app import create_app
    from proxy.settings import Settings

    seen: list[bytes] = []

    def upstream(request: httpx.Request) -> httpx.Response:
        seen.append(request.content)
        answer = {"choices": [{"message": {"role": "assistant", "content": "ok"}}], "usage": {}}
        return httpx.Response(200, json=answer)

    hashes: dict[str, str] = {}
    for window in WINDOWS:
        app = create_app(
            Settings(upstream_url="http://upstream.test/v1", window=window),
            transport=httpx.MockTransport(upstream),
        )
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as client:
                for path_of_case in sorted(cases.iterdir()):
                    name, body = path_of_case.name, path_of_case.read_bytes()
                    for turn in ("cold", "warm"):  # the same body again: the memos warm
                        for path in ("/v1/chat/completions", "/compact"):
                            seen.clear()
                            response = await client.post(path, content=body)
                            digest = hashlib.sha256(str(response.status_code).encode())
                            digest.update(b"".join(seen) + b"\0" + response.content)
                            headers = sorted(
                                (k, v) for k, v in response.headers.items() if k.startswith("x-comp")
                            )
                            digest.update(json.dumps(headers).encode())
                            hashes[f"{name} window={window} {turn} {path}"] = digest.hexdigest()
    return hashes


def run(folder: str | None, cases: Path) -> dict[str, str]:
    """The hashes of `folder`'s proxy (this checkout's when None), in a process of its own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMPACT_")}
    env["PYTHONPATH"] = str(Path(folder or Path(__file__).parents[2]).resolve())
    command = [sys.executable, __file__, "--print", str(cases)]
    done = subprocess.run(command, env=env, capture_output=True, check=True, cwd=env["PYTHONPATH"])
    hashes: dict[str, str] = json.loads(done.stdout.decode().splitlines()[-1])
    return hashes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", help="another checkout's folder")
    parser.add_argument("--print", type=Path, help="print the hashes of the bodies in this folder as JSON")
    args = parser.parse_args()
    if args.print:
        print(json.dumps(asyncio.run(outputs(args.print))))
        return
    with tempfile.TemporaryDirectory() as folder:
        cases = Path(folder)
        for name, body in bodies().items():
            (cases / name).write_bytes(body)
        ours = run(None, cases)
        theirs: dict[str, Any] = run(args.baseline, cases) if args.baseline else ours
    differ = [case for case in ours if ours[case] != theirs.get(case)]
    print(f"{len(ours)} cases, {len(ours) - len(differ)} identical, {len(differ)} differ")
    for case in differ:
        print("  differs:", case)
    sys.exit(1 if differ else 0)


if __name__ == "__main__":
    main()
