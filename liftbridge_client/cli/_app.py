"""The root command: connection options, and running a command's coroutine.

Every command that talks to Liftbridge calls `run` with a coroutine function taking
a connected `Client`; `run` turns the client's typed errors into one line on stderr
and an exit status (`_exit.ExitStatus`), or a traceback with ``--debug``.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import traceback
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from liftbridge_client import errors
from liftbridge_client._native import ACTIVE
from liftbridge_client._version import __version__
from liftbridge_client.cli._connect import ConnectionSettings, split_list
from liftbridge_client.cli._exit import ExitStatus, status_for
from liftbridge_client.cli._output import err_console
from liftbridge_client.cli._params import DURATION_UNITS, POSITIVE_DURATION
from liftbridge_client.cli._trace import check_traceparent, in_trace
from liftbridge_client.client import Client
from liftbridge_client.options import TracingOptions

__all__ = ["CommandError", "cli", "error_line", "fail", "run", "run_plain", "settings_of"]

_T = TypeVar("_T")

_FILE = click.Path(exists=True, dir_okay=False, path_type=Path)

EXIT_CODES_HELP = """\b
Exit status:
  0 ok, 1 other error, 2 bad usage or input, 3 unreachable (no broker/NATS,
  connection lost), 4 not found, 5 already exists, 6 timeout, 7 message refused
  by the server, 8 feature not supported by the server, 9 no message at the position
  asked for (subscribe without --follow), 130 interrupted (Ctrl-C).
