"""The framing of a PeerConnection's socket (`_ResponseReceiver`): whatever sizes the
socket delivers bytes in, every response frame comes out whole and in order, large ones
received into a buffer of their own; a connection that ends fails the waiting request."""

from __future__ import annotations

import asyncio
import random
import struct

import pytest

from oncelog.kernel.peer import _ResponseReceiver
from oncelog.protocol.frame_receiver import RECEIVE_BUFFER


def feed(receiver: _ResponseReceiver, data: bytes, chunks: list[int]) -> None:
    """Deliver `data` as the event loop would: into the buffers the receiver offers, at
    most `chunks[i]` bytes per socket read."""
    position, step = 0, 0
    while position < len(data):
        buffer = receiver.get_buffer(-1)
        size = min(len(buffer), chunks[step % len(chunks)], len(data) - position)
        buffer[:size] = data[position:position + size]
        receiver.buffer_updated(size)
        position += size
        step += 1


def framed(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


@pytest.mark.parametrize("chunks", [[1], [3, 7], [4096], [RECEIVE_BUFFER], [10 * RECEIVE_BUFFER], [5, 70_000, 13]])
def test_frames_of_every_size_come_out_whole_and_in_order_whatever_the_read_sizes(chunks):
    rng = random.Random(len(chunks) * 31 + chunks[0])
    sizes = [0, 1, 4, 100, RECEIVE_BUFFER - 4, RECEIVE_BUFFER - 3, RECEIVE_BUFFER,
             3 * RECEIVE_BUFFER + 17, 1_000_000]
    bodies = [bytes(rng.getrandbits(8) for _ in range(min(size, 64))) * (size // 64) + bytes(size % 64)
              for size in sizes]
    receiver = _ResponseReceiver()
    feed(receiver, b"".join(framed(body) for body in bodies), chunks)

    async def take_all() -> list[bytes]:
        return [bytes(await receiver.next_frame()) for _ in bodies]

    assert asyncio.run(take_all()) == bodies


def test_a_connection_lost_mid_frame_fails_the_waiting_request_after_the_whole_frames():
    receiver = _ResponseReceiver()
    feed(receiver, framed(b"first") + framed(b"x" * 100)[:50], [4096])

    async def take() -> tuple[bytes, BaseException]:
        first = bytes(await receiver.next_frame())
        waiting = asyncio.ensure_future(receiver.next_frame())
        await asyncio.sleep(0)
        receiver.connection_lost(None)
        with pytest.raises(ConnectionResetError) as failed:
            await waiting
        return first, failed.value

    first, failure = asyncio.run(take())
    assert first == b"first"
    assert "connection lost" in str(failure)


def test_a_negative_size_fails_the_connection():
    receiver = _ResponseReceiver()
    feed(receiver, struct.pack(">i", -5), [4096])
    with pytest.raises(ConnectionError, match="response size -5 is outside"):
        asyncio.run(receiver.next_frame())


def test_a_tls_alert_read_as_a_size_fails_the_connection_instead_of_allocating_hundreds_of_mib():
    receiver = _ResponseReceiver()
    feed(receiver, bytes.fromhex("15030300020250"), [4096])  # a plaintext peer answered by a TLS listener
    with pytest.raises(ConnectionError, match="response size 352518912 is outside"):
        asyncio.run(receiver.next_frame())


def test_a_connection_lost_with_an_error_that_is_not_a_connection_error_fails_as_one():
    """Every caller handles ConnectionError; a MemoryError or the event loop's RuntimeError
    must not get past them (and kill a replica fetcher)."""
    receiver = _ResponseReceiver()
    receiver.connection_lost(RuntimeError("get_buffer() returned an empty buffer"))
    assert receiver.failed
    with pytest.raises(ConnectionError, match="empty buffer") as failed:
        asyncio.run(receiver.next_frame())
    assert isinstance(failed.value.__cause__, RuntimeError)
