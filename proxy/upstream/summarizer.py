"""Level 3, the I/O part: ask a model to summarise each dropped run, through the summary cache.

A summary replaces the marker where a run of exchanges was dropped. Whatever goes wrong (the call
fails or times out, the answer is empty or too big for the room), that run keeps its plain marker:
the client's request never fails because of the summariser.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import httpx
import orjson

from proxy.counting.tokens import RequestCounter
from proxy.engine.compaction import with_marker_texts
from proxy.engine.plan import ChatPlan
from proxy.engine.summary import Chunk, chunks, summary_message, summary_request
from proxy.sharing.summaries import SummaryCache
from proxy.upstream.forwarding import credential_headers
from proxy.upstream.probes import fetch

log = logging.getLogger("proxy.summarizer")

# A summary is at most `COMPACT_SUMMARY_TOKENS` long: an answer far larger is not one.
MAX_SUMMARY_ANSWER_BYTES = 4 * 1024 * 1024


class SummaryFailed(Exception):
    pass


class Summarizer:
    def __init__(
        self,
        client: httpx.AsyncClient,
        url: str,
        cache: SummaryCache,
        *,
        model: str | None = None,
        max_tokens: int = 512,
        timeout: float = 30.0,
    ) -> None:
        self.client = client
        self.url = url.rstrip("/") + "/chat/completions"
        self.cache = cache
        self.model = model
        self.max_tokens = max_tokens
        self.timeout = timeout
        self._inflight: dict[str, asyncio.Future[str]] = {}

    async def apply(
        self,
        plan: ChatPlan,
        messages: Sequence[dict[str, Any]],
        counter: RequestCounter,
        headers: Sequence[tuple[bytes, bytes]] = (),
    ) -> ChatPlan:
        """`plan` with each dropped run's marker replaced by a summary, where one can be had."""
        result = plan.result
        after = result.tokens_after
        done = 0
        for k, marker in enumerate(plan.result.markers):
            run, position = marker.run, marker.position
            model = self.model or plan.model
            try:
                text = await asyncio.wait_for(
                    self.summarize([messages[i] for i in run], model, headers), self.timeout
                )
            except (SummaryFailed, TimeoutError, httpx.HTTPError) as exc:
                log.warning(
                    "summary of %d dropped messages failed (%s); dropping them instead", len(run), exc
                )
                continue
            # The summary stands where the marker did: its own message, or merged into a neighbour.
            summarized = with_marker_texts(result, {k: summary_message(text, len(run))["content"]}, messages)
            replacement = summarized.messages[position]
            grown = after - counter.message(result.messages[position]) + counter.message(replacement)
            if grown > plan.budget.limit:
                log.warning(
                    "a summary of %d messages did not fit under the line; dropping them instead", len(run)
                )
                continue
            result, after, done = summarized, grown, done + 1
        if not done:
            return plan
        return replace(plan, result=replace(result, tokens_after=after), summarized=done)

    async def summarize(
        self, run: Sequence[dict[str, Any]], model: str, headers: Sequence[tuple[bytes, bytes]]
    ) -> str:
        """The summary of a whole run: cached chunks reused, the rest summarised one call each."""
        parts = chunks(run, model=model)
        if not parts:
            raise SummaryFailed("nothing to summarise")
        cached = await self.cache.get_many([c.key for c in parts])
        start = max((i for i, c in enumerate(parts) if c.key in cached), default=-1)
        summary = cached[parts[start].key] if start >= 0 else None
        for chunk in parts[start + 1 :]:
            summary = await self._summarize_chunk(chunk, summary, model, headers)
        assert summary is not None
        return summary

    async def _summarize_chunk(
        self, chunk: Chunk, previous: str | None, model: str, headers: Sequence[tuple[bytes, bytes]]
    ) -> str:
        if chunk.key in self._inflight:  # the same summary asked for by concurrent requests: one call
            return await asyncio.shield(self._inflight[chunk.key])
        future: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._inflight[chunk.key] = future
        try:
            text = await self._call(chunk.transcript, previous, model, headers)
            text = await self.cache.put(chunk.key, text)
            future.set_result(text)
            return text
        except BaseException as exc:
            future.set_exception(SummaryFailed(str(exc)))
            future.exception()  # retrieved: waiters get it, nobody else needs to
            raise
        finally:
            del self._inflight[chunk.key]

    async def _call(
        self, transcript: str, previous: str | None, model: str, headers: Sequence[tuple[bytes, bytes]]
    ) -> str:
        body = summary_request(transcript, previous, model=model, max_tokens=self.max_tokens)
        auth = credential_headers(headers)
        answer = await fetch(
            self.client,
            "POST",
            self.url,
            [(b"content-type", b"application/json"), *auth],
            orjson.dumps(body),
            timeout=self.timeout,
            limit=MAX_SUMMARY_ANSWER_BYTES,
        )
        if answer is None:
            raise SummaryFailed("the summariser did not answer, or its answer was too large")
        if answer[0] != 200:
            raise SummaryFailed(f"the summariser answered {answer[0]}")
        try:
            text = orjson.loads(answer[1])["choices"][0]["message"]["content"]
        except (orjson.JSONDecodeError, KeyError, IndexError, TypeError) as exc:
            raise SummaryFailed(f"unreadable summary response: {exc}") from None
        if not isinstance(text, str) or not text.strip():
            raise SummaryFailed("empty summary")
        return text.strip()
