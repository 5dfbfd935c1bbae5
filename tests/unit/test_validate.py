"""`_validate`: every rule, as a table and as properties, and where the public API applies it.

Every bad value raises `InvalidInputError` (a `LiftbridgeError`) naming the parameter; no
TypeError, ValueError, OverflowError or UnicodeEncodeError gets through.
"""

from __future__ import annotations

import dataclasses
import datetime
import math
from typing import Any, cast

import pytest
from hypothesis import given
from hypothesis import strategies as st

from liftbridge_client import Client, _validate, errors
from liftbridge_client._cluster import admin as _admin
from liftbridge_client._cluster.metadata import MetadataCache
from liftbridge_client._subscribe import SubscribeSpec
from liftbridge_client.groups import ConsumerOptions
from liftbridge_client.options import ClientOptions, RetryPolicy, StreamConfig

INF = math.inf
NAN = math.nan
UTC = datetime.UTC


def refused(fn: Any, *args: Any, name: str, **kw: Any) -> errors.InvalidInputError:
    with pytest.raises(errors.InvalidInputError) as info:
        fn(*args, **kw)
    assert name in str(info.value), f"{info.value} does not name {name!r}"
    assert isinstance(info.value, errors.LiftbridgeError)
    return info.value


# ---------------------------------------------------------------- numbers


@pytest.mark.parametrize(
    "bad", [True, False, 1.5, 1.0, "2", b"2", None, [1], 2**31, -1, math.nan, INF]
)
def test_int_arg_refuses_non_ints_and_out_of_range(bad: object) -> None:
    refused(_validate.int_arg, "partitions", bad, 0, _validate.INT32_MAX, name="partitions")


@given(st.integers(min_value=-(2**70), max_value=2**70))
def test_int_arg_accepts_exactly_the_range(value: int) -> None:
    lo, hi = -1, _validate.INT32_MAX
    if lo <= value <= hi:
        assert _validate.int_arg("x", value, lo, hi) == value
    else:
        refused(_validate.int_arg, "x", value, lo, hi, name="x")


@pytest.mark.parametrize(
    "bad",
    [0, -1, -0.001, NAN, INF, -INF, 1e300, 2**1100, 1e9 + 1, True, "1", None, b"1", [1]],
)
def test_seconds_refuses(bad: object) -> None:
    refused(_validate.seconds, "ack_wait", bad, name="ack_wait")


@pytest.mark.parametrize(
    ("good", "expected"),
    [
        (1, 1.0),
        (0.25, 0.25),
        (datetime.timedelta(milliseconds=1500), 1.5),
        (datetime.timedelta(days=2), 172800.0),
        (1e9, 1e9),
    ],
)
def test_seconds_accepts_numbers_and_timedeltas(good: object, expected: float) -> None:
    assert _validate.seconds("t", good) == expected


def test_seconds_zero_only_when_allowed() -> None:
    assert _validate.seconds("t", 0, allow_zero=True) == 0.0
    assert _validate.seconds("t", datetime.timedelta(0), allow_zero=True) == 0.0
    refused(_validate.seconds, "t", datetime.timedelta(0), name="t")
    refused(_validate.seconds, "t", datetime.timedelta(seconds=-1), allow_zero=True, name="t")


@given(st.floats(allow_nan=True, allow_infinity=True) | st.integers())
def test_seconds_property(value: float) -> None:
    ok = not math.isnan(value) and 0 < value <= _validate.MAX_SECONDS
    if ok:
        assert _validate.seconds("t", value) == float(value)
    else:
        refused(_validate.seconds, "t", value, name="t")


def test_timestamp_ns_accepts_ints_and_datetimes() -> None:
    assert _validate.timestamp_ns("t", 5) == 5
    aware = datetime.datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)
    assert _validate.timestamp_ns("t", aware) == 1704164645_123456000
    naive = datetime.datetime(2024, 1, 2, 3, 4, 5)
    assert _validate.timestamp_ns("t", naive) == round(naive.timestamp() * 1e9)


@pytest.mark.parametrize(
    "bad",
    [-1, 2**63, 1.5, True, "1", datetime.datetime(1960, 1, 1, tzinfo=UTC), datetime.date.today()],
)
def test_timestamp_ns_refuses(bad: object) -> None:
    refused(_validate.timestamp_ns, "start_time", bad, name="start_time")


def test_flag() -> None:
    assert _validate.flag("f", True) is True
    for bad in (1, 0, "true", None):
        refused(_validate.flag, "resume", bad, name="resume")


