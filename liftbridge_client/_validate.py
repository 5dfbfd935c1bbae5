"""Every check of a caller's value, and the duration fields of the option classes.

Pure: no IO.

Checks
------

Every check of a caller's value, in one place. Pure: no IO.

Each function returns the value in the form the client uses (an int, float seconds, a
str that encodes) or raises `InvalidInputError` naming the parameter. Nothing here lets a
TypeError, ValueError or UnicodeEncodeError through: a bad value never reaches protobuf,
nats-py or grpc, where it would fail with their errors, or worse, reach the server.

Names and subjects follow the server's own limits (see docs/security.md): a stream name
becomes a directory (``<data dir>/streams/<name>``) and a token of NATS subjects
(``<namespace>.<name>.<partition>.replicate``); a stream subject is subscribed to as given
and with ``.<N>`` appended for partition N. Values that break either make the v1.9.0
server panic, and panic again on every restart.

Duration fields
---------------

Duration fields of the frozen option dataclasses: numbers or timedeltas in, float out.

A `Seconds` field is a data descriptor: the dataclass ``__init__`` (and `dataclasses.replace`)
goes through `Seconds.__set__`, which validates the value (`seconds`, above) and stores
float seconds; reading the attribute gives that float. Type checkers take the ``__set__``
parameter type for the constructor (``float | timedelta``) and the ``__get__`` result type
for the attribute (``float``), so code reading options never sees a timedelta.

Classes using it cannot have ``slots=True`` (the descriptor is a class attribute); the values
live in the instance ``__dict__`` under a private key.
"""

from __future__ import annotations

import datetime
import math
import unicodedata
import urllib.parse
from collections.abc import Callable
from typing import Any, Final, overload

from liftbridge_client.errors import InvalidInputError

__all__ = [
    "INT32_MAX",
    "INT64_MAX",
    "MAX_NAME_BYTES",
    "MAX_SECONDS",
    "MAX_SUBJECT_BYTES",
    "OptionalSeconds",
    "Seconds",
    "broker_address",
    "flag",
    "group_name",
    "hidden",
    "int_arg",
    "nats_server_url",
    "publish_subject",
    "redact_url",
    "seconds",
    "stream_name",
    "stream_subject",
    "text",
    "timestamp_ns",
]

# ---- Checks ----------------------------------------------------------------------------

INT32_MAX: Final = 2**31 - 1
INT64_MAX: Final = 2**63 - 1

# The longest duration any option takes: about 31 years. In milliseconds (stream
# settings) and nanoseconds (timestamps) it still fits an int64.
MAX_SECONDS: Final = 1e9

# A directory name on Linux and macOS is at most 255 bytes; a longer stream name makes
# the server fail to create its directory (ENAMETOOLONG) and panic.
MAX_NAME_BYTES: Final = 255
# NATS protocol lines (SUB/PUB/MSG with subject, reply and queue) must stay below the
# server's max_control_line (4 KiB by default).
MAX_SUBJECT_BYTES: Final = 1024


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


# ---------------------------------------------------------------- numbers


