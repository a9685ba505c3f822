"""Install (once) and locate the LiteLLM proxy (`litellm[proxy]` from PyPI) for the gateway tier, in
a venv of its own (`pinned_venv.py`): 1.108.7 ships the `headroom` guardrail with its retrieval
loop (`litellm/proxy/guardrails/guardrail_hooks/headroom/`), and its `[proxy]` extra installs from
PyPI (later ones name a `litellm-proxy` package PyPI does not have).

Usage: ``python scripts/litellm_venv.py install`` (prints the command's path) or ``... path``.
"""

from __future__ import annotations

import argparse

from scripts.pinned_venv import PinnedVenv

LITELLM_VERSION = "1.108.7"
LITELLM = PinnedVenv("litellm", LITELLM_VERSION, (f"litellm[proxy]=={LITELLM_VERSION}",), "litellm")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["install", "path"])
    args = parser.parse_args()
    print(LITELLM.ensure() if args.command == "install" else LITELLM.binary_path)


if __name__ == "__main__":
    main()
