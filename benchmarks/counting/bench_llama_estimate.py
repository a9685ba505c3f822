"""How close the proxy's token estimate comes to a real llama-server's count, before and after compaction.

Starts the tiny-model llama-server (``tests/support/upstreams/llama.py``, binary from
``scripts/llama_server.py build``) and the real ``compacting-proxy`` in front of it with the
server's window, then for each chat asks the proxy for a dry run (``POST /compact``) and the server
for its own count (``/apply-template`` + ``/tokenize``, which is exactly its ``usage.prompt_tokens``)
of the original and of the compacted messages. Nothing is generated, so it takes a few seconds.

``python -m benchmarks.counting.bench_llama_estimate [--ctx 4096] [--window N|auto] [--tokenizer upstream]``
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import httpx

from tests.support.upstreams.chats import TOOLS, short_chat, support_chat
from tests.support.upstreams.llama import count_prompt_tokens, running_llama_server
from tests.support.upstreams.proxy_server import running_proxy

MAX_TOKENS = 16


def chats() -> dict[str, dict[str, Any]]:
    return {
        "short": {"messages": short_chat()},
        "short+tools": {"messages": support_chat(1, result_items=2), "tools": TOOLS},
        "support 4x10": {"messages": support_chat(4, result_items=10)},
        "support 4x10+tools": {"messages": support_chat(4, result_items=10), "tools": TOOLS},
        "support 8x20+tools": {"messages": support_chat(8, result_items=20), "tools": TOOLS},
        "support 12x40+tools": {"messages": support_chat(12, result_items=40), "tools": TOOLS},
    }


def measure(llama_url: str, proxy_url: str, name: str, body: dict[str, Any]) -> dict[str, Any]:
    request = {"model": "tiny", "max_tokens": MAX_TOKENS, **body}
    dry = httpx.post(f"{proxy_url}/compact", json=request, timeout=30).json()
    report = dry["report"]
    real_before = count_prompt_tokens(llama_url, body)
    real_after = count_prompt_tokens(llama_url, {**body, "messages": dry["messages"]})
    return {
        "chat": name,
        "chars": len(json.dumps(body)),
        "est_before": report["tokens_before"],
        "real_before": real_before,
        "ratio": real_before / report["tokens_before"],
        "compacted": report["compacted"],
        "est_after": report["tokens_after"],
        "real_after": real_after,
        "limit": report["limit"],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--ctx", type=int, default=4096, help="llama-server context (default: 4096)")
    parser.add_argument(
        "--window", help="COMPACT_WINDOW for the proxy: N or auto (default: the server's n_ctx)"
    )
    parser.add_argument(
        "--tokenizer", help="COMPACT_TOKENIZER for the proxy, e.g. upstream (default: its own)"
    )
    parser.add_argument("--json", action="store_true", help="print the rows as JSON instead of a table")
    args = parser.parse_args(argv)
    with running_llama_server(ctx=args.ctx) as llama:
        window = args.window or llama.n_ctx
        settings = {"tokenizer": args.tokenizer} if args.tokenizer else {}
        with running_proxy(f"{llama.base_url}/v1", window, **settings) as proxy:
            rows = [measure(llama.base_url, proxy.base_url, name, body) for name, body in chats().items()]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(
        f"llama-server n_ctx={llama.n_ctx}, proxy window={window}, "
        f"tokenizer={args.tokenizer or 'default'}, max_tokens={MAX_TOKENS}"
    )
    header = (
        f"{'chat':<22}{'chars':>7}{'est':>7}{'real':>7}{'ratio':>7}  "
        f"{'compacted':<10}{'est after':>10}{'real after':>11}{'fits':>6}"
    )
    print(header)
    print("-" * len(header))
    for r in rows:
        fits = "yes" if r["real_after"] + MAX_TOKENS <= llama.n_ctx else "NO"
        print(
            f"{r['chat']:<22}{r['chars']:>7}{r['est_before']:>7}{r['real_before']:>7}{r['ratio']:>7.2f}  "
            f"{r['compacted']!s:<10}{r['est_after']:>10}{r['real_after']:>11}{fits:>6}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
