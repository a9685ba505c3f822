"""Gemini API requests shaped as Gemini CLI 0.61 sends them, and its stream read as `@google/genai`
1.30 reads it, for the Gemini format's and bridge's tests."""

from __future__ import annotations

import re
from typing import Any

import orjson

STREAM = "/v1beta/models/gemini-2.5-pro:streamGenerateContent"
WHOLE = "/v1beta/models/gemini-2.5-pro:generateContent"
TOOLS = [
    {
        "functionDeclarations": [
            {
                "name": name,
                "description": f"The {name} tool. " + "It does things. " * 20,
                "parametersJsonSchema": {"type": "object", "properties": {"file_path": {"type": "string"}}},
            }
            for name in ("read_file", "grep_search", "run_shell_command")
        ]
    }
]
SYSTEM = {"parts": [{"text": "You are Gemini CLI. " + "Follow the rules. " * 100}]}


def answer(text: str = "ok") -> dict[str, Any]:
    candidate = {"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": "STOP", "index": 0}
    return {"candidates": [candidate], "usageMetadata": {"promptTokenCount": 10, "totalTokenCount": 12}}


def history(rounds: int, result_words: int = 400) -> dict[str, Any]:
    """A Gemini CLI session: the task, then `rounds` turns of two calls and their two results."""
    contents: list[dict[str, Any]] = [
        {
            "role": "user",
            "parts": [{"text": "<session_context>cwd /work</session_context>"}, {"text": "Survey it."}],
        }
    ]
    for r in range(rounds):
        contents.append(
            {
                "role": "model",
                "parts": [
                    {"text": f"thinking about round {r}", "thought": True},
                    {"text": f"Round {r}: reading."},
                    {
                        "functionCall": {"name": "run_shell_command", "args": {"command": f"cat f{r}.py"}},
                        "thoughtSignature": f"sig-{r}-" + "A" * 40,
                    },
                    {
                        "functionCall": {
                            "id": f"read_file__{r}",
                            "name": "read_file",
                            "args": {"file_path": f"g{r}"},
                        }
                    },
                ],
            }
        )
        output = f"result {r}: " + " ".join(f"line{r}_{i}" for i in range(result_words))
        contents.append(
            {
                "role": "user",
                "parts": [
                    {
                        "functionResponse": {
                            "id": f"run_shell_command__{r}_cli",  # the CLI's id: the call had none
                            "name": "run_shell_command",
                            "response": {"output": output},
                        }
                    },
                    {
                        "functionResponse": {
                            "id": f"read_file__{r}",
                            "name": "read_file",
                            "response": {"output": output},
                        }
                    },
                ],
            }
        )
    return {
        "contents": contents,
        "systemInstruction": SYSTEM,
        "tools": TOOLS,
        "generationConfig": {
            "temperature": 1,
            "thinkingConfig": {"includeThoughts": True, "thinkingBudget": 8192},
        },
    }


def pairs_intact(contents: list[dict[str, Any]]) -> bool:
    """Every function-response turn answers, one for one, the calls of the model turn before it."""
    for i, content in enumerate(contents):
        responses = [p["functionResponse"]["name"] for p in content["parts"] if "functionResponse" in p]
        if not responses:
            continue
        before = contents[i - 1]
        calls = [p["functionCall"]["name"] for p in before["parts"] if "functionCall" in p]
        if before["role"] != "model" or sorted(calls) != sorted(responses):
            return False
    return True


def genai_events(content: bytes) -> list[dict[str, Any]]:
    """The events as `@google/genai` 1.30 reads a stream (`processStreamResponse`): `data: ` lines
    ending in a blank line, each one JSON object; anything else in the stream is an error there."""
    events = []
    for raw in re.split(rb"\r\n\r\n|\n\n|\r\r", content):
        if not raw.strip():
            continue
        assert raw.startswith(b"data: "), raw  # no event names, no comments
        events.append(orjson.loads(raw.removeprefix(b"data: ")))
    return events