"""


@click.group(
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    epilog=EXIT_CODES_HELP,
)
@click.version_option(
    __version__,
    prog_name="liftbridge",
    message=f"%(prog)s, version %(version)s ({'with' if ACTIVE else 'without'} the C accelerator)",
)
@click.option(
    "-b",
    "--brokers",
    multiple=True,
    envvar="LIFTBRIDGE_ADDRS",
    default=("127.0.0.1:9292",),
    show_default=True,
    help="Seed broker host:port (repeat or comma-separate). Env: LIFTBRIDGE_ADDRS.",
)
@click.option(
    "--nats",
    "nats_servers",
    multiple=True,
    envvar="LIFTBRIDGE_NATS_URL",
    help="NATS URL(s); publishing then defaults to NATS. Env: LIFTBRIDGE_NATS_URL.",
)
@click.option(
    "--tls-ca",
    type=_FILE,
    envvar="LIFTBRIDGE_TLS_CA",
    help="CA bundle to verify the brokers (gRPC TLS). Env: LIFTBRIDGE_TLS_CA.",
)
@click.option(
    "--tls-cert",
    type=_FILE,
    envvar="LIFTBRIDGE_TLS_CERT",
    help="Client certificate (mutual TLS). Env: LIFTBRIDGE_TLS_CERT.",
)
@click.option(
    "--tls-key",
    type=_FILE,
    envvar="LIFTBRIDGE_TLS_KEY",
    help="Client certificate's key. Env: LIFTBRIDGE_TLS_KEY.",
)
@click.option(
    "--tls-server-name",
    envvar="LIFTBRIDGE_TLS_SERVER_NAME",
    help="Name to check in the broker's certificate. Env: LIFTBRIDGE_TLS_SERVER_NAME.",
)
@click.option("--nats-user", envvar="LIFTBRIDGE_NATS_USER", help="Env: LIFTBRIDGE_NATS_USER.")
@click.option(
    "--nats-password",
    envvar="LIFTBRIDGE_NATS_PASSWORD",
    help="Prefer the environment variable LIFTBRIDGE_NATS_PASSWORD.",
)
@click.option(
    "--nats-token",
    envvar="LIFTBRIDGE_NATS_TOKEN",
    help="Prefer the environment variable LIFTBRIDGE_NATS_TOKEN.",
)
@click.option(
    "--nats-nkey-seed-file",
    type=_FILE,
    envvar="LIFTBRIDGE_NATS_NKEY_SEED_FILE",
    help="File with the NATS user's nkey seed. Env: LIFTBRIDGE_NATS_NKEY_SEED_FILE.",
)
@click.option(
    "--nats-creds",
    type=_FILE,
    envvar="LIFTBRIDGE_NATS_CREDS",
    help="NATS credentials file (JWT and seed). Env: LIFTBRIDGE_NATS_CREDS.",
)
@click.option(
    "--nats-tls-ca",
    type=_FILE,
    envvar="LIFTBRIDGE_NATS_TLS_CA",
    help="CA bundle to verify the NATS server. Env: LIFTBRIDGE_NATS_TLS_CA.",
)
@click.option(
    "--nats-tls-cert",
    type=_FILE,
    envvar="LIFTBRIDGE_NATS_TLS_CERT",
    help="Client certificate for NATS. Env: LIFTBRIDGE_NATS_TLS_CERT.",
)
@click.option(
    "--nats-tls-key",
    type=_FILE,
    envvar="LIFTBRIDGE_NATS_TLS_KEY",
    help="Its key. Env: LIFTBRIDGE_NATS_TLS_KEY.",
)
@click.option(
    "--nats-inbox-prefix",
    envvar="LIFTBRIDGE_NATS_INBOX_PREFIX",
    help="Subject prefix of the ack inbox. Env: LIFTBRIDGE_NATS_INBOX_PREFIX.",
)
@click.option(
    "--timeout",
    type=POSITIVE_DURATION,
    default="5s",
    show_default=True,
    envvar="LIFTBRIDGE_TIMEOUT",
    help=f"To connect, and for each request ({DURATION_UNITS}). Env: LIFTBRIDGE_TIMEOUT.",
)
@click.option(
    "--traceparent",
    envvar="TRACEPARENT",
    help="W3C traceparent of the caller's span: publishes carry it on (needs [otel]). "
    "Env: TRACEPARENT.",
)
@click.option("--debug", is_flag=True, help="Debug logging, and tracebacks for errors.")
@click.pass_context
def cli(ctx: click.Context, /, **kw: Any) -> None:
    """Liftbridge from the command line: streams, publish, subscribe, cursors, a local server."""
    kw["brokers"] = split_list(kw["brokers"])
    kw["nats_servers"] = split_list(kw["nats_servers"])
    ctx.obj = ConnectionSettings(**kw)
    if kw["debug"]:
        logging.basicConfig(
            level=logging.DEBUG,
            format="%(asctime)s %(levelname)s %(name)s: %(message)s",
            stream=sys.stderr,
        )
    else:
        quiet_logging()


def quiet_logging() -> None:
    """No log records on stderr: a failure reaches the user as the one ``error:`` line.

    Without a handler anywhere, Python prints WARNINGs through its last-resort handler
    (nats-py's retries while connecting came out that way, ahead of the error they
    caused). A NullHandler on the root logger stops that; ``--debug`` shows them all.
    """
    root = logging.getLogger()
    if not root.handlers:
        root.addHandler(logging.NullHandler())


def settings_of(ctx: click.Context) -> ConnectionSettings:
    settings = ctx.find_object(ConnectionSettings)
    assert settings is not None, "the root command sets it"
    return settings


class CommandError(Exception):
    """A failure worded in the command line's terms (its flags, not the API's keywords).

    Commands raise it, usually from a library error they know the flag for; `run` prints
    ``message`` as the one ``error:`` line and exits with ``status``.
    """

    def __init__(self, message: str, status: ExitStatus = ExitStatus.ERROR) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


def fail(message: str, status: ExitStatus = ExitStatus.ERROR) -> None:
    """Print ``error: message`` on stderr and exit with ``status``."""
    # soft_wrap: one line whatever the width (scripts read it).
    err_console.print(f"[bold red]error:[/] {message}", markup=True, soft_wrap=True)
    raise SystemExit(int(status))


# What each client feature is on the command line, for FeatureNotSupportedError (whose
# text names the feature by its API id).
_FEATURE_FLAGS = {
    "pause_resume": "streams pause and subscribe --resume",
    "readonly_streams": "streams readonly",
    "cursors": "the cursors commands",
    "stop_positions": "subscribe without -f (and --stop-offset, --stop-time)",
    "optimistic_concurrency": "streams create --optimistic-concurrency",
    "publish_async": "publish -t grpc",
}


def error_line(exc: BaseException) -> str:
    """The one ``error:`` line (without the prefix) reporting ``exc``."""
    if isinstance(exc, CommandError):
        return exc.message
    name = type(exc).__name__
    text = str(exc) or name
    if not isinstance(exc, errors.LiftbridgeError):
        return text
    if isinstance(exc, errors.FeatureNotSupportedError) and exc.feature in _FEATURE_FLAGS:
        return f"{name}: {_FEATURE_FLAGS[exc.feature]} needs a newer server: {text}"
    return f"{name}: {text}"


def _report(exc: BaseException, debug: bool) -> None:
    if debug:
        traceback.print_exception(exc, file=sys.stderr)
    status = exc.status if isinstance(exc, CommandError) else status_for(exc)
    fail(error_line(exc), status)


def run_plain(settings: ConnectionSettings, main: Callable[[], Awaitable[_T]]) -> _T:
    """Run ``main()`` in a fresh event loop, reporting errors as the command's exit."""
    try:
        return asyncio.run(_call(main))
    except KeyboardInterrupt:
        err_console.print("interrupted", highlight=False)
        raise SystemExit(int(ExitStatus.INTERRUPTED)) from None
    except BrokenPipeError:
        # The reader went away (`| head`): not an error. Keep Python from complaining
        # about flushing stdout at exit.
        sys.stdout = open("/dev/null", "w")  # noqa: SIM115 - lives until exit
        raise SystemExit(int(ExitStatus.OK)) from None
    except (errors.LiftbridgeError, OSError, CommandError) as exc:
        _report(exc, settings.debug)
        raise AssertionError("unreachable") from None


async def _call(main: Callable[[], Awaitable[_T]]) -> _T:
    return await main()


def run(
    settings: ConnectionSettings,
    main: Callable[[Client], Awaitable[_T]],
    **options: object,
) -> _T:
    """Connect a client (``options`` are `ClientOptions` overrides), run ``main(client)``."""

    async def connected() -> _T:
        if settings.traceparent is None:
            async with settings.client(**options) as client:
                return await main(client)
        check_traceparent(settings.traceparent)
        with in_trace(settings.traceparent):
            async with settings.client(tracing=TracingOptions(), **options) as client:
                return await main(client)

    return run_plain(settings, connected)
