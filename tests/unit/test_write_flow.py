"""WriteFlow: asyncio's write flow control, shared by the broker's client connections and
its peer connections. A paused writer waits until the transport resumes it, and a
connection that ends while it waits fails it instead of leaving it waiting forever."""

from __future__ import annotations

import asyncio

import pytest

from oncelog.protocol.write_flow import WriteFlow


def never_closed() -> None:
    return None


def test_drained_returns_at_once_unless_paused():
    async def scenario():
        flow = WriteFlow()
        await asyncio.wait_for(flow.drained(never_closed), 1)

    asyncio.run(scenario())


def test_a_paused_writer_waits_until_resumed_and_again_if_paused_before_it_runs():
    async def scenario():
        flow = WriteFlow()
        flow.pause()
        writer = asyncio.ensure_future(flow.drained(never_closed))
        await asyncio.sleep(0.01)
        assert not writer.done()
        flow.resume()
        flow.pause()  # paused again before the writer ran: it keeps waiting
        await asyncio.sleep(0.01)
        assert not writer.done()
        flow.resume()
        await asyncio.wait_for(writer, 1)

    asyncio.run(scenario())


def test_a_connection_lost_while_a_writer_waits_fails_the_writer():
    async def scenario():
        flow = WriteFlow()
        flow.pause()
        writer = asyncio.ensure_future(flow.drained(never_closed))
        await asyncio.sleep(0.01)
        flow.fail(ConnectionResetError("connection lost"))
        with pytest.raises(ConnectionResetError, match="connection lost"):
            await asyncio.wait_for(writer, 1)

    asyncio.run(scenario())


def test_a_paused_writer_on_a_closed_connection_gets_the_reason_without_waiting():
    async def scenario():
        flow = WriteFlow()
        flow.pause()
        with pytest.raises(ConnectionResetError, match="closed while writing"):
            await asyncio.wait_for(flow.drained(lambda: ConnectionResetError("closed while writing")), 1)

    asyncio.run(scenario())