def int_arg(name: str, value: object, lo: int, hi: int) -> int:
    """An int (not a bool, float or str) in ``[lo, hi]``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInputError(f"{name} must be an int, got {_show(value)}")
    if value < lo:
        raise InvalidInputError(f"{name} must be >= {lo}, got {value}")
    if value > hi:
        raise InvalidInputError(f"{name} must be <= {hi}, got {value}")
    return int(value)


def flag(name: str, value: object) -> bool:
    """A bool (not an int)."""
    if not isinstance(value, bool):
        raise InvalidInputError(f"{name} must be a bool, got {_show(value)}")
    return value


def seconds(name: str, value: object, *, allow_zero: bool = False) -> float:
    """A duration in seconds: an int, a float or a `datetime.timedelta`.

    Refuses bools, nan, infinities, negative values, zero (unless ``allow_zero``) and
    anything above `MAX_SECONDS`.
    """
    if isinstance(value, datetime.timedelta):
        out = value.total_seconds()
    elif isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInputError(
            f"{name} must be a number of seconds or a timedelta, got {_show(value)}"
        )
    else:
        try:
            out = float(value)
        except OverflowError:  # an int too big for a float
            out = math.inf
    if math.isnan(out) or not (0 <= out <= MAX_SECONDS) or (out == 0 and not allow_zero):
        low = ">= 0" if allow_zero else "> 0"
        raise InvalidInputError(
            f"{name} must be {low} and at most {MAX_SECONDS:.0f} seconds, got {_show(value)}"
        )
    return out


def timestamp_ns(name: str, value: object) -> int:
    """A point in time as Unix nanoseconds: an int >= 0, or a `datetime.datetime`.

    A naive datetime is local time, as `datetime.datetime.timestamp` takes it.
    """
    if isinstance(value, datetime.datetime):
        try:
            delta = value - _EPOCH if value.tzinfo is not None else None
            ns = (
                (delta.days * 86_400 + delta.seconds) * 10**9 + delta.microseconds * 1000
                if delta is not None
                else round(value.timestamp() * 1e9)
            )
        except (OverflowError, ValueError, OSError) as exc:
            raise InvalidInputError(f"{name}: {value!r} is not a valid time ({exc})") from exc
        if not 0 <= ns <= INT64_MAX:
            raise InvalidInputError(f"{name} must be after 1970 and before 2262, got {value!r}")
        return ns
    return int_arg(name, value, 0, INT64_MAX)


_EPOCH: Final = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)


# ---------------------------------------------------------------- strings


def text(
    name: str, value: object, *, empty_ok: bool = False, show: Callable[[object], str] = _show
) -> str:
    """A str that encodes to UTF-8 (no lone surrogates); non-empty unless ``empty_ok``.

    ``show`` renders the value in the error: `hidden` for a secret, so none is ever shown.
    """
    if not isinstance(value, str) or not (value or empty_ok):
        what = "a string" if empty_ok else "a non-empty string"
        raise InvalidInputError(f"{name} must be {what}, got {show(value)}")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidInputError(
                f"{name} does not encode to UTF-8 (lone surrogate at index {exc.start}): "
                f"{show(value)}"
            ) from None
    return str(value)


def hidden(value: object) -> str:
    """How an error shows a secret (a password, a token): its type only."""
    return f"a {type(value).__name__} (value hidden)"


def _utf8_len(value: str) -> int:
    return len(value) if value.isascii() else len(value.encode("utf-8"))


def _bad_char(value: str) -> str | None:
    """The first whitespace or control character in ``value``, if any."""
    for ch in value:
        if ch.isspace() or unicodedata.category(ch) == "Cc":
            return ch
    return None


def _check_chars(name: str, value: str) -> None:
    bad = _bad_char(value)
    if bad is not None:
        raise InvalidInputError(
            f"{name} must not contain whitespace or control characters "
            f"(found {bad!r}): {_show(value)}"
        )


def _check_tokens(name: str, value: str) -> list[str]:
    tokens = value.split(".")
    if any(not t for t in tokens):
        raise InvalidInputError(
            f"{name} must not start or end with '.' or contain '..' (NATS subjects have no "
            f"empty tokens): {_show(value)}"
        )
    return tokens


def stream_name(value: object, name: str = "name") -> str:
    """A name a server can create a stream under.

    Rules: 1 to 255 bytes of UTF-8; no whitespace or control characters (NUL included);
    no '/' or '\\'; no empty dot-separated token (no leading or trailing '.', no '..');
    no token that is exactly '*' or '>'. (Reserved names, ``__cursors`` and
    ``__activity``, are left to the server: it refuses them with INVALID_ARGUMENT.)
    """
    value = text(name, value)
    _check_chars(name, value)
    if _utf8_len(value) > MAX_NAME_BYTES:
        raise InvalidInputError(
            f"{name} must be at most {MAX_NAME_BYTES} bytes of UTF-8 (it names a directory "
            f"on the server), got {_utf8_len(value)} bytes"
        )
    if "/" in value or "\\" in value:
        raise InvalidInputError(
            f"{name} must not contain '/' or '\\' (it names a directory on the server): "
            f"{_show(value)}"
        )
    tokens = _check_tokens(name, value)
    if "*" in tokens or ">" in tokens:
        raise InvalidInputError(
            f"{name} must not have a token that is exactly '*' or '>' (it is a token of the "
            f"server's NATS subjects): {_show(value)}"
        )
    return value


def stream_subject(value: object, name: str = "subject", *, partitions: int = 1) -> str:
    """A NATS subject a stream can listen on (wildcards allowed where NATS allows them).

    Rules: 1 to 1024 bytes of UTF-8; no whitespace or control characters; no empty token;
    '>' only as the whole last token, and not with more than one partition (partition N
    listens on ``<subject>.N``, after the '>').
    """
    value = _subject(name, value)
    tokens = value.split(".")
    if ">" in tokens[:-1]:
        raise InvalidInputError(
            f"{name}: '>' may only be the last token of a subject: {_show(value)}"
        )
    if tokens[-1] == ">" and partitions > 1:
        raise InvalidInputError(
            f"{name}: a subject ending in '>' takes a single partition (partition N listens "
            f"on '<subject>.N'), got {partitions} partitions: {_show(value)}"
        )
    return value


def publish_subject(value: object, name: str = "subject") -> str:
    """A literal NATS subject to publish on: a stream subject without wildcard tokens."""
    value = _subject(name, value)
    tokens = value.split(".")
    if "*" in tokens or ">" in tokens:
        raise InvalidInputError(
            f"{name}: a subject to publish on has no wildcard token ('*' or '>'): {_show(value)}"
        )
    return value


def _subject(name: str, value: object) -> str:
    value = text(name, value)
    _check_chars(name, value)
    if _utf8_len(value) > MAX_SUBJECT_BYTES:
        raise InvalidInputError(
            f"{name} must be at most {MAX_SUBJECT_BYTES} bytes of UTF-8, "
            f"got {_utf8_len(value)} bytes"
        )
    _check_tokens(name, value)
    return value


def group_name(value: object, name: str = "group") -> str:
    """A NATS queue group name (the stream's ``group``): no whitespace or control chars."""
    value = text(name, value)
    _check_chars(name, value)
    if _utf8_len(value) > MAX_NAME_BYTES:
        raise InvalidInputError(
            f"{name} must be at most {MAX_NAME_BYTES} bytes of UTF-8, got {_utf8_len(value)}"
        )
    return value


# ---------------------------------------------------------------- addresses


def broker_address(value: object, name: str = "broker address") -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` for IPv6) with a port in 1..65535: (host, port)."""
    value = text(name, value)
    host, sep, port = value.rpartition(":")
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if (
        not sep
        or not bare
        or not port.isascii()
        or not port.isdigit()
        or not 0 < int(port) < 65536
        or _bad_char(host) is not None
        or ("[" in host and bare == host)
        or (":" in bare and bare == host)  # IPv6 needs brackets
    ):
        raise InvalidInputError(
            f"{name} must be host:port with a port in 1..65535, got {_show(value)}"
        )
    return bare, int(port)


_NATS_SCHEMES: Final = frozenset({"nats", "tls", "ws", "wss"})


def redact_url(url: str) -> str:
    """``url`` fit for an error, a log line or a repr: its userinfo's password, or a lone
    userinfo (a token), as ``***``: ``nats://app:***@h:4222``, ``nats://***@h:4222``.

    Cuts at the last '@' after the scheme, not at urlsplit's netloc: a secret holding '/',
    '?' or '#' would end urlsplit's netloc early and leave part of it shown.
    """
    start = url.find("://")
    start = 0 if start < 0 else start + 3
    at = url.rfind("@", start)
    if at < 0:
        return url
    user, colon, _ = url[start:at].partition(":")
    return f"{url[:start]}{f'{user}:***' if colon else '***'}{url[at:]}"


def _show_url(value: object) -> str:
    return _show(redact_url(value) if isinstance(value, str) else value)


def nats_server_url(value: object, name: str = "NATS server URL") -> str:
    """A NATS server URL (``nats://host:port``, ``tls://``, ``ws://``, ``wss://``, or a bare
    ``host:port``) with a host and, if given, a port in 1..65535. Errors show the URL
    without its credentials (`redact_url`)."""
    value = text(name, value, show=_show_url)
    try:
        parts = urllib.parse.urlsplit(value if "://" in value else f"nats://{value}")
        port = parts.port
    except ValueError:
        parts, port = None, None
    if (
        parts is None
        or parts.scheme not in _NATS_SCHEMES
        or not parts.hostname
        or port == 0
        or parts.netloc.endswith(":")  # an empty port: urlsplit says None, as for no port
        or _bad_char(value) is not None
    ):
        raise InvalidInputError(
            f"{name} must be like nats://host:port (schemes nats, tls, ws, wss; port in "
            f"1..65535), got {_show_url(value)}"
        )
    return value


# ---- Duration fields -------------------------------------------------------------------


class Seconds:
    """A required duration field (> 0, or >= 0 with ``allow_zero``)."""

    def __init__(self, default: float, *, allow_zero: bool = False) -> None:
        self._default = default
        self._allow_zero = allow_zero
        self._name = ""
        self._key = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name
        self._key = f"_seconds_{name}"

    @overload
    def __get__(self, obj: None, objtype: type | None = None) -> float: ...
    @overload
    def __get__(self, obj: object, objtype: type | None = None) -> float: ...
    def __get__(self, obj: object, objtype: type | None = None) -> Any:
        if obj is None:
            return self._default  # the dataclass reads the default from the class
        return obj.__dict__[self._key]

    def __set__(self, obj: object, value: float | datetime.timedelta) -> None:
        obj.__dict__[self._key] = seconds(self._name, value, allow_zero=self._allow_zero)


class OptionalSeconds:
    """A duration field where None means "not set" (or "disabled", as the field says)."""

    def __init__(self, default: float | None, *, allow_zero: bool = False) -> None:
        self._default = default
        self._allow_zero = allow_zero
        self._name = ""
        self._key = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name
        self._key = f"_seconds_{name}"

    @overload
    def __get__(self, obj: None, objtype: type | None = None) -> float | None: ...
    @overload
    def __get__(self, obj: object, objtype: type | None = None) -> float | None: ...
    def __get__(self, obj: object, objtype: type | None = None) -> Any:
        if obj is None:
            return self._default
        return obj.__dict__[self._key]

    def __set__(self, obj: object, value: float | datetime.timedelta | None) -> None:
        obj.__dict__[self._key] = (
            None if value is None else seconds(self._name, value, allow_zero=self._allow_zero)
        )
