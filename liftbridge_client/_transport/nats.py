"""NATS: connecting, authenticating and tearing down the client's NATS connection.

How the client's NATS connection authenticates and encrypts: options to nats-py arguments.
Only a client given NATS servers imports this module (and nats-py with it): see
`_transport.probe` for why an address could not be reached. The publish hot path's short
cuts into nats-py are in `_transport.nats_shortcuts`.

Secrets stay in files (nkey seeds, credentials files, TLS keys) or in the `NatsAuth` object;
nothing here logs them. Problems found before dialing (a missing file, a key that does
not load, the nkeys package missing) raise `InvalidInputError` naming the option.
`connect_nats` dials, and says why when no server can be NATS. `nats_tasks` and
`abort_nats_transport` reach into nats-py's private tasks and socket (it has no public way
to drop a connection without flushing); both check what they find and do nothing, saying so
once at DEBUG, when nats-py's internals differ.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import importlib.util
import logging
import ssl
from typing import Any

import nats.aio.client

from liftbridge_client._transport.probe import Protocol, describe, explain, nats_address
from liftbridge_client._validate import redact_url
from liftbridge_client.errors import InvalidInputError, NatsUnreachableError
from liftbridge_client.options import ClientOptions, NatsAuth, TLSConfig

__all__ = [
    "abort_nats_transport",
    "connect_nats",
    "end_failed_attempt",
    "internals_differ",
    "move_nats",
    "nats_security_args",
    "nats_tasks",
    "ssl_context",
]

log = logging.getLogger(__name__)


# ---- Connecting ------------------------------------------------------------------------

# The tasks nats-py 2.10 to 2.16 start per connection (reader, pinger, flusher, reconnect).
_TASK_NAMES = ("_reading_task", "_ping_interval_task", "_flusher_task", "_reconnection_task")
_logged: set[str] = set()


def _nats_version() -> str:
    try:
        return importlib.metadata.version("nats-py")
    except importlib.metadata.PackageNotFoundError:
        return "?"


def internals_differ(hook: str, why: str) -> None:
    """Say once per hook, at DEBUG, that nats-py's own (public) path serves instead: the
    nats-py internals ``hook`` needs are not there (``why``)."""
    if hook not in _logged:
        _logged.add(hook)
        log.debug(
            "nats-py %s: %s; %s goes through nats-py's public path",
            _nats_version(),
            why,
            hook,
        )


def _close_fallback(hook: str, why: str) -> None:
    if hook not in _logged:
        _logged.add(hook)
        log.debug("nats-py internals differ (%s): %s is left to nats-py's close()", why, hook)


def nats_tasks(nc: nats.aio.client.Client) -> list[asyncio.Task[Any]]:
    """The tasks nats-py runs for a connection, so that none outlives the client.

    Private attributes: when this nats-py has none of them, the list is empty and the
    client relies on ``close()`` alone to end them.
    """
    found = [getattr(nc, name, None) for name in _TASK_NAMES]
    if all(not hasattr(nc, name) for name in _TASK_NAMES):
        _close_fallback("waiting for nats-py's tasks", f"no attribute among {_TASK_NAMES}")
    return [t for t in found if isinstance(t, asyncio.Task)]


def abort_nats_transport(nc: nats.aio.client.Client) -> None:
    """Drop nats-py's socket without flushing (its close() is stuck flushing to a dead peer).

    Cancels its tasks and aborts the socket under ``nc._transport._io_writer``; when that
    chain is not there, only the tasks found are cancelled.
    """
    for task in nats_tasks(nc):
        task.cancel()
    writer = getattr(getattr(nc, "_transport", None), "_io_writer", None)
    raw = getattr(writer, "transport", None)
    if raw is None or not callable(getattr(raw, "abort", None)):
        if getattr(nc, "_transport", None) is not None:  # connected once: the chain differs
            _close_fallback("aborting the socket", "no _transport._io_writer.transport.abort()")
        return
    raw.abort()


def end_failed_attempt(nc: nats.aio.client.Client) -> None:
    """Stop what a failed reconnect attempt of nats-py started; called first in its error
    callback.

    nats-py (2.10 to 2.16) starts its read, ping and flush tasks on a new socket once the
    server accepted CONNECT, then flushes; when that fails (the flush times out, the
    socket breaks), it tries the next server and leaves those tasks running and the socket
    open. The stale read task then reads the next connection's socket beside the new one,
    and two flushers write one buffer. In nats-py's reconnect task, whatever of those
    tasks still runs is cancelled and, if any did (the read task may have died on a line
    it could not parse), the socket closed; the parser is reset either way, before
    nats-py goes on.
    """
    if asyncio.current_task() is not getattr(nc, "_reconnection_task", None):
        return  # not nats-py's reconnect loop (it also reports through this callback)
    started = False
    for name in ("_reading_task", "_ping_interval_task", "_flusher_task"):
        task = getattr(nc, name, None)
        if isinstance(task, asyncio.Task) and not task.done():
            task.cancel()
            started = True
    transport = getattr(nc, "_transport", None)
    if started and transport is not None:
        transport.close()
    # The attempt may have stopped inside a message its socket sent part of, or on a line
    # its reader died of; nats-py's own reset never runs on this path (it sets CONNECTING
    # first): the next connection's bytes would be read after them. No read task uses the
    # parser now: the next one starts with the next connection.
    parser = getattr(nc, "_ps", None)
    if parser is not None and callable(getattr(parser, "reset", None)):
        parser.reset()


async def move_nats(nc: nats.aio.client.Client) -> bool:
    """Ask nats-py to reconnect to another server of its pool (the publisher's detour,
    `_publish.strand`); False when the pool has no other server or it cannot.

    nats-py 2.13+ has ``force_reconnect()``; older ones reconnect on ``_process_op_err``
    (private), which is what a read error makes them do.
    """
    if not nc.is_connected or len(nc.servers) < 2:
        return False
    force = getattr(nc, "force_reconnect", None)
    if callable(force):
        await force()
        return True
    op_err = getattr(nc, "_process_op_err", None)
    if not callable(op_err):
        internals_differ(
            "moving to another NATS server", "no force_reconnect() or _process_op_err()"
        )
        return False
    await op_err(ConnectionResetError("moving to another NATS server"))
    return True


def ssl_context(tls: TLSConfig, name: str = "nats_tls") -> ssl.SSLContext:
    """A client-side SSL context: the CA (default: the system's), and a client certificate."""
    try:
        ctx = ssl.create_default_context(
            ssl.Purpose.SERVER_AUTH, cafile=str(tls.ca_file) if tls.ca_file else None
        )
        if tls.cert_file is not None and tls.key_file is not None:
            ctx.load_cert_chain(str(tls.cert_file), str(tls.key_file))
    except (OSError, ssl.SSLError, ValueError) as exc:
        raise InvalidInputError(f"{name}: cannot load the certificates or key: {exc}") from exc
    return ctx


def _auth_args(auth: NatsAuth) -> dict[str, Any]:
    args: dict[str, Any] = {}
    if auth.user is not None:
        args["user"] = auth.user
    if auth.password is not None:
        args["password"] = auth.password
    if auth.token is not None:
        args["token"] = auth.token
    for option, path, nats_arg in (
        ("nkey_seed_file", auth.nkey_seed_file, "nkeys_seed"),
        ("creds_file", auth.creds_file, "user_credentials"),
    ):
        if path is None:
            continue
        if importlib.util.find_spec("nkeys") is None:
            raise InvalidInputError(
                f"NatsAuth.{option} needs the nkeys package: pip install 'liftbridge-client[nkeys]'"
            )
        if not path.is_file():
            raise InvalidInputError(f"NatsAuth.{option}: no such file: {path}")
        args[nats_arg] = str(path)
    return args


def nats_security_args(options: ClientOptions) -> dict[str, Any]:
    """The nats-py ``connect`` arguments for ``options.nats_auth``, ``nats_tls`` and
    ``nats_inbox_prefix``."""
    args: dict[str, Any] = {}
    if options.nats_auth is not None:
        args.update(_auth_args(options.nats_auth))
    if options.nats_inbox_prefix is not None:
        args["inbox_prefix"] = options.nats_inbox_prefix
    tls = options.nats_tls
    if tls is not None:
        args["tls"] = ssl_context(tls)
        if tls.server_name:
            args["tls_hostname"] = tls.server_name
    return args


async def connect_nats(args: dict[str, Any], timeout: float) -> nats.aio.client.Client:
    """``nats.connect(**args)``, failing at once when no server in ``args["servers"]`` can be
    NATS (a host that does not resolve, another protocol on the port: `explain`).

    nats-py alone retries such an address until ``timeout`` runs out and then says
    nothing about why. The probe runs beside the connect and costs nothing when NATS
    answers first. `NatsUnreachableError` chained to the probe's cause.
    """
    servers: list[str] = list(args["servers"])
    addresses = [nats_address(s) for s in servers]
    nc = nats.aio.client.Client()
    reported = args.get("error_cb")

    async def error_cb(exc: Exception) -> None:
        end_failed_attempt(nc)
        if reported is not None:
            await reported(exc)

    args = {**args, "error_cb": error_cb}
    connecting = asyncio.ensure_future(nc.connect(**args))
    probing = asyncio.ensure_future(explain(addresses, Protocol.NATS, timeout))
    try:
        await asyncio.wait({connecting, probing}, return_when=asyncio.FIRST_COMPLETED)
        if not connecting.done():
            findings = probing.result()
            if len(findings) == len(addresses) and all(f.certain for f in findings):
                raise NatsUnreachableError(
                    f"could not connect to NATS at {', '.join(map(redact_url, servers))}: "
                    f"{describe(findings)}"
                ) from findings[0].cause
        await connecting
        return nc
    except BaseException:
        # Failed, timed out or cancelled (close() during connect): a half-made
        # connection may hold a socket and tasks already; none may outlive this call.
        await _abandon(nc, connecting)
        raise
    finally:
        if not probing.done():
            probing.cancel()


async def _abandon(nc: nats.aio.client.Client, connecting: asyncio.Future[None]) -> None:
    """Stop ``nc.connect()`` and drop whatever it made, without a flush or close handshake."""
    connecting.cancel()
    await asyncio.wait({connecting})  # its error is not raised here; ours (cancelled) is
    if not connecting.cancelled():
        connecting.exception()  # retrieved: the caller raises its own error
    abort_nats_transport(nc)
    pending = [t for t in nats_tasks(nc) if not t.done()]
    if pending:
        await asyncio.wait(pending, timeout=0.5)
