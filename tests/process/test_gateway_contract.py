"""The gateway contract over real sockets, against the real `compacting-proxy` process, from the
callers' own side: Headroom's own client (npm `headroom-ai` 0.37, `tests/node/headroom_client.mjs`:
`compress`, `retrieve`, its auth error), and Kong's AI Prompt Compressor (`provider: headroom`,
`compressor_url` at `/v1/compress`), which cannot run here, by the request its documentation shows
it sends (Kong Operator's "Compress agent traffic with Headroom", Kong AI Gateway 2.2: the chat's
messages and model as JSON, the proxy token as a bearer token and `X-Headroom-Proxy-Token`), and
the path that asks for the dropped messages merged, which is how Kong and Portkey, which let an
operator set only a URL and a token, get a list that fits past a stub a message."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.conversations import agent_chat
from tests.support.long_histories import long_history
from tests.support.node import node_client
from tests.support.upstreams.proxy_server import ProxyServer, running_proxy

pytestmark = pytest.mark.process

TOKEN = "kong-proxy-token"
NOWHERE = "http://127.0.0.1:9/v1"  # the contract never calls the upstream


@pytest.fixture(scope="module")
def proxy() -> Iterator[ProxyServer]:
    with running_proxy(
        NOWHERE, 4096, retrieve="true", api_keys=f"{TOKEN},node-key", upstream_kind="openai"
    ) as p:
        yield p


def history() -> list[dict[str, Any]]:
    return [*agent_chat(12, seed=4, result_items=40), {"role": "user", "content": "Which orders are open?"}]


def test_headroom_s_own_client_compresses_and_retrieves(proxy: ProxyServer, tmp_path: Path) -> None:
    chat = history()
    path = tmp_path / "chat.json"
    path.write_text(json.dumps({"model": "m", "messages": chat, "tokenBudget": 4096}))
    out = node_client(
        "headroom_client.mjs", proxy.base_url, "node-key", str(path), needs="headroom-ai", timeout=120
    )
    result = out["result"]
    assert result["compressed"] is True and len(result["messages"]) == len(chat)
    assert result["tokensAfter"] < result["tokensBefore"] and result["ccrHashes"]
    assert out["retrieved"]["hash"] == result["ccrHashes"][0] and out["retrieved"]["originalContent"]
    assert out["wrongKey"] == "HeadroomAuthError"


def test_the_request_kong_sends_is_answered_in_the_contract(proxy: ProxyServer) -> None:
    chat = history()
    headers = {"authorization": f"Bearer {TOKEN}", "content-type": "application/json"}
    response = httpx.post(
        f"{proxy.base_url}/v1/compress", json={"model": "m", "messages": chat}, headers=headers
    )
    assert response.status_code == 200
    out = response.json()
    assert set(out) >= {"messages", "tokens_before", "tokens_after", "tokens_saved", "compression_ratio"}
    assert len(out["messages"]) == len(chat) and out["fits"] is True and out["tokens_after"] <= out["limit"]
    refused = httpx.post(f"{proxy.base_url}/v1/compress", json={"model": "m", "messages": chat})
    assert refused.status_code == 401  # Kong's stop_on_error then decides; nothing was changed


def test_a_gateway_given_the_merge_path_gets_a_list_that_fits(proxy: ProxyServer) -> None:
    """Kong's `compressor_url` (the whole URL) and Portkey's Headroom Proxy URL (a base it calls
    `/v1/compress` under, here `<proxy>/merge`) are the only things of theirs an operator sets: the
    path asks for the dropped messages merged, and a history far past a stub a message fits the
    proxy's 4,096 tokens."""
    chat = long_history(600, steps=6, seed=2)
    headers = {"authorization": f"Bearer {TOKEN}", "x-headroom-proxy-token": TOKEN}
    stubbed = httpx.post(
        f"{proxy.base_url}/v1/compress", json={"model": "m", "messages": chat}, headers=headers
    )
    url = f"{proxy.base_url}/merge/v1/compress"
    response = httpx.post(url, json={"model": "m", "messages": chat}, headers=headers)
    assert response.status_code == 200
    out = response.json()
    assert stubbed.json()["fits"] is False  # a stub a message: the floor
    assert out["fits"] is True and out["tokens_after"] <= out["limit"] and out["dropped"] == "merge"
    rows = out["messages"]
    assert rows[0] == chat[0] and rows[-1] == chat[-1] and len(rows) < len(chat)
