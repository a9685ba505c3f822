"""Real agent trajectories this project did not generate, read for the notes' benchmark and the
server-cache one, and turned into what a tool-calling agent sends.

Where they were found (public GitHub repositories; not in this one, never committed; put them under
`~/.cache/compacting-proxy/real-trajectories/<agent>/` with `git archive` from a clone, or `fetch`):

- `mini-swe-agent/`: `gruckion/mini-swe-agent` at d12a71a,
  `swebench_results/20251118_gemini-3-pro-74pct/trajs/` (500 `.traj.json` runs of Gemini 3 Pro on
  SWE-bench Verified). Observations are `user` messages (`<returncode>N</returncode>\\n<output>...`).
- `swe-agent/`: `SWE-agent/SWE-agent` at 3ea751c, `trajectories/demonstrations/` and
  `tests/test_data/trajectories/` (22 `.traj` files whose `history` holds `tool` or `user`
  observations; several replay one marshmallow run under different configurations).
- `openhands/`: `All-Hands-AI/OpenHands` at 156d068,
  `evaluation/benchmarks/multi_swe_bench/examples/output.jsonl` (3 CodeActAgent runs on ponyc) and
  `tests/runtime/trajs/*.json`; `nunu0404/Python_OpenHands` at c80bab5, `output.jsonl` (1 run on
  fastjson2). OpenHands keeps events, not messages: each becomes the message OpenHands'
  `ConversationMemory` sends for it (v0.x, `openhands/memory/conversation_memory.py`): one assistant
  message per model response with its `tool_calls`, one `tool` message per observation (a command's
  output with `CmdOutputObservation.to_agent_observation`'s working directory, interpreter and exit
  code lines).

As sent by a tool-calling agent: an observation that is a `user` message (mini-swe-agent's,
SWE-agent's text-parsing configurations) becomes the `tool` result of a `bash` call whose command is
the assistant message's last code block, so that the engine may note it (it never changes a user
message). `split` keeps a tuning set apart: a quarter of the mini-swe-agent runs, by a hash of their
file name; every other run (and every SWE-agent and OpenHands run) is held out.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

Message = dict[str, Any]
DEFAULT_REAL = Path.home() / ".cache" / "compacting-proxy" / "real-trajectories"
AGENTS = ("mini-swe-agent", "swe-agent", "openhands")
_BLOCK = re.compile(r"```[\w-]*\n(.*?)```", re.S)


def load_real(directory: Path, limit: int) -> list[list[Message]]:
    """The messages of each `.traj` file under `directory` (by name, at most `limit`), as stored."""
    out: list[list[Message]] = []
    for path in sorted(directory.rglob("*.traj*"))[:limit]:
        data = json.loads(path.read_text())
        messages = data if isinstance(data, list) else data.get("messages") or data.get("history") or []
        out.append([m for m in messages if isinstance(m, dict) and "role" in m])
    return out


def split(agent: str, name: str) -> str:
    """`tune` for the quarter of mini-swe-agent runs the notes were tuned on, else `held-out`."""
    digest = int(hashlib.sha1(name.encode()).hexdigest(), 16)
    return "tune" if agent == "mini-swe-agent" and digest % 4 == 0 else "held-out"


def trajectories(directory: Path, agent: str) -> Iterator[tuple[str, list[Message]]]:
    """Each run under `directory` as `(name, messages a tool-calling agent sends)`."""
    if agent == "openhands":
        for path in sorted(directory.glob("*.json*")):
            text = path.read_text()
            if path.suffix == ".json":
                runs = [{"history": json.loads(text)}]
            else:
                runs = [json.loads(line) for line in text.splitlines() if line.strip()]
            for k, run in enumerate(runs):
                events = run.get("history") or []
                yield f"{path.name}#{run.get('instance_id', k)}", openhands_messages(events)
        return
    for path in sorted(directory.rglob("*.traj*")):
        data = json.loads(path.read_text())
        stored = data if isinstance(data, list) else data.get("messages") or data.get("history") or []
        yield path.name, tool_calling([m for m in stored if isinstance(m, dict) and "role" in m])


def text_of(content: Any) -> str:
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


def tool_calling(stored: list[Message]) -> list[Message]:
    """The stored messages with every observation sent as a tool result."""
    out: list[Message] = []
    first_user = next((i for i, m in enumerate(stored) if m["role"] == "user"), len(stored))
    pending: str | None = None  # the id of the call whose result the next user message is
    for i, message in enumerate(stored):
        role, content = message["role"], text_of(message.get("content"))
        if role == "assistant":
            calls = message.get("tool_calls")
            if calls:
                out.append({"role": "assistant", "content": content, "tool_calls": calls})
                continue
            blocks = _BLOCK.findall(content)
            command = message.get("action") or (blocks[-1].strip() if blocks else "")
            pending = f"call_{i}" if command else None
            arguments = json.dumps({"command": command})
            call = {"id": pending, "type": "function", "function": {"name": "bash", "arguments": arguments}}
            out.append(
                {"role": "assistant", "content": content, **({"tool_calls": [call]} if pending else {})}
            )
        elif role == "tool":  # SWE-agent keeps `tool_call_ids`
            call_id = message.get("tool_call_id") or (message.get("tool_call_ids") or [None])[0]
            out.append({"role": "tool", "tool_call_id": call_id, "content": content})
        elif role == "user" and i > first_user and pending is not None:
            out.append({"role": "tool", "tool_call_id": pending, "content": content})
            pending = None
        else:
            out.append({"role": role, "content": content})
    return out


def openhands_messages(events: list[dict[str, Any]]) -> list[Message]:
    """OpenHands (v0.x) events as the messages its `ConversationMemory` sends."""
    out: list[Message] = []
    responses: set[Any] = set()  # the ids of the model responses already sent
    for event in events:
        metadata = event.get("tool_call_metadata") or {}
        response = metadata.get("model_response") or {}
        if event.get("action") == "system":
            out.append({"role": "system", "content": event.get("args", {}).get("content", "")})
        elif event.get("action") == "message" and event.get("source") == "user":
            out.append({"role": "user", "content": event.get("args", {}).get("content", "")})
        elif event.get("action") and response:
            if response.get("id") not in responses:
                responses.add(response.get("id"))
                said = response["choices"][0]["message"]
                out.append(
                    {
                        "role": "assistant",
                        "content": said.get("content") or "",
                        "tool_calls": said.get("tool_calls") or [],
                    }
                )
        elif event.get("action") == "message":
            out.append({"role": "assistant", "content": event.get("args", {}).get("content", "")})
        elif event.get("observation") and metadata:
            out.append(
                {"role": "tool", "tool_call_id": metadata.get("tool_call_id"), "content": _observed(event)}
            )
    return [m for m in out if m["role"] != "assistant" or m.get("content") or m.get("tool_calls")]


def _observed(event: dict[str, Any]) -> str:
    """What OpenHands sends of an observation: a command's output with its status lines."""
    content = str(event.get("content", ""))
    if event.get("observation") != "run":
        return content
    meta = event.get("extras", {}).get("metadata") or {}
    text = f"{meta.get('prefix', '')}{content}{meta.get('suffix', '')}"
    if meta.get("working_dir"):
        text += f"\n[Current working directory: {meta['working_dir']}]"
    if meta.get("py_interpreter_path"):
        text += f"\n[Python interpreter: {meta['py_interpreter_path']}]"
    if meta.get("exit_code", -1) != -1:
        text += f"\n[Command finished with exit code {meta['exit_code']}]"
    return text
