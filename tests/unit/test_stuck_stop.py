"""A broker still running after SIGTERM logs where its threads and tasks wait."""

from __future__ import annotations

import asyncio
import logging
import threading

from oncelog.broker.stuck_stop import watch_shutdown


def test_a_shutdown_stuck_on_a_task_logs_that_tasks_stack_and_the_blocked_thread(caplog):
    caplog.set_level(logging.WARNING, logger="oncelog.broker.stuck_stop")
    blocked = threading.Event()

    def wait_in_a_thread_named_for_the_test() -> None:
        blocked.wait(5)

    thread = threading.Thread(target=wait_in_a_thread_named_for_the_test, name="stuck-worker", daemon=True)
    thread.start()

    async def a_task_that_never_ends() -> None:
        await asyncio.Event().wait()

    async def main() -> None:
        task = asyncio.get_running_loop().create_task(a_task_that_never_ends())
        watch_shutdown(asyncio.get_running_loop(), after_s=0.05)
        for _ in range(100):
            await asyncio.sleep(0.02)
            if "event loop's" in caplog.text:
                break
        task.cancel()

    asyncio.run(main())
    blocked.set()
    assert "still running 0s after SIGTERM" in caplog.text
    assert "thread stuck-worker" in caplog.text and "wait_in_a_thread_named_for_the_test" in caplog.text
    assert "a_task_that_never_ends" in caplog.text
