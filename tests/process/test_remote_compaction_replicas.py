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
