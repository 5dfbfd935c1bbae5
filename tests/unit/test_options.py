"""Option objects validate at construction and are immutable."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest

from liftbridge_client._proto import api_pb2
from liftbridge_client.errors import InvalidInputError
from liftbridge_client.options import (
    ClientOptions,
    NatsAuth,
    RetryPolicy,
    StreamConfig,
    StreamTransport,
    TLSConfig,
)


@pytest.mark.parametrize(
    "field",
    ["ack_wait", "rpc_timeout", "connect_timeout", "resubscribe_wait", "create_stream_timeout"],
)
@pytest.mark.parametrize("bad", [0, -1, math.nan, "5", True])
def test_client_options_reject_bad_durations(field: str, bad: object) -> None:
    with pytest.raises(InvalidInputError, match=field):
        ClientOptions(**{field: bad})  # type: ignore[arg-type]


def test_client_options_are_frozen() -> None:
    opts = ClientOptions()
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.ack_wait = 1.0  # type: ignore[misc]


@pytest.mark.parametrize("bad", [0, -5, 1.5])
def test_max_inflight_must_be_positive_int(bad: object) -> None:
    with pytest.raises(InvalidInputError, match="max_inflight"):
        ClientOptions(max_inflight=bad)  # type: ignore[arg-type]


def test_address_overrides_are_validated_and_read_only() -> None:
    source = {"10.0.0.5:9292": "127.0.0.1:19292"}
    opts = ClientOptions(address_overrides=source)
    source["x:1"] = "y:2"  # later changes to the caller's dict do not leak in
    assert opts.resolve("10.0.0.5:9292") == "127.0.0.1:19292"
    assert opts.resolve("127.0.0.1:1") == "127.0.0.1:1"
    assert "x:1" not in opts.address_overrides
    with pytest.raises(TypeError):
        opts.address_overrides["a:1"] = "b:2"  # type: ignore[index]
    for bad in ("nohost", "host:", ":9292", "host:99999", "host:abc"):
        with pytest.raises(InvalidInputError, match="host:port"):
            ClientOptions(address_overrides={bad: "127.0.0.1:1"})


def test_retry_policy_backoff_grows_and_caps() -> None:
    policy = RetryPolicy(attempts=6, initial_backoff=0.1, max_backoff=0.5, multiplier=2)
    assert [policy.backoff(n) for n in range(1, 6)] == pytest.approx([0.1, 0.2, 0.4, 0.5, 0.5])
    with pytest.raises(InvalidInputError):
        RetryPolicy(attempts=0)
    with pytest.raises(InvalidInputError):
        RetryPolicy(multiplier=0.5)


@pytest.mark.parametrize("multiplier", [2, 2.0, 1000, 1000.0])
def test_retry_policy_backoff_stays_at_the_cap_however_many_attempts(multiplier: float) -> None:
    # A float power overflows past 2.0 ** 1023 (an int one past what a float holds): a
    # publisher counts a broker's failed reconnects without bound, and attempts go to 1000.
    policy = RetryPolicy(
        attempts=1000, initial_backoff=0.05, max_backoff=2.0, multiplier=multiplier
    )
    assert policy.backoff(1) == pytest.approx(0.05)
    assert [policy.backoff(n) for n in (1000, 1025, 10**6)] == [2.0, 2.0, 2.0]


def test_secrets_stay_out_of_reprs(tmp_path: Path) -> None:
    auth = NatsAuth(user="alice", password="hunter2", token="t0k3n")
    assert "hunter2" not in repr(auth)
    assert "t0k3n" not in repr(auth)
    assert "alice" in repr(auth)
    key = tmp_path / "client.key"
    tls = TLSConfig(cert_file=tmp_path / "c.pem", key_file=key)
    assert str(key) not in repr(tls)
    assert "hunter2" not in repr(ClientOptions(nats_auth=auth))


@pytest.mark.parametrize("field", ["password", "token"])
@pytest.mark.parametrize("bad", ["hunter2-SECRET\udc80", 12345])
def test_bad_secrets_are_named_not_shown(field: str, bad: object) -> None:
    with pytest.raises(InvalidInputError, match=field) as info:
        NatsAuth(**{field: bad})  # type: ignore[arg-type]
    assert str(bad) not in str(info.value)
    assert str(bad) not in repr(info.value)
    assert "hunter2" not in str(info.value)


def test_keepalive_default_respects_the_servers_ping_policy() -> None:
    # grpc-go servers (Liftbridge) answer pings more frequent than 5 min with GOAWAY.
    keepalive = ClientOptions().keepalive_time
    assert keepalive is not None
    assert keepalive > 300


def test_partitioner_must_be_callable() -> None:
    with pytest.raises(InvalidInputError, match="partitioner"):
        ClientOptions(partitioner="key")  # type: ignore[arg-type]


def test_tls_needs_cert_and_key_together(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="cert_file and key_file"):
        TLSConfig(cert_file=tmp_path / "c.pem")


# ---------------------------------------------------------------- streams


def test_stream_config_sends_only_what_was_set() -> None:
    req = StreamConfig().to_request("subj", "name")
    assert req == api_pb2.CreateStreamRequest(subject="subj", name="name")
    # Unset wrappers stay absent, so the server's own defaults apply.
    for wrapper in ("compactEnabled", "retentionMaxAge", "minIsr", "encryption"):
        assert not req.HasField(wrapper)


def test_stream_config_sets_every_option_with_units() -> None:
    cfg = StreamConfig(
        group="g",
        replication_factor=-1,
        partitions=3,
        retention_max_bytes=1024,
        retention_max_messages=10,
        retention_max_age=3600.0,
        cleaner_interval=1.5,
        segment_max_bytes=2048,
        segment_max_age=60.0,
        compact_enabled=False,
        compact_max_goroutines=4,
        auto_pause_time=0.25,
        auto_pause_disable_if_subscribers=True,
        min_isr=2,
        optimistic_concurrency_control=True,
        encryption=False,
    )
    req = cfg.to_request("s", "n")
    assert (req.group, req.replicationFactor, req.partitions) == ("g", -1, 3)
    assert req.retentionMaxBytes.value == 1024
    assert req.retentionMaxMessages.value == 10
    assert req.retentionMaxAge.value == 3_600_000  # milliseconds on the wire
    assert req.cleanerInterval.value == 1500
    assert req.segmentMaxBytes.value == 2048
    assert req.segmentMaxAge.value == 60_000
    # False is sent explicitly: it differs from "not set".
    assert req.HasField("compactEnabled")
    assert req.compactEnabled.value is False
    assert req.compactMaxGoroutines.value == 4
    assert req.autoPauseTime.value == 250
    assert req.autoPauseDisableIfSubscribers.value is True
    assert req.minIsr.value == 2
    assert req.optimisticConcurrencyControl.value is True
    assert req.HasField("encryption")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("partitions", -1),  # crashes the server: must never be sent
        ("partitions", 0),
        ("partitions", 2**31),
        ("replication_factor", 0),
        ("replication_factor", -2),
        ("retention_max_bytes", -1),
        ("retention_max_age", -1.0),
        ("min_isr", 0),
        ("compact_max_goroutines", 0),
    ],
)
def test_stream_config_rejects_bad_values(field: str, value: object) -> None:
    with pytest.raises(InvalidInputError, match=field):
        StreamConfig(**{field: value})  # type: ignore[arg-type]


def test_stream_transport_is_an_enum_defaulting_to_h2() -> None:
    assert ClientOptions().stream_transport is StreamTransport.H2
    grpc = ClientOptions(stream_transport=StreamTransport.GRPC)
    assert grpc.stream_transport is StreamTransport.GRPC
    with pytest.raises(InvalidInputError, match=r"must be a StreamTransport, got 'http3'$"):
        ClientOptions(stream_transport="http3")  # type: ignore[arg-type]


@pytest.mark.parametrize(("text", "member"), [("h2", "H2"), ("grpc", "GRPC")])
def test_a_0_2_stream_transport_string_is_refused_naming_its_member(text: str, member: str) -> None:
    with pytest.raises(InvalidInputError) as exc:
        ClientOptions(stream_transport=text)  # type: ignore[arg-type]
    assert f"(use StreamTransport.{member})" in str(exc.value)
