"""What a request is allowed: the reply room, the margin for the estimate's error, the
`x-compaction-*` counts, and the server-side context management the proxy must honour or apply
(issues 16 and 19). In-process through `httpx.ASGITransport`, for the logic."""

from __future__ import annotations

from tests.fakes import RecordingUpstream, proxy_client
from tests.test_loops import PYTEST, one_request_loop, step


async def test_capped_is_a_count_like_truncated_and_dropped() -> None:
    loop = one_request_loop(3, lines=80)
    log = "\n".join(f"2026-12-03 07:{k % 60:02}:00 INFO step {k} ok" for k in range(9000))
    step(loop, 99, [("bash", log + "\n" + PYTEST)])
    upstream = RecordingUpstream()
    async with proxy_client(upstream, window=32000) as client:
        response = await client.post("/v1/chat/completions", json={"model": "m", "messages": loop})
        report = (await client.post("/compact", json={"model": "m", "messages": loop})).json()["report"]
    assert response.status_code == 200
    assert report["capped"] == [len(loop) - 1], "the indices stay in /compact's report"
    assert response.headers["x-compaction-capped"] == "1"
    for name in ("truncated", "dropped", "capped"):
        assert response.headers[f"x-compaction-{name}"].isdigit()
