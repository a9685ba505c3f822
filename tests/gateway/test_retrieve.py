"""Originals on request (`proxy/gateway/retrieve.py`, `originals.py`): every cut block named by a
stable id in `ccr_hashes` and in the text a model reads, `GET /v1/retrieve/{hash}` (LiteLLM's) and
`POST /v1/retrieve` (Headroom's clients) answering with the original while it is kept, for the key
that sent it only; off unless `COMPACT_RETRIEVE`; the store bounded by age and bytes."""

from __future__ import annotations

import json
import re
from typing import Any

from proxy.gateway.originals import Originals, scope_of
from tests.support.conversations import agent_chat
from tests.support.fakes import RecordingUpstream, proxy_client

Message = dict[str, Any]
KEYS = "key-a,key-b"


def history() -> list[Message]:
    return [*agent_chat(12, seed=4, result_items=40), {"role": "user", "content": "Which orders are open?"}]


def bearer(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


async def test_each_cut_block_is_named_and_its_original_comes_back() -> None:
    chat = history()
    async with proxy_client(RecordingUpstream(), retrieve=True) as client:
        body = {"model": "m", "messages": chat, "window": 4096}
        out = (await client.post("/v1/compress", json=body)).json()
        again = (await client.post("/v1/compress", json=body)).json()
        hashes = out["ccr_hashes"]
        assert hashes and hashes == again["ccr_hashes"]  # stable: the same content, the same ids
        text = json.dumps(out["messages"])
        assert all(f"Retrieve original: hash={h}" in text for h in hashes)  # where a model reads it
        for key in hashes:
            assert re.fullmatch(r"[a-f0-9]{24}", key)
            got = await client.get(f"/v1/retrieve/{key}")
            assert got.status_code == 200 and got.json()["hash"] == key
            posted = await client.post("/v1/retrieve", json={"hash": key})
            assert posted.json() == got.json()
        originals = [(await client.get(f"/v1/retrieve/{h}")).json()["original_content"] for h in hashes]
    noted = [
        i for i, row in enumerate(out["messages"]) if row["role"] == "tool" and "hash=" in row["content"]
    ]
    assert any(chat[i]["content"] in originals for i in noted)  # a noted result's own text


async def test_one_key_never_reads_another_keys_originals() -> None:
    async with proxy_client(RecordingUpstream(), retrieve=True, api_keys=KEYS) as client:
        body = {"model": "m", "messages": history(), "window": 4096}
        out = (await client.post("/v1/compress", json=body, headers=bearer("key-a"))).json()
        key = out["ccr_hashes"][0]
        mine = await client.get(f"/v1/retrieve/{key}", headers={"x-api-key": "key-a"})
        theirs = await client.get(f"/v1/retrieve/{key}", headers=bearer("key-b"))
        nobody = await client.get(f"/v1/retrieve/{key}")
    assert mine.status_code == 200
    assert theirs.status_code == 404 and "Entry not found" in theirs.json()["detail"]
    assert nobody.status_code == 401


async def test_retrieval_is_off_unless_asked_for() -> None:
    async with proxy_client(RecordingUpstream()) as client:
        out = (
            await client.post("/v1/compress", json={"model": "m", "messages": history(), "window": 4096})
        ).json()
        missing = await client.get("/v1/retrieve/0123456789abcdef01234567")
    assert out["ccr_hashes"] == [] and "hash=" not in json.dumps(out["messages"])
    assert missing.status_code == 404 and "COMPACT_RETRIEVE" in missing.json()["detail"]


async def test_an_unknown_or_malformed_id_is_a_404_and_a_missing_one_a_400() -> None:
    async with proxy_client(RecordingUpstream(), retrieve=True) as client:
        assert (await client.get("/v1/retrieve/0123456789abcdef01234567")).status_code == 404
        assert (await client.get("/v1/retrieve/..%2f..%2fetc")).status_code in (400, 404)
        assert (await client.post("/v1/retrieve", json={})).status_code == 400
        text = (await client.get("/metrics")).text
    assert 'compacting_proxy_retrievals_total{outcome="missing"} 1.0' in text


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_originals_are_kept_for_their_age_and_within_their_bytes() -> None:
    clock = Clock()
    store = Originals(ttl=60, max_bytes=1000, redis_url=None, clock=clock)
    scope = scope_of(b"key-a")
    await store.keep(scope, [("a" * 24, "x" * 400), ("b" * 24, "y" * 400)])
    assert await store.get(scope, "a" * 24) == "x" * 400
    assert await store.get(scope_of(b"key-b"), "a" * 24) is None
    await store.keep(scope, [("c" * 24, "z" * 400)])  # 1,200 bytes: the oldest goes
    assert await store.get(scope, "b" * 24) is None and store.bytes == 800
    assert await store.get(scope, "a" * 24) == "x" * 400  # used since: kept
    await store.keep(scope, [("d" * 24, "w" * 2000)])  # larger than the bound: not kept
    assert await store.get(scope, "d" * 24) is None
    clock.now += 61
    assert await store.get(scope, "c" * 24) is None  # past its age
