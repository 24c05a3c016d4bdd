"""oncelog.pacing: paced passes give the loop away between items and answer as the
unpaced ones do."""

from __future__ import annotations

import asyncio
import random

import pytest

from oncelog.pacing import SORT_RUN, Steps, paced, run_paced, run_steps, sorted_paced, unpaced


class CountingPace:
    def __init__(self) -> None:
        self.paces = 0

    async def __call__(self) -> None:
        self.paces += 1
        await asyncio.sleep(0)


@pytest.mark.parametrize("size", [0, 1, SORT_RUN, SORT_RUN + 1, 5 * SORT_RUN + 17])
def test_sorted_paced_is_sorted_and_stable(size):
    items = [(random.randrange(50), index) for index in range(size)]
    pace = CountingPace()
    assert asyncio.run(sorted_paced(items, pace, key=lambda item: item[0])) == sorted(items, key=lambda item: item[0])
    assert (pace.paces > 0) == (size > SORT_RUN)  # a short list is sorted at once


def test_sorted_paced_reads_a_set_that_changes_at_its_paces_once():
    names = {f"t{index}" for index in range(3 * SORT_RUN)}

    async def sort_while_adding() -> list[str]:
        async def pace() -> None:
            names.add(f"late{len(names)}")  # what a pace may let others do
            await asyncio.sleep(0)

        return await sorted_paced(names, pace)

    assert asyncio.run(sort_while_adding()) == sorted(f"t{index}" for index in range(3 * SORT_RUN))


def steps_summing(values: list[int]) -> Steps[int]:
    total = 0
    for value in values:
        yield
        total += value
    return total


def test_steps_give_the_same_answer_at_once_or_paced():
    pace = CountingPace()
    assert run_steps(steps_summing([1, 2, 3])) == 6
    assert asyncio.run(run_paced(steps_summing([1, 2, 3]), pace)) == 6
    assert pace.paces == 3


def test_paced_paces_before_each_item_and_unpaced_never_waits():
    async def collect() -> tuple[list[int], int]:
        pace = CountingPace()
        return [item async for item in paced(range(4), pace)], pace.paces

    assert asyncio.run(collect()) == ([0, 1, 2, 3], 4)
    coroutine = unpaced()
    with pytest.raises(StopIteration):
        coroutine.send(None)  # done at once: no suspension
