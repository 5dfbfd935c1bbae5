"""`_transport.h2.calls.detect_dead_peer`: the kernel options that end a connection whose
broker stopped answering (what tells a receive-only subscription its broker was cut off)."""

from __future__ import annotations

import socket
import sys

import pytest

from liftbridge_client._transport.h2.calls import detect_dead_peer
from liftbridge_client.errors import InvalidInputError
from liftbridge_client.options import ClientOptions


@pytest.mark.skipif(sys.platform != "linux", reason="the Linux option names")
def test_the_options_land_on_a_real_socket() -> None:
    with socket.socket() as sock:
        assert detect_dead_peer(sock, 20.0)
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 10
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL) == 3
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT) == 3
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == 20_000


def test_none_or_no_socket_changes_nothing() -> None:
    with socket.socket() as sock:
        assert not detect_dead_peer(sock, None)
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 0
    assert not detect_dead_peer(None, 20.0)


def test_a_refusing_platform_is_not_an_error() -> None:
    class Refusing:
        def setsockopt(self, level: int, option: int, value: int, /) -> None:
            raise OSError(92, "Protocol not available")

    assert not detect_dead_peer(Refusing(), 20.0)


def test_the_option_defaults_to_20_seconds_and_validates() -> None:
    assert ClientOptions().dead_peer_timeout == 20.0
    assert ClientOptions(dead_peer_timeout=None).dead_peer_timeout is None
    with pytest.raises(InvalidInputError, match="dead_peer_timeout"):
        ClientOptions(dead_peer_timeout=-1.0)
