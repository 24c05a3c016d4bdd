"""The network side: accept connections, read frames, dispatch, write responses in order.

Each connection is served by one task that handles one request at a time, as Kafka does
(it mutes a channel while a request is in flight), so responses leave in request order.
A frame that cannot be parsed, an unknown API key or an unsupported version (other than
ApiVersions) closes the connection, as Kafka does; other connections are unaffected.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

from oncelog.broker.dispatch import RequestContext, load_handlers
from oncelog.protocol import framing
from oncelog.protocol.messages import ResponseBuilder, decode_request, encode_response, is_flexible

if TYPE_CHECKING:
    from oncelog.broker.broker import Broker

log = logging.getLogger("oncelog.server")

_WRITE_HIGH_WATER = 4 << 20


class CloseConnection(Exception):
    """The request is one Kafka answers by closing the connection."""


class KafkaServer:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.handlers = load_handlers()
        self.max_request_bytes = broker.config["socket.request.max.bytes"]
        self.max_connections = broker.config["max.connections"]
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task] = set()

    async def start(self, host: str, port: int) -> tuple[str, int]:
        self._server = await asyncio.start_server(self._accept, host or None, port, reuse_address=True)
        bound = self._server.sockets[0].getsockname()
        return bound[0], bound[1]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if len(self._connections) >= self.max_connections:
            log.warning("refusing connection: max.connections=%d reached", self.max_connections)
            writer.close()
            return
        self._connections.add(task)
        peer = writer.get_extra_info("peername")
        client_host = peer[0] if peer else "?"
        try:
            await self._serve(reader, writer, client_host)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the client went away
        except CloseConnection as reason:
            log.info("closing connection from %s: %s", client_host, reason)
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("closing connection from %s after an unexpected error", client_host)
        finally:
            self._connections.discard(task)
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, client_host: str) -> None:
        while True:
            size = framing.read_size(await reader.readexactly(4))
            if size < 0 or size > self.max_request_bytes:
                raise CloseConnection(
                    f"request size {size} is outside [0, socket.request.max.bytes={self.max_request_bytes}]"
                )
            frame = await reader.readexactly(size)
            response = await self._handle(frame, client_host)
            if response is not None:
                writer.write(response)
                if writer.transport.get_write_buffer_size() > _WRITE_HIGH_WATER:
                    await writer.drain()

    async def _handle(self, frame: bytes, client_host: str) -> bytes | None:
        try:
            api_key, version, correlation_id, client_id, position = framing.read_request_header(frame)
        except framing.MalformedRequestError as error:
            raise CloseConnection(str(error)) from None
        handler = self.handlers.get(api_key)
        if handler is None:
            raise CloseConnection(f"unknown API key {api_key}")
        if not handler.min_version <= version <= handler.max_version:
            if api_key == framing.API_VERSIONS_KEY:
                from oncelog.broker.handlers.api_versions import unsupported_version_response

                return framing.response_frame(
                    correlation_id, unsupported_version_response(self.handlers), flexible_header=False
                )
            raise CloseConnection(
                f"{handler.name} v{version} is not supported "
                f"(v{handler.min_version}-v{handler.max_version})"
            )
        flexible = is_flexible(api_key, version)
        try:
            if flexible:
                position = framing.skip_tagged_fields(frame, position)
            request = decode_request(api_key, version, frame, position)
        except Exception as error:  # kio raises several types for malformed bodies
            raise CloseConnection(f"malformed {handler.name} v{version} request: {error}") from None
        context = RequestContext(
            broker=self.broker,
            api_key=api_key,
            api_version=version,
            correlation_id=correlation_id,
            client_id=client_id,
            client_host=client_host,
            response=ResponseBuilder(api_key, version),
        )
        response = await handler.handle(context, request)
        if response is None:
            return None  # e.g. Produce with acks=0
        flexible_header = flexible and api_key != framing.API_VERSIONS_KEY
        return framing.response_frame(correlation_id, encode_response(response), flexible_header=flexible_header)
