"""acks=all waiters: completion when the high watermark passes, timeout, leadership loss
and the ISR shrinking below min.insync.replicas."""

import asyncio

from oncelog.cluster.purgatory import HighWatermarkWaiters
from oncelog.protocol.messages import ErrorCode

LONG = 30.0


def run(body):
    return asyncio.run(asyncio.wait_for(body(), 5))


async def started(waiters, offset, timeout_s=LONG):
    task = asyncio.create_task(waiters.wait(offset, timeout_s))
    await asyncio.sleep(0)  # let it register
    return task


def test_waiter_completes_when_the_high_watermark_reaches_its_offset():
    async def body():
        waiters = HighWatermarkWaiters(high_watermark=10)
        task = await started(waiters, 15)
        assert waiters.advance(14) == 0
        await asyncio.sleep(0)
        assert not task.done()
        assert waiters.advance(15) == 1
        assert await task is ErrorCode.none
        assert len(waiters) == 0

    run(body)


def test_waiter_for_an_offset_already_below_the_high_watermark_completes_at_once():
    async def body():
        waiters = HighWatermarkWaiters(high_watermark=10)
        assert await waiters.wait(10, LONG) is ErrorCode.none
        assert len(waiters) == 0

    run(body)


def test_waiters_complete_in_offset_order():
    async def body():
        waiters = HighWatermarkWaiters()
        order = []

        async def wait(offset):
            await waiters.wait(offset, LONG)
            order.append(offset)

        tasks = [asyncio.create_task(wait(offset)) for offset in (30, 10, 20, 40)]
        await asyncio.sleep(0)
        assert waiters.advance(25) == 2
        await asyncio.sleep(0)
        assert order == [10, 20]
        assert len(waiters) == 2
        assert waiters.advance(35) == 1
        await asyncio.sleep(0)
        assert order == [10, 20, 30]
        waiters.advance(40)
        await asyncio.gather(*tasks)
        assert order == [10, 20, 30, 40]

    run(body)


def test_high_watermark_going_back_completes_nothing_and_is_ignored():
    async def body():
        waiters = HighWatermarkWaiters(high_watermark=50)
        task = await started(waiters, 60)
        assert waiters.advance(40) == 0
        assert waiters.high_watermark == 50
        waiters.advance(60)
        assert await task is ErrorCode.none

    run(body)


def test_waiter_times_out_with_request_timed_out():
    async def body():
        waiters = HighWatermarkWaiters()
        assert await waiters.wait(5, timeout_s=0.01) is ErrorCode.request_timed_out
        assert len(waiters) == 0
        assert waiters.advance(5) == 0  # the expired waiter is not answered twice

    run(body)


def test_timeout_of_one_waiter_leaves_the_others_waiting():
    async def body():
        waiters = HighWatermarkWaiters()
        short = await started(waiters, 5, timeout_s=0.01)
        long = await started(waiters, 5)
        assert await short is ErrorCode.request_timed_out
        assert waiters.advance(5) == 1
        assert await long is ErrorCode.none

    run(body)


def test_leadership_loss_fails_every_waiter_with_not_leader_or_follower():
    async def body():
        waiters = HighWatermarkWaiters()
        tasks = [await started(waiters, offset) for offset in (5, 9)]
        assert waiters.fail_all(ErrorCode.not_leader_or_follower) == 2
        assert await asyncio.gather(*tasks) == [ErrorCode.not_leader_or_follower] * 2
        assert len(waiters) == 0

    run(body)


def test_isr_shrinking_below_min_isr_fails_waiters_with_not_enough_replicas_after_append():
    async def body():
        waiters = HighWatermarkWaiters()
        task = await started(waiters, 5)
        assert waiters.check_min_isr(isr_size=2, min_isr=2) == 0
        await asyncio.sleep(0)
        assert not task.done()
        assert waiters.check_min_isr(isr_size=1, min_isr=2) == 1
        assert await task is ErrorCode.not_enough_replicas_after_append

    run(body)


def test_waiter_arriving_while_below_min_isr_fails_until_the_isr_grows_back():
    async def body():
        waiters = HighWatermarkWaiters(high_watermark=10)
        waiters.check_min_isr(isr_size=1, min_isr=2)
        # Even an offset the high watermark already passed: fewer replicas than required hold it.
        assert await waiters.wait(5, LONG) is ErrorCode.not_enough_replicas_after_append
        waiters.check_min_isr(isr_size=2, min_isr=2)
        assert await waiters.wait(5, LONG) is ErrorCode.none

    run(body)


def test_cancelled_waiter_is_dropped_without_harm():
    async def body():
        waiters = HighWatermarkWaiters()
        cancelled = await started(waiters, 5)
        kept = await started(waiters, 5)
        cancelled.cancel()
        await asyncio.sleep(0)
        assert len(waiters) == 1
        assert waiters.advance(5) == 1
        assert await kept is ErrorCode.none

    run(body)


def test_many_expired_waiters_do_not_accumulate():
    async def body():
        waiters = HighWatermarkWaiters()
        results = await asyncio.gather(*(waiters.wait(1000 + i, 0.001) for i in range(300)))
        assert set(results) == {ErrorCode.request_timed_out}
        assert len(waiters._heap) <= 64 * 2  # rebuilt as expired entries piled up

    run(body)
