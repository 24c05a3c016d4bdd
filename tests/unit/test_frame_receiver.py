"""FrameReceiver as the broker's client connections use it: frames come out whole and in
order whatever the read sizes, while the memory held follows the bytes received, never
the sizes the prefixes claim; a size prefix above the limit is refused before any buffer."""

from __future__ import annotations

import random
import struct

import pytest

from oncelog.protocol.frame_receiver import (
    GROWTH,
    INITIAL_RECEIVE_BUFFER,
    RECEIVE_BUFFER,
    FrameReceiver,
    FrameSizeError,
)

MIB = 1 << 20


def framed(body: bytes) -> bytes:
    return struct.pack(">i", len(body)) + body


def feed(receiver: FrameReceiver, data: bytes, chunks: list[int]) -> None:
    """Deliver `data` as the event loop would: into the buffers offered, at most
    `chunks[i]` bytes per socket read."""
    position, step = 0, 0
    while position < len(data):
        buffer = receiver.get_buffer()
        size = min(len(buffer), chunks[step % len(chunks)], len(data) - position)
        buffer[:size] = data[position:position + size]
        receiver.received(size)
        position += size
        step += 1


@pytest.mark.parametrize("chunks", [[1], [3, 7], [4096], [RECEIVE_BUFFER], [10 * RECEIVE_BUFFER], [5, 70_000, 13]])
def test_frames_of_every_size_come_out_whole_and_in_order_while_buffers_grow(chunks):
    rng = random.Random(len(chunks) * 17 + chunks[0])
    sizes = [0, 1, 100, INITIAL_RECEIVE_BUFFER - 4, INITIAL_RECEIVE_BUFFER, RECEIVE_BUFFER - 4, RECEIVE_BUFFER + 1,
             3 * RECEIVE_BUFFER + 17, 300_000]
    bodies = [rng.randbytes(min(size, 97)) * (size // 97) + bytes(size % 97) for size in sizes]
    frames: list[bytes] = []
    receiver = FrameReceiver(lambda frame: frames.append(bytes(frame)))
    feed(receiver, b"".join(framed(body) for body in bodies), chunks)
    assert frames == bodies


def test_a_claimed_100_mib_holds_only_a_small_multiple_of_what_was_sent():
    receiver = FrameReceiver(lambda frame: None)
    assert receiver.held_bytes == INITIAL_RECEIVE_BUFFER  # an idle connection holds a small buffer
    feed(receiver, struct.pack(">i", 100 * MIB) + b"\x00\x12", [4096])
    assert receiver.held_bytes <= INITIAL_RECEIVE_BUFFER + RECEIVE_BUFFER
    sent = 6
    for _ in range(40):  # then 1 MiB more, as it arrives
        feed(receiver, bytes(MIB // 40), [65536])
        sent += MIB // 40
        assert receiver.held_bytes <= GROWTH * sent + INITIAL_RECEIVE_BUFFER + RECEIVE_BUFFER


def test_a_frame_that_completes_is_delivered_at_its_exact_size():
    frames: list[bytearray] = []
    receiver = FrameReceiver(frames.append)
    body = bytes(range(256)) * 4096  # 1 MiB: grown three times on the way
    feed(receiver, framed(body), [65536])
    assert len(frames) == 1 and len(frames[0]) == len(body) and frames[0] == body


def test_preallocated_receivers_give_a_large_frame_its_whole_size_at_once():
    receiver = FrameReceiver(lambda frame: None, preallocate=True)
    feed(receiver, struct.pack(">i", 10 * MIB) + b"x", [4096])
    assert receiver.held_bytes == RECEIVE_BUFFER + 10 * MIB


def test_a_size_prefix_above_the_limit_is_refused_before_any_buffer_and_the_limit_can_change():
    receiver = FrameReceiver(lambda frame: None, max_size=100 * MIB, what="request", limit="socket.request.max.bytes")
    receiver.set_limit(524288, "sasl.server.max.receive.size")
    refused = r"request size 524289 is outside \[0, sasl.server.max.receive.size=524288\]"
    with pytest.raises(FrameSizeError, match=refused):
        feed(receiver, struct.pack(">i", 524289), [4096])
    assert receiver.held_bytes == INITIAL_RECEIVE_BUFFER
    frames: list[bytes] = []
    raised = FrameReceiver(lambda frame: frames.append(bytes(frame)), max_size=10)
    raised.set_limit(1000)
    feed(raised, framed(b"y" * 500), [4096])
    assert frames == [b"y" * 500]