# ---------------------------------------------------------------- strings


@pytest.mark.parametrize("bad", ["", "\ud800", "a\udfffb", 5, None, b"x", ["x"]])
def test_text_refuses(bad: object) -> None:
    refused(_validate.text, "correlation_id", bad, name="correlation_id")


@given(st.text())
def test_text_never_lets_an_encode_error_through(value: str) -> None:
    try:
        out = _validate.text("v", value)
    except errors.InvalidInputError:
        assert not value or any(0xD800 <= ord(c) <= 0xDFFF for c in value)
    else:
        assert out.encode("utf-8").decode("utf-8") == value


# (value, fragment of the rule in the message)
BAD_STREAM_NAMES = [
    ("", "non-empty"),
    ("a b", "whitespace"),
    ("a\tb", "whitespace"),
    ("a\nb", "whitespace"),
    ("a\x00b", "control"),
    ("a\x7fb", "control"),
    ("a\u00a0b", "whitespace"),
    ("..", "'..'"),
    ("../x", "'/'"),
    ("a/b", "'/'"),
    ("a\\b", "'\\'"),
    (".a", "start or end"),
    ("a.", "start or end"),
    ("a..b", "'..'"),
    ("x" * 256, "255 bytes"),
    ("é" * 128, "255 bytes"),
    ("*", "'*' or '>'"),
    ("a.>", "'*' or '>'"),
    ("a.*.b", "'*' or '>'"),
    ("\ud800", "UTF-8"),
    (5, "string"),
]


@pytest.mark.parametrize(("bad", "rule"), BAD_STREAM_NAMES)
def test_stream_name_rules(bad: object, rule: str) -> None:
    err = refused(_validate.stream_name, bad, name="name")
    assert rule in str(err)


@pytest.mark.parametrize(
    "good", ["orders", "a.b.c", "a-b_c:d", "a*b", "x" * 255, "é" * 127, "日本", "a>b"]
)
def test_stream_name_accepts(good: str) -> None:
    assert _validate.stream_name(good) == good


BAD_SUBJECTS = [
    ("", "non-empty"),
    ("a b", "whitespace"),
    ("a\x00", "control"),
    ("a..b", "'..'"),
    (".a", "start or end"),
    ("a.", "start or end"),
    ("a.>.b", "'>' may only be the last token"),
    (">.a", "'>' may only be the last token"),
    ("x" * 1025, "1024 bytes"),
    ("\ud800", "UTF-8"),
]


@pytest.mark.parametrize(("bad", "rule"), BAD_SUBJECTS)
def test_stream_subject_rules(bad: object, rule: str) -> None:
    err = refused(_validate.stream_subject, bad, name="subject")
    assert rule in str(err)


def test_stream_subject_wildcards() -> None:
    assert _validate.stream_subject("a.*.c") == "a.*.c"
    assert _validate.stream_subject("a.>") == "a.>"
    assert _validate.stream_subject(">") == ">"
    err = refused(_validate.stream_subject, "a.>", partitions=2, name="subject")
    assert "single partition" in str(err)


@pytest.mark.parametrize("bad", ["a.*", "*", "a.>", ">", "a b", "a..b", "\ud800"])
def test_publish_subject_refuses_wildcards_and_bad_subjects(bad: str) -> None:
    refused(_validate.publish_subject, bad, name="subject")


@given(st.text(min_size=1, max_size=40))
def test_accepted_names_are_safe_for_the_server(value: str) -> None:
    """What stream_name accepts is a valid directory name and a valid NATS token run."""
    try:
        name = _validate.stream_name(value)
    except errors.InvalidInputError:
        return
    raw = name.encode("utf-8")
    assert 0 < len(raw) <= 255
    assert b"/" not in raw
    assert b"\x00" not in raw
    assert name not in {".", ".."}
    for token in name.split("."):
        assert token
        assert token not in {"*", ">"}
        assert not any(c in token for c in " \t\r\n\f")


@pytest.mark.parametrize(
    ("bad", "rule"),
    [
        ("localhost", "host:port"),
        ("127.0.0.1:99999", "1..65535"),
        ("127.0.0.1:0", "1..65535"),
        (":9292", "host:port"),
        ("host:", "host:port"),
        ("host:９２", "host:port"),  # noqa: RUF001 - full-width digits pass str.isdigit
        ("::1:9292", "host:port"),
        ("[::1:9292", "host:port"),
        ("a b:9292", "host:port"),
        (9292, "string"),
    ],
)
def test_broker_address_rules(bad: object, rule: str) -> None:
    err = refused(_validate.broker_address, bad, name="broker address")
    assert rule in str(err)


