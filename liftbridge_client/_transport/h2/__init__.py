"""gRPC streaming calls over HTTP/2 with asyncio and the ``h2`` library.

grpc.aio pays two event-loop iterations and a cross-thread completion for every
streamed message; this transport parses every complete gRPC message of a received
chunk in one pass on the event loop's own thread. It serves the two streaming RPCs
(Subscribe, PublishAsync); unary RPCs stay on grpc.aio.

Three layers: `framing` (sans-IO: trailers, RST_STREAM, GOAWAY and connection loss
-> gRPC statuses, and length-prefixed messages), `connection` (an asyncio Protocol
driving one ``h2`` connection, shared by the streams to one broker) and `calls` (one
gRPC call on a stream; the TCP options of a connection; one connection per broker, TLS).
"""

from liftbridge_client._transport.h2.calls import BidiStreamCall, H2Pool, ServerStreamCall
from liftbridge_client._transport.h2.framing import H2RpcError

__all__ = ["BidiStreamCall", "H2Pool", "H2RpcError", "ServerStreamCall"]
