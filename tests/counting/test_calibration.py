from __future__ import annotations

import json

import httpx
import pytest

from proxy.counting.calibration import Calibrator, CutEvidence, reported_prompt_tokens
from tests.support.conversations import bike_shop_chat
from tests.support.fakes import RecordingUpstream, completion, proxy_client, sse_chunks


def test_factor_learns_smooths_and_moves_in_steps() -> None:
    c = Calibrator()
    assert c.factor("m") == 1.0
    c.observe("m", 1000, 3000)
    first = c.factor("m")
    assert 3.0 <= first <= 3.2, "rounded up onto the grid: never below the observed ratio"
    for reported in (2950, 3050, 3010, 2990):
        c.observe("m", 1000, reported)
    assert c.factor("m") == first, "small wobbles do not move the factor in use"
    for _ in range(10):
        c.observe("m", 1000, 1500)
    assert 1.5 <= c.factor("m") < 1.7
    assert c.factor("other") == 1.0


def test_an_overcount_is_learned_too() -> None:
    """Issue 34, row 4: the estimate counts number-heavy tool output 1.64-1.69x what cl100k and
    Llama 3 count; the server's reports of 0.6 are learned (ratios under 0.8 were ignored)."""
    c = Calibrator()
    for _ in range(3):
        c.observe("m", 1690, 1000)
    assert 0.55 <= c.factor("m") <= 0.65


def test_implausible_reports_are_ignored() -> None:
    c = Calibrator()
    c.observe("m", 1000, 100)  # a cached prompt counted as its new tokens only
    c.observe("m", 10, 300)  # too small to say anything about text
    c.observe("m", 1000, 10**9)
    assert c.factor("m") == 8.0, "bounded"
    disabled = Calibrator(enabled=False)
    disabled.observe("m", 1000, 3000)
    assert disabled.factor("m") == 1.0


@pytest.mark.parametrize(
    ("counted", "reports", "seen"),
    [
        # (sent, reported) pairs, the last one judged, at a window of 16,384
        ("guess", [(9000, 3900)], None),  # one count far under: a tokenizer may do that
        ("guess", [(9000, 5400), (9400, 5600), (12000, 7200)], None),  # in proportion: a tokenizer's
        ("guess", [(9000, 3900), (12000, 3950), (7000, 3920)], 4096),  # pinned while sent moves: a cut
        ("guess", [(9000, 3900), (9000, 3900), (9000, 3900)], None),  # the same prompt again: no sign
        ("own", [(9000, 3900)], 4096),  # the model's own vocabulary: that far under is a cut
        ("own", [(9000, 8200)], None),  # its template's few tokens a message: not a cut
        ("server", [(9000, 8900)], 8900),  # under the server's own count: cut (at least what it read)
        ("server", [(9000, 8990)], None),  # within its reply primer
        ("guess", [(3000, 16384)], 16384),  # the window filled to the token
        ("guess", [(3000, 20000)], None),  # over the window assumed: a larger window, no cut
        ("own", [(5000, 100)], None),  # only the uncached part counted (older Ollama)
        ("own", [(20000, 9000)], 9000),  # the next power of two is not below the window in use
    ],
)
def test_a_cut_is_inferred_only_from_evidence_no_tokenizer_makes(
    counted: str, reports: list[tuple[int, int]], seen: int | None
) -> None:
    evidence = CutEvidence()
    found = None
    for sent, reported in reports:
        found = evidence.cut_window("m", sent, reported, 16384, counted=counted)
    assert found == seen


def test_reported_prompt_tokens() -> None:
    assert reported_prompt_tokens(json.dumps(completion(prompt_tokens=1234)).encode()) == 1234
    assert reported_prompt_tokens(b'{"done":true,"prompt_eval_count": 77,"eval_count":3}') == 77
    assert reported_prompt_tokens(b"data: [DONE]") is None


def counting_upstream(ratio: float) -> RecordingUpstream:
    """An upstream whose tokenizer counts `ratio` times the chars/4 estimate of what it receives."""

    def respond(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        real = int(len(json.dumps(body["messages"])) / 4 * ratio)
        if body.get("stream"):
            usage = {
                "choices": [],
                "usage": {"prompt_tokens": real, "completion_tokens": 1, "total_tokens": real},
            }
            chunks = [
                *sse_chunks(["hi"])[:-1],
                b"data: " + json.dumps(usage).encode() + b"\n\n",
                b"data: [DONE]\n\n",
            ]
            return httpx.Response(
                200, headers={"content-type": "text/event-stream"}, content=b"".join(chunks)
            )
        return httpx.Response(200, json=completion(prompt_tokens=real))

    return RecordingUpstream(respond=respond)


async def test_calibration_makes_the_proxy_compact_earlier() -> None:
    upstream = counting_upstream(ratio=3.0)
    body = {"model": "m", "messages": bike_shop_chat(items=60)}  # ~2,300 estimated, ~6,900 real tokens
    async with proxy_client(upstream, window=8000) as client:
        first = await client.post("/v1/chat/completions", json=body)
        second = await client.post("/v1/chat/completions", json={**body, "stream": True})
        third = await client.post("/v1/chat/completions", json=body)
        report = (await client.post("/compact", json=body)).json()["report"]
    assert "x-compaction-tokens-before" not in first.headers, "by the estimate alone it fits"
    assert second.status_code == 200
    assert "x-compaction-tokens-before" in third.headers, "calibrated, it is over the line"
    assert report["calibration_factor"] >= 2.9
    assert int(third.headers["x-compaction-tokens-after"]) <= 6400
