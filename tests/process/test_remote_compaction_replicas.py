"""A `compaction` item the proxy made for Codex is expanded by any replica that shares its key
(`COMPACT_COMPACTION_KEY`), and refused by one that does not: real proxy processes, the recording
format upstream (issue 26, part 2)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from proxy.formats.responses_compaction import PREFIX
from tests.support.format_chats import as_responses
from tests.support.format_fixtures import recorded, running_proxy
from tests.support.upstreams.chats import support_chat

pytestmark = pytest.mark.process

KEY = "one-key-for-every-replica"


@pytest.fixture(scope="module")
def replicas(upstream: str) -> Iterator[tuple[str, str, str]]:
    with (
        running_proxy(upstream, COMPACT_COMPACTION_KEY=KEY) as first,
        running_proxy(upstream, COMPACT_COMPACTION_KEY=KEY) as second,
        running_proxy(upstream) as keyless,
    ):
        yield first, second, keyless


def events(text: str) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")]


def test_any_replica_with_the_key_expands_the_item_and_one_without_refuses_it(
    upstream: str, replicas: tuple[str, str, str], fresh_record: None
) -> None:
    first, second, keyless = replicas
    instructions, items = as_responses(support_chat(10, result_items=20))
    trigger = {
        "model": "small",
        "instructions": instructions,
        "input": [*items, {"type": "compaction_trigger"}],
    }
    answered = httpx.post(f"{first}/v1/responses", json={**trigger, "stream": True, "store": False})
    assert answered.status_code == 200 and answered.headers["x-compaction-remote"] == "answered"
    (item,) = [e["item"] for e in events(answered.text) if e["type"] == "response.output_item.done"]
    assert recorded(upstream) == [], "the upstream never sees the trigger"

    kept = [i for i in items if i.get("role") in ("user", "developer")]
    follow_up = {"model": "small", "instructions": instructions, "input": [*kept, item]}
    response = httpx.post(f"{second}/v1/responses", json=follow_up)
    assert response.status_code == 200, response.text
    sent = json.loads(recorded(upstream)[-1]["body"])
    assert not [i for i in sent["input"] if i.get("type") == "compaction"]
    assert [i for i in sent["input"] if i.get("type") == "function_call_output"], "what the item stood for"

    refused = httpx.post(f"{keyless}/v1/responses", json=follow_up)
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "invalid_compaction_item"
    assert len(recorded(upstream)) == 1, "nothing forged or foreign reaches the server"


def test_the_openai_sdk_reads_the_answer_whole(
    upstream: str, replicas: tuple[str, str, str], fresh_record: None
) -> None:
    instructions, items = as_responses(support_chat(10, result_items=20))
    client = openai.OpenAI(base_url=f"{replicas[0]}/v1", api_key="k")
    response = client.responses.create(
        model="small",
        instructions=instructions,
        input=[*items, {"type": "compaction_trigger"}],  # type: ignore[list-item]
        store=False,
    )
    (item,) = response.output
    assert item.type == "compaction" and item.encrypted_content.startswith(PREFIX)
    assert recorded(upstream) == [], "the upstream never sees the trigger"


@pytest.mark.parametrize("keys", ["proxy", "upstream"])
def test_an_item_is_expanded_only_for_the_key_that_asked_for_it(
    upstream: str, keys: str, fresh_record: None
) -> None:
    """Issue 35, row 7: Bob's request carrying Alice's item is refused as a forged one is, and her
    tool output never reaches the server in his request; with the proxy's own keys
    (`COMPACT_API_KEYS`), or with each client's upstream key forwarded."""
    env = {"COMPACT_COMPACTION_KEY": KEY}
    if keys == "proxy":
        env["COMPACT_API_KEYS"] = "key-of-alice,key-of-bob"
    alice, bob = {"authorization": "Bearer key-of-alice"}, {"authorization": "Bearer key-of-bob"}
    instructions, items = as_responses(support_chat(10, result_items=20))
    with running_proxy(upstream, **env) as proxy:
        trigger = {
            "model": "small",
            "instructions": instructions,
            "input": [*items, {"type": "compaction_trigger"}],
        }
        answered = httpx.post(f"{proxy}/v1/responses", json=trigger, headers=alice, timeout=30)
        assert answered.status_code == 200, answered.text
        (item,) = answered.json()["output"]
        follow_up = {"model": "small", "instructions": instructions, "input": [items[0], item]}
        refused = httpx.post(f"{proxy}/v1/responses", json=follow_up, headers=bob, timeout=30)
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"]["code"] == "invalid_compaction_item"
        assert recorded(upstream) == [], "Alice's history went upstream in Bob's request"
        served = httpx.post(f"{proxy}/v1/responses", json=follow_up, headers=alice, timeout=30)
        assert served.status_code == 200, served.text
    sent = json.loads(recorded(upstream)[-1]["body"])
    assert [i for i in sent["input"] if i.get("type") == "function_call_output"], "expanded for Alice"