def test_broker_address_accepts() -> None:
    assert _validate.broker_address("127.0.0.1:9292") == ("127.0.0.1", 9292)
    assert _validate.broker_address("[::1]:9292") == ("::1", 9292)
    assert _validate.broker_address("broker-1.example:1") == ("broker-1.example", 1)


# ---------------------------------------------------------------- the public API


@pytest.mark.parametrize(
    ("field", "bad"),
    [
        ("rpc_timeout", INF),
        ("ack_wait", INF),
        ("ack_wait", 1e300),
        ("connect_timeout", NAN),
        ("drain_timeout", -1),
        ("close_timeout", "1"),
        ("keepalive_time", 0),
        ("metadata_refresh_interval", True),
        ("max_inflight", True),
        ("max_inflight", 1.0),
        ("max_inflight", 2**31),
        ("envelope_crc", 1),
        ("retry", 3),
        ("address_overrides", {"localhost": "127.0.0.1:1"}),
        ("address_overrides", {"a:1": "b:99999"}),
    ],
)
def test_client_options_refuse(field: str, bad: object) -> None:
    refused(ClientOptions, name=field, **{field: bad})


def test_client_options_take_timedeltas_and_read_back_floats() -> None:
    opts = ClientOptions(
        ack_wait=datetime.timedelta(milliseconds=250),
        rpc_timeout=datetime.timedelta(seconds=3),
        keepalive_time=None,
        metadata_refresh_interval=datetime.timedelta(minutes=1),
    )
    assert opts.ack_wait == 0.25
    assert type(opts.ack_wait) is float
    assert opts.rpc_timeout == 3.0
    assert opts.keepalive_time is None
    assert opts.metadata_refresh_interval == 60.0
    again = dataclasses.replace(opts, max_inflight=5)
    assert (again.ack_wait, again.keepalive_time, again.max_inflight) == (0.25, None, 5)
    assert "ack_wait=0.25" in repr(opts)


@pytest.mark.parametrize(
    ("field", "bad"),
    [
        ("attempts", 0),
        ("attempts", True),
        ("attempts", 1.5),
        ("initial_backoff", -1),
        ("max_backoff", INF),
        ("multiplier", NAN),
        ("multiplier", 0.5),
    ],
)
def test_retry_policy_refuses(field: str, bad: object) -> None:
    refused(RetryPolicy, name=field, **{field: bad})


@pytest.mark.parametrize(
    ("field", "bad"),
    [
        ("partitions", 1.5),
        ("partitions", "2"),
        ("partitions", True),
        ("partitions", 0),
        ("partitions", -1),
        ("partitions", 2**31),
        ("replication_factor", 0),
        ("replication_factor", -2),
        ("replication_factor", 3.0),
        ("retention_max_age", 1e300),
        ("retention_max_age", INF),
        ("retention_max_age", NAN),
        ("retention_max_age", -1),
        ("segment_max_age", "1"),
        ("retention_max_bytes", 2**63),
        ("retention_max_messages", -1),
        ("segment_max_bytes", 1.0),
        ("min_isr", 0),
        ("compact_max_goroutines", True),
        ("compact_enabled", 1),
        ("encryption", "yes"),
        ("group", "a b"),
        ("group", "\ud800"),
    ],
)
def test_stream_config_refuses(field: str, bad: object) -> None:
    refused(StreamConfig, name=field, **{field: bad})


def test_stream_config_durations_take_timedeltas() -> None:
    cfg = StreamConfig(
        retention_max_age=datetime.timedelta(hours=1), auto_pause_time=0, partitions=2
    )
    req = cfg.to_request("s", "n")
    assert req.retentionMaxAge.value == 3_600_000
    assert req.autoPauseTime.value == 0
    assert not req.HasField("segmentMaxAge")


@pytest.mark.parametrize(
    ("brokers", "name"),
    [
        (["localhost"], "localhost"),
        (["127.0.0.1:99999"], "127.0.0.1:99999"),
        (["127.0.0.1:9292", "nope"], "nope"),
        ([], "at least one"),
        ("localhost", "localhost"),
        (5, "brokers"),
        ([5], "5"),
    ],
)
def test_client_refuses_bad_broker_addresses_at_construction(brokers: Any, name: str) -> None:
    refused(Client, brokers, name=name)


