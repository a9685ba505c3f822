"""The real agent CLIs (Claude Code, Codex, opencode, from npm) in a long tool loop on a real source
tree, against a scripted model server that enforces its window (tests/support/upstreams/agent_model.py), and
through the real `compacting-proxy` process in front of it (issue 16).

The suite runs a small matrix (each CLI at 32k through the proxy, one direct run each to show the
server's window bites, the 16k edge, Claude Code with thinking on); the full one, 16k/32k/128k direct
and proxied, is `python -m benchmarks.agents.bench_agent_clis`.
"""

from __future__ import annotations

import pytest

from tests.support.agent_clis import CLIENTS, NEEDS_THE_CLIS, Run, claude_result, run

pytestmark = [pytest.mark.cli, pytest.mark.timeout(600), NEEDS_THE_CLIS]
STEPS = 60


def explain(r: Run) -> str:
    received = [(x["kind"], x["tokens"], x["over"]) for x in r.recorded["received"]]
    return (
        f"{r.row()}\nexit {r.exit_code}, requests (kind, tokens, over): {received[-12:]}\n{r.output[-1500:]}"
    )


def assert_compacted_run(r: Run) -> None:
    """The issue's acceptance, for a run through the proxy."""
    assert r.over == 0, explain(r)
    assert r.finished, explain(r)
    assert r.orphans == 0, explain(r)
    assert r.system_intact, explain(r)
    assert r.task_intact, explain(r)
    assert r.client_errors == 0, explain(r)
    assert r.largest_sent > r.window, "the loop outgrew the window, so the proxy had to compact"


@pytest.mark.parametrize("client", CLIENTS)
def test_a_cli_finishes_a_long_loop_through_the_proxy_at_32k(client: str) -> None:
    assert_compacted_run(run(client, 32_000, proxied=True, steps=STEPS))


@pytest.mark.parametrize("client", CLIENTS)
def test_without_the_proxy_the_server_window_stops_the_cli(client: str) -> None:
    """The control: the same loop straight at the server goes over its window."""
    r = run(client, 32_000, proxied=False, steps=STEPS)
    assert r.over > 0, explain(r)


def test_claude_code_with_thinking_on_finishes_through_the_proxy() -> None:
    """Claude Code's default: thinking on, and with it `context_management` (clear_thinking) on every
    request, which a local server does not implement (issue 16, cause 1)."""
    r = run("claude", 32_000, proxied=True, steps=STEPS, thinking=True)
    sent = [b for b in r.sent_bodies.values() if b.get("tools")]
    assert sent and all(b.get("context_management") for b in sent), "the field Claude Code sends"
    received = r.recorded["received"]
    assert not any(x["context_management"] for x in received), "applied by the proxy, not forwarded"
    assert_compacted_run(r)


@pytest.mark.parametrize("client", ["codex", "opencode"])
def test_at_16k_a_cli_whose_fixed_prompt_fits_finishes(client: str) -> None:
    assert_compacted_run(run(client, 16_000, proxied=True, steps=STEPS))


def test_at_16k_claude_code_gets_the_overflow_it_knows_from_the_proxy() -> None:
    """Claude Code's system prompt and tool schemas alone are about 20k tokens: nothing can fit 16k.
    The proxy answers Anthropic's own "prompt is too long" 400, so Claude Code ends as it does when
    the server itself refuses, and the server is never sent a request over its window."""
    direct = run("claude", 16_000, proxied=False, steps=STEPS)
    proxied = run("claude", 16_000, proxied=True, steps=STEPS)
    assert proxied.over == 0, explain(proxied)
    assert not direct.finished and not proxied.finished
    reasons = [claude_result(r.output).get("terminal_reason") for r in (direct, proxied)]
    assert reasons == ["prompt_too_long", "prompt_too_long"], (reasons, explain(proxied))


CODEX_COMPACT_LIMIT = 12_000  # Codex's fixed prompt (instructions, tools) is about 8.7k of it


def test_codex_with_its_builtin_provider_has_its_remote_compaction_answered_by_the_proxy() -> None:
    """Codex's built-in `openai` provider compacts remotely at its limit (`compaction_trigger`):
    straight at a local server that fails on the first trigger; through the proxy, which answers it
    with its own compaction, the task finishes (issue 26, part 2)."""
    direct = run("codex", 32_000, proxied=False, steps=STEPS, codex_compact_limit=CODEX_COMPACT_LIMIT)
    assert not direct.finished and direct.exit_code != 0, explain(direct)
    assert "expected exactly one compaction output item" in direct.output, explain(direct)
    r = run("codex", 32_000, proxied=True, steps=STEPS, codex_compact_limit=CODEX_COMPACT_LIMIT)
    answered = [
        s for s in r.recorded["sent"].values() if s["headers"].get("x-compaction-remote") == "answered"
    ]
    assert len(answered) >= 3, explain(r)
    assert r.over == 0 and r.orphans == 0 and r.client_errors == 0, explain(r)
    assert r.finished and r.system_intact and r.task_intact, explain(r)
    steps = [x["step"] for x in r.recorded["received"] if x["kind"] == "tools"]
    assert steps == sorted(steps) and sorted(set(steps)) == list(range(1, STEPS + 1)), "no step lost"


def test_claude_code_with_thinking_on_through_the_proxy_in_front_of_a_strict_server() -> None:
    """A server that refuses fields it does not know, as Anthropic's API does without the beta (on
    Vertex AI, Bedrock): through the proxy, which applies `context_management` itself and does not
    forward it, no request is refused and every answer reports the applied edits (issue 26, part 3).
    (Straight at such a server, Claude Code 2.1.332 was seen to send the request again without the
    field after the 400 "context_management: Extra inputs are not permitted".)"""
    r = run("claude", 32_000, proxied=True, steps=STEPS, thinking=True, strict=True)
    assert_compacted_run(r)  # client_errors == 0: no 400 from the server on the way
