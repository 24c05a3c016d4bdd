"""Once per Spark Python worker process: keep the garbage collector off what lives for the
worker's whole life.

pyspark's daemon reuses a worker for task after task and runs a full `gc.collect()`
after every one. That collection walks every tracked object, the ~70,000 that pyspark,
pyarrow, numpy, kio and oncelog leave after import among them: 13-18 ms each time,
measured, and a micro-batch of the pipeline ends four tasks and two driver-side calls.
`settle()`, called when a task of ours is done, collects once and then freezes
everything alive (`gc.freeze()`: modules, classes, the process's connections), so later
collections only walk what later tasks make. Outside a Spark Python worker it does nothing.
"""

from __future__ import annotations

import gc
import os

_settled = False


def settle() -> None:
    global _settled  # noqa: PLW0603 (once per worker process)
    if _settled or os.environ.get("SPARK_PYTHON_RUNTIME") != "PYTHON_WORKER":
        return
    _settled = True
    gc.collect()
    gc.freeze()
