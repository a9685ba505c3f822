"""OpenAI Chat Completions (`/v1/chat/completions`, and Azure OpenAI's deployment paths).

The neutral conversation is this format's own `messages`, so reading is validating and writing is
putting the compacted `messages` back. On Azure's paths the deployment name stands for the model
in per-model settings (the body usually names none).
"""

from __future__ import annotations

from collections.abc import Mapping

from proxy.counting.calibration import reported_prompt_tokens
from proxy.engine.chat import Body, ChatPlan, validated_messages
from proxy.errors import openai_error
from proxy.formats.base import Conversation


class ChatCompletions:
    name = "chat"
    reply_field = None  # the neutral request's own

    def __init__(self, *, model_param: str | None = None, name: str = "chat") -> None:
        self.model_param = model_param  # the path parameter that names the model (Azure's deployment)
        self.name = name

    def read(self, body: Body, params: Mapping[str, str]) -> Conversation:
        validated_messages(body)
        if self.model_param and self.model_param in params:
            return Conversation({**body, "model": params[self.model_param]})
        return Conversation(body)

    def write(self, body: Body, conversation: Conversation, plan: ChatPlan) -> Body:
        changed = {**body, "messages": plan.result.messages}
        if plan.max_tokens is not None:
            field = "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"
            changed[field] = plan.max_tokens
        return changed

    def streamed(self, body: Body) -> bool:
        return body.get("stream") is True

    def reported_prompt_tokens(self, tail: bytes) -> int | None:
        return reported_prompt_tokens(tail)

    error_body = staticmethod(openai_error)
