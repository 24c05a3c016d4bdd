"""The main job (`make demo` -> `oncelog demo`): order enrichment, exactly once, with faults.

- `orders`: the orders the demo writes (some in aborted transactions) and the enrichment
  it expects back;
- `faults`: a transform that makes a Spark task fail on its first attempt;
- `job`: the run: embedded broker, seeding, the pipeline runner as a driver subprocess
  killed with SIGKILL and restarted from its checkpoint, verification and the report;
- `lake`: with `--sink iceberg`, the Iceberg table the run writes and the pyiceberg reads
  that check it.
"""
