"""An upstream's own overflow error, read by the real proxy process: the retry is compacted to the
window the error names and the count it gives.

The upstream stands for vLLM main with its renderer's length check (`vllm/renderers/params.py`,
`TokenizeParams._token_len_check`, as of 1aa021e): a chat request whose prompt has more tokens
than `max_model_len` less the requested `max_tokens` gets 400 with "You passed N input tokens and
requested M output tokens. However, the model's context length is only W tokens, resulting in a
maximum input length of W-M tokens. Please reduce the length of the input prompt.", in vLLM's
`ErrorResponse` shape with `(parameter=input_tokens, value=N)` added as `VLLMValidationError.__str__`
does. Its tokens are counted here as a quarter of the messages' JSON.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.support.conversations import agent_chat
from tests.support.fakes import completion
from tests.support.hostile import ScriptedHandler, Seen, hostile_upstream, proxy_for

pytestmark = pytest.mark.process

MAX_MODEL_LEN = 8192
CONFIGURED = 32768  # what the proxy was told: the server was restarted with a smaller window since


def vllm_tokens(body: dict[str, Any]) -> int:
    return len(json.dumps(body["messages"])) // 4


def vllm_chat(h: ScriptedHandler, seen: Seen) -> None:
    body = json.loads(seen.body)
    tokens, output = vllm_tokens(body), body.get("max_completion_tokens") or body.get("max_tokens") or 0
    if tokens > MAX_MODEL_LEN - output:
        message = (
            f"You passed {tokens} input tokens and requested {output} output tokens. However, the "
            f"model's context length is only {MAX_MODEL_LEN} tokens, resulting in a maximum input "
            f"length of {MAX_MODEL_LEN - output} tokens. Please reduce the length of the input prompt. "
            f"(parameter=input_tokens, value={tokens})"
        )
        error = {"message": message, "type": "BadRequestError", "param": "input_tokens", "code": 400}
        h.json(400, {"error": error})
        return
    h.json(200, completion("ok", prompt_tokens=tokens))


def test_vllms_renderer_overflow_is_retried_within_the_window_it_names() -> None:
    messages = agent_chat(12, result_items=30)
    with hostile_upstream() as hostile:
        hostile.routes["/v1/chat/completions"] = vllm_chat
        with proxy_for(hostile.url, COMPACT_WINDOW=str(CONFIGURED)) as proxy:
            response = httpx.post(
                proxy.base_url + "/v1/chat/completions",
                json={"model": "m", "messages": messages, "max_tokens": 512},
                timeout=60,
            )
            log = proxy.log
    sent = [json.loads(s.body) for s in hostile.seen if s.path == "/v1/chat/completions"]
    counts = [vllm_tokens(body) for body in sent]
    print(f"vLLM counted {counts} against {MAX_MODEL_LEN} - 512")
    assert len(sent) == 2 and counts[0] > MAX_MODEL_LEN, counts  # refused once, then retried
    assert f"prompt_tokens={counts[0]}, window={MAX_MODEL_LEN}" in log, log[-2000:]
    assert response.status_code == 200, response.text
    assert counts[1] <= MAX_MODEL_LEN - 512
