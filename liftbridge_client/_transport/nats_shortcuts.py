"""Short cuts into nats-py for the NATS publish hot path.

nats-py delivers every message of a callback subscription as a `Msg` object put
on an asyncio queue, which a task per subscription takes off and awaits the
callback with: about a third of the client's CPU per publish went there (the
acks). `route_sid` hands the payloads of one subscription straight from
nats-py's protocol parser to a plain function instead, in the same order, on
the same connection, with no queue and no task hop. Once nats-py's read task has
read from a connection, the acks are served as the socket's data arrives, without
waking that task (`_FastReads`). Outgoing, `PubBuffer` appends PUB commands to
nats-py's buffer without a coroutine per message.

It replaces ``_process_msg`` on the one connection object (an instance
attribute; nats-py's parser looks it up there for every MSG) with a router
that serves the routed subscription ids and hands everything else, and any
message with headers, to nats-py's own method unchanged. When this nats-py
has no such method, nothing is routed and the caller keeps its callback
subscription: the short cut changes speed, never behaviour.

Each hook checks the nats-py internals it uses (names, types, the parser calling
``_process_msg``) before it installs, and otherwise leaves everything to nats-py's
public path, saying so once at DEBUG (the range pyproject.toml allows is what
`make test-deps` proves).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import nats.aio.client
import nats.protocol.parser

from liftbridge_client._native import speedups
from liftbridge_client._transport.nats import internals_differ

__all__ = ["READ_SIZE", "PubBuffer", "route_sid", "serve_routed", "small_reads", "unroute_sid"]

log = logging.getLogger(__name__)

_ROUTES = "_liftbridge_raw_routes"  # the router's table, kept on the connection object

Handler = Callable[[bytes], None]

# nats-py's parser state "between messages", and its control line limit.
_CONTROL_LINE: int | None = getattr(nats.protocol.parser, "AWAITING_CONTROL_LINE", None)
_MAX_CONTROL_LINE: int = getattr(nats.protocol.parser, "MAX_CONTROL_LINE_SIZE", 4096)
# The router only sees what nats-py's parser hands to ``nc._process_msg``.
_PARSER_CALLS_PROCESS_MSG: bool = "_process_msg" in getattr(
    getattr(
        getattr(getattr(nats.protocol.parser, "Parser", None), "parse", None), "__code__", None
    ),
    "co_names",
    (),
)
_MSG_ARGS = ("sid", "subject", "reply", "data", "headers")
# The connection states in which nats-py's read task parses what arrives.
_READING: frozenset[int] = frozenset(
    getattr(nats.aio.client.Client, name)
    for name in ("CONNECTED", "DRAINING_SUBS", "DRAINING_PUBS")
    if type(getattr(nats.aio.client.Client, name, None)) is int
)


def _install(nc: nats.aio.client.Client) -> dict[int, Handler] | None:
    routes: dict[int, Handler] | None = getattr(nc, _ROUTES, None)
    if routes is not None:
        return routes
    original: Callable[..., Awaitable[None]] | None = getattr(nc, "_process_msg", None)
    why = _router_unfit(original)
    if why is not None:
        internals_differ("routing acks", why)
        return None
    assert original is not None
    table: dict[int, Handler] = {}
    stats: Any = getattr(nc, "stats", None)
    counts = stats if isinstance(stats, dict) else None

    async def process_msg(
        sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes | None = None
    ) -> None:
        handler = table.get(sid)
        if handler is None or headers:
            await original(sid, subject, reply, data, headers)
            return
        if counts is not None:  # what nats-py's own path counts
            counts["in_msgs"] += 1
            counts["in_bytes"] += len(data)
        try:
            handler(data)
        except Exception:  # a bug in the handler must not break nats-py's read loop
            log.exception("handler of NATS subscription %d failed", sid)

    setattr(nc, "_process_msg", process_msg)  # noqa: B010 - an instance attribute, on purpose
    setattr(nc, _ROUTES, table)
    _install_parser(nc, table, counts)
    return table


def _router_unfit(original: object) -> str | None:
    """Why the router cannot stand in for ``original`` (nc._process_msg); None: it can."""
    if not _PARSER_CALLS_PROCESS_MSG:
        return "its parser does not call _process_msg"
    if original is None or not inspect.iscoroutinefunction(original):
        return "the connection has no coroutine _process_msg"
    try:
        params = tuple(inspect.signature(original).parameters)
    except (TypeError, ValueError):
        return "the signature of _process_msg cannot be read"
    if params != _MSG_ARGS:
        return f"_process_msg takes {params}, not {_MSG_ARGS}"
    return None


def _install_parser(
    nc: nats.aio.client.Client, table: dict[int, Handler], counts: dict[str, int] | None
) -> None:
    """Serve routed MSGs before nats-py's parser sees them (`_FastReads`), when its
    parser is of the shape that was written for."""
    ps: Any = getattr(nc, "_ps", None)
    original: Callable[[bytes], Awaitable[None]] | None = getattr(ps, "parse", None)
    if (
        original is None
        or not inspect.iscoroutinefunction(original)
        or not isinstance(getattr(ps, "buf", None), bytearray)
        or getattr(ps, "state", None) != _CONTROL_LINE
        or _CONTROL_LINE is None
    ):
        internals_differ(
            "parsing acks", "its parser is not of the shape the fast parse was written for"
        )
        return
    reads = _FastReads(nc, ps, original, table, counts)
    setattr(ps, "parse", reads.parse)  # noqa: B010 - an instance attribute, on purpose


class _FastReads:
    """Routed MSGs served at the head of each read, in two places.

    nats-py matches a regular expression, fills a dict and awaits a coroutine for
    every message; acks arrive hundreds to a read, so that was the largest cost of
    an ack. `serve_routed` walks the read with ``find`` and slices instead. It
    stops at the first thing that is not a complete MSG for a routed subscription
    and hands the rest to nats-py's own ``parse`` (which the router above still
    serves); a routed MSG cut by the end of the read waits in nats-py's buffer
    for the next read.

    1. `parse` stands in for nats-py's parser, which its read task calls with each read.
    2. `feed_data` stands in for the connection's ``asyncio.StreamReader.feed_data``,
       which the socket's ``data_received`` calls: while nothing of the connection waits
       to be parsed (the reader holds nothing, nats-py's parse is not part-way) and
       nats-py still reads it (not found broken, no other socket since), the acks are
       served as they arrive. The read task, and the event-loop round that
       wakes it, are then skipped: one publish at a time, that was an eighth of the
       round trip. Everything else goes to the reader, in order, as before.

    The reader is taken over when the read task parses the first read of a connection
    (nats-py makes a new reader for each one); only a plain ``asyncio.StreamReader``.
    """

    __slots__ = ("_busy", "_counts", "_nc", "_original", "_ps", "_reader", "_table")

    def __init__(
        self,
        nc: nats.aio.client.Client,
        ps: Any,
        original: Callable[[bytes], Awaitable[None]],
        table: dict[int, Handler],
        counts: dict[str, int] | None,
    ) -> None:
        self._nc: Any = nc
        self._ps = ps
        self._original = original
        self._table = table
        self._counts = counts
        self._busy = False  # nats-py's own parse is under way (it awaits between ops)
        self._reader: object = None  # the reader whose feed_data is `feed_data`

    async def parse(self, data: bytes = b"") -> None:
        reader = getattr(getattr(self._nc, "_transport", None), "_io_reader", None)
        if reader is not self._reader:  # a connection's first read
            self._take_over(reader)
        ps = self._ps
        if not self._table or ps.state != _CONTROL_LINE:
            await self._nats_parse(data)
            return
        rest = self._serve_head(data)
        if rest:
            await self._nats_parse(rest)

    def _serve_head(self, data: bytes) -> bytes:
        """Serve the routed MSGs at the head of what nats-py's buffer holds and ``data``;
        returns what is left for nats-py to parse (nothing when a routed MSG is cut: it
        waits in nats-py's buffer for the next read, as nats-py's own parse would keep it)."""
        buf = self._ps.buf
        joined = bool(buf)
        if joined:  # the tail of the previous read
            buf.extend(data)
            data = bytes(buf)
        pos, partial = _serve(data, self._table, self._counts)
        if joined:
            del buf[:]
        if pos == len(data):
            return b""
        rest = data[pos:] if pos else data
        if partial:
            buf.extend(rest)
            return b""
        return rest

    async def _nats_parse(self, data: bytes) -> None:
        self._busy = True
        try:
            await self._original(data)
        finally:
            self._busy = False

    def _take_over(self, reader: object) -> None:
        ps = self._ps
        if self._reader is not None and hasattr(ps, "reset"):
            # A new connection's first read: nothing parsed before it belongs to it. (nats-py
            # resets its parser when it finds the connection broken, and its reset on
            # reconnecting does not run: _process_connect_init sets CONNECTING first.)
            ps.reset()
        self._reader = reader
        if type(reader) is not asyncio.StreamReader:
            internals_differ(
                "reading acks", "its transport does not read through an asyncio.StreamReader"
            )
            return
        # The writer's: after start_tls (nats-py's TLS upgrade) the reader has no transport.
        writer = getattr(getattr(self._nc, "_transport", None), "_io_writer", None)
        small_reads(getattr(writer, "transport", None))
        pending = getattr(reader, "_buffer", None)
        if not isinstance(pending, bytearray):
            internals_differ("reading acks", "asyncio.StreamReader has no _buffer bytearray")
            return
        if type(getattr(self._nc, "_status", None)) is not int or not _READING:
            internals_differ("reading acks", "the connection has no status of nats-py's kinds")
            return
        feed = reader.feed_data
        nc = self._nc

        def feed_data(data: bytes) -> None:
            if (
                self._busy
                or reader._buffer  # type: ignore[attr-defined]
                or ps.state != _CONTROL_LINE
                or not self._table
                or type(data) is not bytes  # a proactor's bytearray: nats-py's to parse
                or not data
                or nc._status not in _READING  # broken: nats-py reset its parser, stopped reading
                or getattr(nc._transport, "_io_reader", None) is not reader  # a former socket's
            ):
                feed(data)
                return
            rest = self._serve_head(data)
            if rest:
                feed(rest)  # nats-py's read task parses what is not a routed MSG

        setattr(reader, "feed_data", feed_data)  # noqa: B010 - an instance attribute


# asyncio's socket transports read with ``recv(max_size)``, 256 KiB: CPython allocates that
# much for every read, which glibc serves with mmap (over its 128 KiB threshold), so each
# read of one 100-byte ack paid mmap, a page fault, mremap and munmap: 8 us per read
# against 0.8 us at 64 KiB, and a tenth of a lone publish's round trip.
READ_SIZE = 64 * 1024


def small_reads(transport: object) -> None:
    """Make an asyncio socket transport read at most `READ_SIZE` bytes at a time. Over
    TLS the limit is its SSL protocol's, which reads the decrypted bytes with
    ``SSLObject.read(max_size)``, also 256 KiB. uvloop's transports read into a buffer of
    their own."""
    target = getattr(transport, "_ssl_protocol", transport)
    size = getattr(type(target), "max_size", None)
    if type(size) is int and size > READ_SIZE:
        target.max_size = READ_SIZE  # type: ignore[attr-defined]


def serve_routed(
    data: bytes, table: Mapping[int, Handler], counts: dict[str, int] | None = None
) -> tuple[int, bool]:
    """Hand the complete MSGs for routed subscriptions at the head of ``data`` to their
    handlers, in order.

    Returns how many bytes were consumed and whether what stops the walk is the
    start of a routed MSG that ``data`` does not hold all of (keep it for more
    bytes) rather than anything else (nats-py's parser takes it from there, and
    raises its own errors for what is malformed).
    """
    pos = 0
    end = len(data)
    served = served_bytes = 0
    last_sid = b""  # acks all come for one subscription: look its handler up once
    handler: Handler | None = None
    try:
        while pos < end:
            if not data.startswith(b"MSG ", pos):
                # A fragment of "MSG " at the end of the read is a cut MSG.
                return pos, end - pos < 4 and b"MSG "[: end - pos] == data[pos:]
            eol = data.find(b"\r\n", pos, pos + _MAX_CONTROL_LINE)
            if eol < 0:
                # No line end yet: a cut MSG, unless the line is already over the limit.
                return pos, end - pos < _MAX_CONTROL_LINE
            line = data[pos + 4 : eol]
            args = line.split()
            if len(args) == 3:
                sid, size = args[1], args[2]
            elif len(args) == 4 and b"\r" not in line and b"\n" not in line:
                sid, size = args[1], args[3]
            else:
                return pos, False
            # nats-py's MSG pattern takes any whitespace between fields, except CR or LF
            # between a reply subject and the size, and none after the size: it refuses
            # such lines, so they are left to it (no server sends them).
            if sid != last_sid:
                if not sid.isdigit():
                    return pos, False
                handler = table.get(int(sid))
                last_sid = sid
            if handler is None or not size.isdigit() or not line.endswith(size):
                return pos, False
            start = eol + 2
            stop = start + int(size)
            if stop + 2 > end:
                return pos, True
            pos = stop + 2  # nats-py skips the two bytes after a payload unchecked, as here
            served += 1
            served_bytes += stop - start
            try:
                handler(data[start:stop])
            except Exception:  # a bug in a handler must not break nats-py's read loop
                log.exception("handler of NATS subscription %d failed", int(sid))
        return pos, False
    finally:
        if counts is not None and served:  # what nats-py's own path counts
            counts["in_msgs"] += served
            counts["in_bytes"] += served_bytes


def _report(sid: int, exc: Exception) -> None:
    log.error("handler of NATS subscription %d failed", sid, exc_info=exc)


def _serve_c(
    data: bytes, table: dict[int, Handler], counts: dict[str, int] | None
) -> tuple[int, bool]:
    """`serve_routed` by the C accelerator (the same walk; tests/unit/test_speedups.py)."""
    assert speedups is not None
    return speedups.serve_routed(data, table, counts, _report)


_serve: Callable[[bytes, dict[int, Handler], dict[str, int] | None], tuple[int, bool]] = (
    serve_routed if speedups is None else _serve_c
)


def route_sid(nc: nats.aio.client.Client, sub: object, handler: Handler) -> bool:
    """Deliver the payloads of subscription ``sub`` on ``nc`` to ``handler`` directly.

    False when this nats-py (or a stand-in connection) offers no way to: the
    subscription's own callback then keeps receiving them.
    """
    sid = getattr(sub, "_id", None)
    if type(sid) is not int:
        return False
    routes = _install(nc)
    if routes is None:
        return False
    routes[sid] = handler
    return True


def unroute_sid(nc: nats.aio.client.Client, sub: object) -> None:
    """Stop routing ``sub`` (before unsubscribing it)."""
    routes: dict[int, Handler] | None = getattr(nc, _ROUTES, None)
    sid = getattr(sub, "_id", None)
    if routes is not None and type(sid) is int:
        routes.pop(sid, None)


class PubBuffer:
    """PUB commands appended to nats-py's outgoing buffer without a coroutine per message.

    ``nats.aio.client.Client.publish`` validates the subject, builds the command
    and awaits two more coroutines for every message before it lands in the
    connection's pending list, which nats-py's flusher task writes out with one
    ``writelines``. `append` does the same append synchronously, so a sender can
    queue a whole batch and wake the flusher once (`kick`), but only when nothing
    would differ from nats-py's own path: the connection is plainly connected
    (not reconnecting, whose buffering rules nats-py keeps applying; not
    draining or closed), the buffer stays under nats-py's pending limit, and the
    subject already went through ``publish`` once (nats-py validated it).
    Otherwise it returns False and the caller publishes through nats-py.
    """

    __slots__ = ("_connected", "_heads", "_nc", "_usable", "appended", "unflushed")

    def __init__(self, nc: nats.aio.client.Client) -> None:
        self._nc: Any = nc
        self._connected = getattr(nats.aio.client.Client, "CONNECTED", None)
        why = self._unfit(nc)
        self._usable = why is None
        if why is not None:
            internals_differ("publishing", why)
        self._heads: dict[str, bytes] = {}  # subject -> b"PUB <subject> "
        self.unflushed = False  # appended since the flusher was last woken
        self.appended = 0  # how many of them

    def _unfit(self, nc: object) -> str | None:
        """Why nats-py's outgoing buffer is not what `append` writes to; None: it is."""
        if not isinstance(getattr(nc, "_pending", None), list):
            return "the connection has no _pending list"
        for name in ("_pending_data_size", "_max_pending_size"):
            if type(getattr(nc, name, None)) is not int:
                return f"the connection's {name} is not an int"
        if not inspect.iscoroutinefunction(getattr(nc, "_flush_pending", None)):
            return "the connection has no coroutine _flush_pending"
        if not hasattr(nc, "_flush_queue") or not hasattr(nc, "_status"):
            return "the connection has no _flush_queue or _status"
        if self._connected is None:
            return "nats.aio.client.Client has no CONNECTED status"
        if not isinstance(getattr(nc, "stats", None), dict):
            return "the connection has no stats dict"
        return None

    def learn(self, subject: str) -> None:
        """nats-py accepted a publish on ``subject``: later ones may take `append`."""
        if self._usable and subject not in self._heads:
            self._heads[subject] = b"PUB " + subject.encode() + b" "

    def head(self, subject: str) -> bytes | None:
        """``b"PUB <subject> "`` while `append` takes messages for ``subject`` (as far as
        the subject and the connection's state go), else None."""
        head = self._heads.get(subject)
        if head is None or self._nc._status != self._connected:
            return None
        return head

    def append(self, subject: str, payload: bytes, write_every: int = 0) -> bool:
        head = self.head(subject)
        if head is None:
            return False
        cmd = b"%s%d\r\n%s\r\n" % (head, len(payload), payload)
        return self.append_command(cmd, write_every)

    def append_command(self, cmd: bytes, write_every: int = 0) -> bool:
        """`append` of a PUB command built already, from `head`; False when nats-py must
        take it (its buffer is full: its publish force-flushes first). With
        ``write_every``, once that many appends wait they are written (`write_now`): the
        wire gets the first of a long burst while the rest is being built."""
        nc = self._nc
        total = nc._pending_data_size + len(cmd)
        if nc._max_pending_size > 0 and total > nc._max_pending_size:
            return False  # nats-py's publish force-flushes first
        nc._pending.append(cmd)
        nc._pending_data_size = total
        stats = nc.stats
        stats["out_msgs"] += 1
        stats["out_bytes"] += len(cmd) - cmd.index(b"\r\n") - 4  # the payload's size
        self.unflushed = True
        self.appended += 1
        if write_every and self.appended >= write_every:
            self.write_now()
        return True

    def write_now(self) -> bool:
        """Write what `append` queued now, as nats-py's flusher would on its next turn.

        Only when the socket has nothing queued and the flusher is not due (then
        it is the same bytes, in order, one event-loop round sooner). False:
        nothing was written; `kick` leaves it to the flusher.
        """
        nc = self._nc
        queue = nc._flush_queue
        if queue is None or not queue.empty():
            return False  # the flusher is due already and takes these bytes too
        writer: Any = getattr(getattr(nc, "_transport", None), "_io_writer", None)
        transport = getattr(writer, "transport", None)
        if (
            nc._status == self._connected
            and nc._pending
            and transport is not None
            and not transport.is_closing()
            and transport.get_write_buffer_size() == 0
        ):
            pending = nc._pending
            nc._pending = []
            nc._pending_data_size = 0
            writer.writelines(pending)
            self.unflushed = False
            self.appended = 0
            return True
        return False

    async def kick(self) -> None:
        """Get what `append` queued written: now (`write_now`), else by nats-py's
        flusher, woken as its publish wakes it."""
        if not self.unflushed or self.write_now():
            return
        self.unflushed = False
        self.appended = 0
        queue = self._nc._flush_queue
        if queue is None or not queue.empty():
            return  # the flusher is due already and takes these bytes too
        # With a backlog, or a transport of another shape, the flusher keeps pacing.
        await self._nc._flush_pending()
