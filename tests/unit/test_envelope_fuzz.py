"""A bounded, deterministic fuzz run of the envelope decoders.

200,000 inputs from a seeded generator: mutations of valid envelopes (bit flips, byte
overwrites, truncations, extensions, header rewrites, splices) and plain random bytes. The
decoders may only return or raise their typed errors. The run also counts outcomes, so a
generator that stopped reaching the later checks would fail instead of passing vacuously.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable

import pytest

from liftbridge_client import envelope
from liftbridge_client._proto import api_pb2
from liftbridge_client.envelope import MsgType, decode, decode_ack, decode_message
from liftbridge_client.errors import (
    BadHeaderLengthError,
    BadMagicError,
    CrcMismatchError,
    EnvelopeError,
    EnvelopeTooShortError,
    PayloadDecodeError,
    ProtocolError,
    UnexpectedMessageTypeError,
    UnknownMessageTypeError,
    UnsupportedVersionError,
)

SEED = 0x11F7B21D
ITERATIONS = 200_000


def seed_envelopes(rng: random.Random) -> list[bytes]:
    """Valid envelopes of every type, plain and with CRC, plus real Publishes and Acks."""
    seeds = [
        envelope.encode(msg_type, rng.randbytes(size), crc=crc)
        for msg_type in MsgType
        for crc in (False, True)
        for size in (0, 1, 5, 40)
    ]
    for crc in (False, True):
        seeds.append(
            envelope.encode_message(
                b"value",
                key=b"key",
                headers={"h": b"v", "other": b""},
                ack_inbox="_INBOX.x",
                correlation_id="c",
                ack_policy=api_pb2.ALL,
                crc=crc,
            )
        )
        seeds.append(envelope.encode_message(b"", crc=crc))
        seeds.append(
            envelope.encode_ack(
                api_pb2.Ack(stream="s", msgSubject="s.1", offset=9, commitTimestamp=1),
                crc=crc,
            )
        )
    return seeds


def mutators(rng: random.Random, seeds: list[bytes]) -> list[Callable[[bytes], bytes]]:
    def flip_bits(data: bytes) -> bytes:
        out = bytearray(data)
        for _ in range(rng.randint(1, 3)):
            if out:
                i = rng.randrange(len(out))
                out[i] ^= 1 << rng.randrange(8)
        return bytes(out)

    def set_byte(data: bytes) -> bytes:
        out = bytearray(data)
        if out:
            out[rng.randrange(len(out))] = rng.randrange(256)
        return bytes(out)

    def set_header_byte(data: bytes) -> bytes:
        # Header bytes are where the checks are: hit them far more often than chance would.
        if not data:
            return data
        out = bytearray(data)
        i = rng.randrange(min(12, len(out)))
        out[i] = rng.choice((0, 1, 7, 8, 11, 12, 13, 14, 15, 255, rng.randrange(256)))
        return bytes(out)

    def truncate(data: bytes) -> bytes:
        return data[: rng.randrange(len(data) + 1)]

    def extend(data: bytes) -> bytes:
        return data + rng.randbytes(rng.randint(1, 16))

    def splice(data: bytes) -> bytes:
        other = rng.choice(seeds)
        return data[: rng.randrange(len(data) + 1)] + other[rng.randrange(len(other) + 1) :]

    def random_header(data: bytes) -> bytes:
        header_len = rng.choice((8, 12, rng.randrange(256)))
        flags = rng.choice((0, 1, rng.randrange(256)))
        return envelope.MAGIC + bytes((0, header_len, flags, rng.randrange(20))) + data[8:]

    def random_bytes(_: bytes) -> bytes:
        return rng.randbytes(rng.randrange(24))

    return [
        flip_bits,
        set_byte,
        set_header_byte,
        truncate,
        extend,
        splice,
        random_header,
        random_bytes,
    ]


@pytest.mark.timeout(60)
def test_fuzz_decoders_raise_only_typed_errors() -> None:
    rng = random.Random(SEED)
    seeds = seed_envelopes(rng)
    mutate = mutators(rng, seeds)
    outcomes: Counter[str] = Counter()
    for _ in range(ITERATIONS):
        data = rng.choice(seeds)
        for _ in range(rng.randint(1, 3)):
            data = rng.choice(mutate)(data)
        expected = rng.choice((None, MsgType.PUBLISH, MsgType.ACK))
        try:
            env = decode(data, expected)
        except EnvelopeError as exc:
            outcomes[type(exc).__name__] += 1
            continue
        except Exception as exc:
            pytest.fail(f"decode({data!r}, {expected}) raised {exc!r}")
        outcomes["decoded"] += 1
        assert env.payload == data[data[5] :]
        if env.msg_type in (MsgType.PUBLISH, MsgType.ACK):
            parse = decode_message if env.msg_type is MsgType.PUBLISH else decode_ack
            try:
                parse(data)
            except ProtocolError as exc:
                outcomes[type(exc).__name__] += 1
            except Exception as exc:
                pytest.fail(f"{parse.__name__}({data!r}) raised {exc!r}")
            else:
                outcomes[f"parsed {env.msg_type.name}"] += 1

    for error in (
        EnvelopeTooShortError,
        BadMagicError,
        UnsupportedVersionError,
        BadHeaderLengthError,
        CrcMismatchError,
        UnknownMessageTypeError,
        UnexpectedMessageTypeError,
        PayloadDecodeError,
    ):
        assert outcomes[error.__name__] >= 100, (error.__name__, outcomes)
    for ok in ("decoded", "parsed PUBLISH", "parsed ACK"):
        assert outcomes[ok] >= 100, (ok, outcomes)