def test_client_checks_where_an_override_leads() -> None:
    opts = ClientOptions(address_overrides={"a:1": "127.0.0.1:2"})
    Client(["a:1"], options=opts)  # fine: the override is checked by ClientOptions
    refused(Client, ["127.0.0.1:1"], nats_servers=[5], name="nats_servers")


# Calls that fail validation before touching the metadata cache (None stands in for it).
NO_METADATA = cast(MetadataCache, None)


@pytest.mark.parametrize(
    ("subject", "name", "settings", "param"),
    [
        ("s", "a b", {}, "name"),
        ("s", "..", {}, "name"),
        ("s", "../x", {}, "name"),
        ("s", "a\x00", {}, "name"),
        ("s", "x" * 300, {}, "name"),
        ("a b", "n", {}, "subject"),
        ("a.>.b", "n", {}, "subject"),
        ("a..b", "n", {}, "subject"),
        ("a.>", "n", {"partitions": 3}, "subject"),
        ("s", "n", {"partitions": 1.5}, "partitions"),
        ("s", "n", {"partitions": "2"}, "partitions"),
        ("s", "n", {"partitions": True}, "partitions"),
        ("s", "n", {"retention_max_age": 1e300}, "retention_max_age"),
        ("s", "n", {"replication_factor": 1.0}, "replication_factor"),
    ],
)
async def test_create_stream_refuses_before_sending(
    subject: str, name: str, settings: dict[str, Any], param: str
) -> None:
    async def create() -> None:
        config = StreamConfig(**settings)  # bad settings are refused here
        await _admin.create_stream(NO_METADATA, ClientOptions(), subject, name, config)

    with pytest.raises(errors.InvalidInputError) as info:
        await create()
    assert param in str(info.value)


@pytest.mark.parametrize(
    ("stream", "partition", "param"),
    [
        ("s", 2**40, "partition"),
        ("s", -1, "partition"),
        ("s", 1.0, "partition"),
        ("\ud800", 0, "stream"),
    ],
)
async def test_fetch_partition_metadata_refuses(stream: Any, partition: Any, param: str) -> None:
    with pytest.raises(errors.InvalidInputError, match=param):
        await _admin.fetch_partition_metadata(NO_METADATA, ClientOptions(), stream, partition)


@pytest.mark.parametrize("partitions", [[2**40], [-1], [True], "01", 5])
async def test_pause_refuses_bad_partition_lists(partitions: Any) -> None:
    with pytest.raises(errors.InvalidInputError, match="partitions"):
        await _admin.pause_stream(NO_METADATA, ClientOptions(), "s", partitions, False)


def spec(**kw: Any) -> SubscribeSpec:
    return SubscribeSpec.build("s", 0, kw, now_ns=10**18)


def test_subscribe_times_as_datetimes_and_timedeltas() -> None:
    start = datetime.datetime(2024, 1, 1, tzinfo=UTC)
    stop = start + datetime.timedelta(hours=1)
    s = spec(start_time=start, stop_time=stop)
    assert s.start_timestamp_ns == 1704067200 * 10**9
    assert s.stop_timestamp_ns == s.start_timestamp_ns + 3600 * 10**9
    assert spec(start_time_delta=datetime.timedelta(seconds=2)).start_timestamp_ns == (
        10**18 - 2 * 10**9
    )
    refused(spec, start_time_delta=INF, name="start_time_delta")
    refused(spec, start_time="2024-01-01", name="start_time")
    refused(spec, start_time=start, start_timestamp_ns=1, name="conflicting")
    refused(spec, start_time=stop, stop_time=start, name="before the start")


@pytest.mark.parametrize("streams", [("\ud800",), ("ok", ""), ("ok", 5)])
async def test_fetch_metadata_refuses_bad_stream_names(streams: tuple[Any, ...]) -> None:
    with pytest.raises(errors.InvalidInputError, match="stream"):
        await _admin.fetch_metadata(NO_METADATA, streams)


@pytest.mark.parametrize(
    "bad",
    ["", "http://h:4222", "nats://:4222", "nats://h:99999", "nats://h:0", "a b:1", 5, "nats://h:"],
)
def test_nats_server_url_refuses(bad: object) -> None:
    refused(_validate.nats_server_url, bad, name="NATS server URL")


SECRET = "hunter2-SECRET"


