"""The `compacting-proxy` command: serve the proxy with uvicorn, replay the built-in demo, or run an
agent CLI through a proxy of its own (`run`)."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import logging.config
import os
import signal
import sys
from types import FrameType
from typing import Any

from pydantic import ValidationError

from proxy import __version__
from proxy.settings import Settings, describe_validation_error

LOG_LEVELS = ("critical", "error", "warning", "info", "debug")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="compacting-proxy",
        description="A transparent OpenAI-compatible proxy that compacts long chats before they "
        "overflow the model's context window. Configured with COMPACT_* environment variables.",
    )
    parser.add_argument("--version", action="version", version=f"compacting-proxy {__version__}")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8080, help="port to listen on (default: 8080)")
    parser.add_argument("--workers", type=int, default=1, help="worker processes (default: 1)")
    parser.add_argument("--log-level", choices=LOG_LEVELS, default="info", help="(default: info)")
    parser.add_argument("--no-access-log", action="store_true", help="do not log one line per request")
    parser.add_argument("--env-file", help="read COMPACT_* settings from this file (default: ./.env)")
    parser.add_argument(
        "--timeout-graceful-shutdown",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="on SIGTERM, how long open requests and streams may take to finish (default: 30)",
    )
    parser.add_argument(
        "--forwarded-allow-ips",
        default=None,
        help="trust X-Forwarded-* headers from these addresses (uvicorn's option; default: 127.0.0.1)",
    )
    sub = parser.add_subparsers(dest="command")
    demo = sub.add_parser(
        "demo", help="replay a long chat through the proxy against a built-in stub upstream"
    )
    demo.add_argument("--turns", type=int, default=12, help="user requests to replay (default: 12)")
    demo.add_argument("--window", type=int, default=8000, help="the stub model's window (default: 8000)")
    add_run_parser(sub)
    return parser.parse_args(argv)


def add_run_parser(sub: Any) -> None:
    from proxy.run.agents import CLIS

    run = sub.add_parser(
        "run",
        help="start a proxy, run an agent CLI through it, stop the proxy when the CLI exits",
        description="Start a proxy on a free loopback port (COMPACT_* settings as for the proxy "
        "itself), run the CLI pointed at it on this terminal, and exit with the CLI's status. The "
        "CLI's own arguments go after `--`: compacting-proxy run codex -- exec 'fix the tests'.",
    )
    run.add_argument("cli", choices=CLIS)
    run.add_argument("--proxy", metavar="URL", help="use this running proxy instead of starting one")
    run.add_argument(
        "--model",
        help="the model the CLI asks for (default: the first the upstream lists at /v1/models; "
        "the CLI's own default where the upstream lists its vendor's models)",
    )
    run.add_argument("--upstream", metavar="URL", help="the proxy's upstream (COMPACT_UPSTREAM_URL)")
    run.add_argument(
        "--window", metavar="TOKENS", help="the proxy's window, a number or auto (COMPACT_WINDOW)"
    )
    run.add_argument(
        "--tell-window",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="also tell the CLI the window where it can be told (default: no; see the README)",
    )
    run.add_argument("--port", dest="run_port", type=int, help="the proxy's port (default: a free one)")
    run.add_argument("--env-file", dest="run_env_file", help="the proxy's COMPACT_* settings file")
    run.add_argument("--log", metavar="FILE", help="the proxy's log (default: a new file in the temp dir)")


def load_settings(env_file: str | None) -> Settings:
    try:
        settings = Settings(_env_file=env_file) if env_file else Settings()  # type: ignore[call-arg]
    except ValidationError as exc:
        print(f"compacting-proxy: {describe_validation_error(exc)}", file=sys.stderr)
        raise SystemExit(2) from None
    from proxy.planning.counters import check_tokenizers

    try:
        check_tokenizers(settings)
    except ValueError as exc:
        print(f"compacting-proxy: invalid configuration:\n  {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    return settings


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    cli_args: list[str] = []
    if "run" in argv and "--" in argv[argv.index("run") :]:
        split = argv.index("--", argv.index("run"))
        argv, cli_args = argv[:split], argv[split + 1 :]
    args = parse_args(argv)
    if args.command == "run":
        raise SystemExit(run_agent(args, cli_args))
    if args.command == "demo":
        from proxy.demo import run_demo

        run_demo(turns=args.turns, window=args.window)
        return

    import uvicorn

    from proxy.server.logs import log_config

    settings = load_settings(args.env_file)  # fail fast, in the parent, with a readable message
    if args.env_file:
        os.environ["COMPACT_ENV_FILE"] = args.env_file
    logging_config = log_config(args.log_level, settings.log_format)
    logging.config.dictConfig(logging_config)  # uvicorn applies it again, in each worker too
    options: dict[str, Any] = {
        "host": args.host,
        "port": args.port,
        "workers": args.workers,
        "log_level": args.log_level,
        "log_config": logging_config,
        "access_log": not args.no_access_log,
        "timeout_graceful_shutdown": args.timeout_graceful_shutdown,
        "factory": True,
        # The protocol gets its limits as an argument, which goes with uvicorn's config to each worker.
        "http": client_protocol(settings),
        "timeout_keep_alive": settings.keep_alive_timeout,
        # Forwarded answers carry the upstream's own Date and Server; the app adds a Date only to a
        # response that has none (its own answers, or an upstream's without one).
        "server_header": False,
        "date_header": False,
    }
    if args.forwarded_allow_ips:
        options["forwarded_allow_ips"] = args.forwarded_allow_ips
    # uvicorn shuts down gracefully on SIGTERM, then raises the signal again under the handler it
    # found installed: make that one a clean exit, status 0, as containers expect.
    signal.signal(signal.SIGTERM, _exit_cleanly)
    uvicorn.run("proxy.server.app:app_from_env", **options)


def client_protocol(settings: Settings) -> Any:
    """uvicorn's protocol with the client limits, the connection cap fitted to the descriptors the
    process may open (each worker's own: workers inherit the limit)."""
    from proxy.connections.descriptors import fit_cap
    from proxy.connections.protocol import PROBE_RESERVE, ClientLimits, protocol_with

    limits = ClientLimits.of(settings)
    fitted = fit_cap(limits.max_client_connections, settings.max_connections, PROBE_RESERVE)
    if fitted.warning:
        logging.getLogger("proxy").warning(fitted.warning)
        limits = dataclasses.replace(limits, max_client_connections=fitted.cap)
    return protocol_with(limits)


def run_agent(args: argparse.Namespace, cli_args: list[str]) -> int:
    from proxy.run.launcher import RunError, RunOptions, run

    options = RunOptions(
        cli=args.cli,
        args=cli_args,
        proxy=args.proxy,
        model=args.model,
        window=args.window,
        upstream=args.upstream,
        tell_window=args.tell_window,
        port=args.run_port,
        env_file=args.run_env_file or args.env_file,
        log=args.log,
    )
    try:
        return run(options)
    except RunError as exc:
        print(f"compacting-proxy run: {exc}", file=sys.stderr)
        return 2


def _exit_cleanly(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(0)
