"""gRPC streaming calls over HTTP/2 with asyncio and the ``h2`` library.

grpc.aio pays two event-loop iterations and a cross-thread completion for every
streamed message; this transport parses every complete gRPC message of a received
chunk in one pass on the event loop's own thread. It serves the two streaming RPCs
(Subscribe, PublishAsync); unary RPCs stay on grpc.aio.

Layers, from the bytes up: `framing` (sans-IO length-prefixed messages),
`status` (trailers, RST_STREAM, GOAWAY and connection loss -> gRPC statuses),
`connection` (an asyncio Protocol driving one ``h2`` connection, shared by the
streams to one broker), `calls` (one gRPC call on a stream), `pool` (one
connection per broker, TLS).
"""

from liftbridge_client._transport.h2.calls import BidiStreamCall, ServerStreamCall
from liftbridge_client._transport.h2.pool import H2Pool
from liftbridge_client._transport.h2.status import H2RpcError

__all__ = ["BidiStreamCall", "H2Pool", "H2RpcError", "ServerStreamCall"]
