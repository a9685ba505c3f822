"""OpenAI Chat Completions (`/v1/chat/completions`, and Azure OpenAI's deployment paths).

The neutral conversation is this format's own `messages` with only the fields the planner reads, so
reading is validating and picking, and writing is putting the compacted `messages` back. On Azure's paths the deployment name stands for the model
in per-model settings (the body usually names none).
"""

from __future__ import annotations

from collections.abc import Mapping

from proxy.counting.calibration import reported_prompt_tokens
from proxy.counting.tokens import PROMPT_FIELDS
from proxy.engine.plan import Body, ChatPlan, validated_messages
from proxy.engine.refusal import Refusal
from proxy.errors import ContextOverflowError, openai_error
from proxy.formats.base import Conversation, source_field, sse_error_event
from proxy.formats.stateless import StatelessServer

# What the planner reads besides the messages: the prompt's other parts and the reply limit.
NEUTRAL_FIELDS = (*PROMPT_FIELDS, "max_tokens", "max_completion_tokens")


class ChatCompletions(StatelessServer):
    """OpenAI's Chat Completions, which has no server-side context management."""

    name = "chat"
    reply_field: str | None = None  # the neutral request's own

    def __init__(self, *, model_param: str | None = None, name: str = "chat") -> None:
        self.model_param = model_param  # the path parameter that names the model (Azure's deployment)
        self.name = name

    def read(self, body: Body, params: Mapping[str, str]) -> Conversation:
        """The neutral request: this format's own messages, and only the fields the planner reads
        (the model, the prompt's other parts, the reply limit): vendor fields stay in the body."""
        messages = validated_messages(body)
        model = params.get(self.model_param, body.get("model")) if self.model_param else body.get("model")
        request: Body = {"model": model or "", "messages": messages}
        request.update({key: body[key] for key in NEUTRAL_FIELDS if key in body})
        return Conversation(request)

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

    def client_field(self, body: Body, conversation: Conversation, index: int) -> str:
        return source_field(conversation, index, items="messages", outside="messages")

    def overflow_message(self, refusal: Refusal) -> str:
        """OpenAI's own wording ("This model's maximum context length is N tokens. However, ...")."""
        return (
            f"This model's maximum context length is {refusal.window} tokens. However, your messages "
            f"resulted in {refusal.tokens} tokens. {refusal.detail} Please reduce the length of the messages."
        )

    def overflow_error(self, refusal: Refusal, *, streamed: bool) -> ContextOverflowError:
        return ContextOverflowError(self.overflow_message(refusal), param=refusal.field or "messages")

    def stream_error_event(self, message: str) -> bytes:
        """An error chunk (`data: {"error": ...}`), on which the openai SDK raises."""
        error = {"message": message, "type": "upstream_error", "param": None, "code": "upstream_stream_error"}
        return sse_error_event({"error": error})
