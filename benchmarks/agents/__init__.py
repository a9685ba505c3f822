"""The real agent CLIs (Claude Code, Codex, opencode, aider, Gemini CLI) and real mini-swe-agent and
SWE-agent trajectories, direct and through the proxy."""
