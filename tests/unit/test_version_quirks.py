"""Answers that differ by server version or timing, mapped to the same typed errors."""

from __future__ import annotations

import asyncio

import grpc
import grpc.aio
import pytest

from liftbridge_client import errors
from liftbridge_client._proto import api_pb2


async def test_a_subject_publish_the_server_resets_at_its_deadline_is_an_ack_timeout() -> None:
    """Seen on master under load: RST_STREAM CANCEL instead of DEADLINE_EXCEEDED."""
    from liftbridge_client._publish.grpc import publish_to_subject

    class Stub:
        def __init__(self, wait: float) -> None:
            self.wait = wait

        async def PublishToSubject(self, req: object, timeout: float) -> object:
            await asyncio.sleep(self.wait)
            raise grpc.aio.AioRpcError(
                grpc.StatusCode.CANCELLED,
                grpc.aio.Metadata(),
                grpc.aio.Metadata(),
                details="Stream removed (RST_STREAM (Received RST_STREAM with error code 8))",
            )

    req = api_pb2.PublishToSubjectRequest(subject="x", value=b"v")
    with pytest.raises(errors.AckTimeoutError):
        await publish_to_subject(Stub(0.2), req, 0.2)  # type: ignore[arg-type]
    with pytest.raises(errors.RequestCancelledError):  # early: not the deadline
        await publish_to_subject(Stub(0.0), req, 5.0)  # type: ignore[arg-type]