@pytest.mark.parametrize(
    ("bad", "shown"),
    [
        (f"nat://app:{SECRET}@h:4222", "nat://app:***@h:4222"),  # a scheme typo
        (f"nats://app:{SECRET}@h:", "nats://app:***@h:"),  # an empty port
        (f"nats://app:{SECRET}@h:99999", "nats://app:***@h:99999"),
        (f"nats://{SECRET}@h:99999", "nats://***@h:99999"),  # a token as the userinfo
        (f"nats://app:{SECRET}/x@h:4222", "nats://app:***@h:4222"),  # '/' in the password
        (f"app:{SECRET}@h:0", "app:***@h:0"),  # no scheme
        (f"nats://app:{SECRET}\udc80@h:4222", "nats://app:***@h:4222"),  # not UTF-8
    ],
)
def test_nats_server_url_errors_hide_credentials(bad: str, shown: str) -> None:
    for fn in (_validate.nats_server_url, lambda v: Client(["127.0.0.1:1"], nats_servers=[v])):
        exc = refused(fn, bad, name="")
        assert SECRET not in str(exc)
        assert SECRET not in repr(exc)
        assert shown in str(exc)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("nats://h:4222", "nats://h:4222"),
        ("h:4222", "h:4222"),
        ("nats://u:p@h:4222", "nats://u:***@h:4222"),
        ("tls://tok@h", "tls://***@h"),
        ("nats://u:p@q@h:1", "nats://u:***@h:1"),  # the last '@' ends the userinfo
    ],
)
def test_redact_url(url: str, shown: str) -> None:
    assert _validate.redact_url(url) == shown


@pytest.mark.parametrize(
    "good", ["nats://127.0.0.1:4222", "tls://h:1", "127.0.0.1:4222", "nats://u:p@h:4222", "h"]
)
def test_nats_server_url_accepts(good: str) -> None:
    assert _validate.nats_server_url(good) == good


# Ports of the servers' own checks (nats-server's isValidSubject with its rune checks,
# isValidLiteralSubject, and Liftbridge v1.9.0's CreateStream isValidSubject), to check the
# client's rules against: anything the client accepts must pass them.
def nats_valid_subject(subject: str) -> bool:
    if not subject or "\x00" in subject:
        return False
    after_fwc = False
    for token in subject.split("."):
        if not token or after_fwc:
            return False
        if len(token) > 1:
            if any(c in token for c in "\t\n\f\r "):
                return False
            continue
        if token == ">":
            after_fwc = True
        elif token in " \t\n\r\f":
            return False
    return True


def nats_valid_literal(subject: str) -> bool:
    return nats_valid_subject(subject) and not {"*", ">"} & set(subject.split("."))


def liftbridge_valid_subject(subject: str) -> bool:
    return bool(subject) and not any(c in subject for c in " \t\r\n") and all(subject.split("."))


_SUBJECTISH = st.text(st.sampled_from("ab.*> \t\x00é/") | st.characters(), max_size=12)


@given(_SUBJECTISH, st.integers(min_value=1, max_value=3))
def test_accepted_subjects_pass_the_servers_checks(raw: str, partitions: int) -> None:
    try:
        subject = _validate.stream_subject(raw, partitions=partitions)
    except errors.InvalidInputError:
        return
    assert liftbridge_valid_subject(subject)
    assert nats_valid_subject(subject)  # partition 0 subscribes to it
    for n in range(1, partitions):
        assert nats_valid_subject(f"{subject}.{n}")


@given(_SUBJECTISH)
def test_accepted_publish_subjects_are_nats_literals(raw: str) -> None:
    try:
        subject = _validate.publish_subject(raw)
    except errors.InvalidInputError:
        return
    assert nats_valid_literal(subject)


@given(_SUBJECTISH)
def test_accepted_names_make_valid_internal_subjects(raw: str) -> None:
    try:
        name = _validate.stream_name(raw)
    except errors.InvalidInputError:
        return
    for suffix in ("replicate", "offset"):
        assert nats_valid_literal(f"lbtest-ns.{name}.0.{suffix}")


@pytest.mark.parametrize(
    ("field", "bad"),
    [
        ("commit_interval", INF),
        ("commit_interval", 0),
        ("fetch_interval", NAN),
        ("max_buffered", True),
        ("consumer_id", "\ud800"),
        ("cursor_id", "a,b"),
        ("commit_on_close", 1),
    ],
)
def test_consumer_options_refuse(field: str, bad: object) -> None:
    refused(ConsumerOptions, name=field, **{field: bad})


def test_consumer_options_take_timedeltas() -> None:
    opts = ConsumerOptions(commit_interval=datetime.timedelta(seconds=2), fetch_interval=None)
    assert (opts.commit_interval, opts.fetch_interval) == (2.0, None)
