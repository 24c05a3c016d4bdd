"""Fault injection and the judging of histories: the chaos soak run and its parts.

- the run (`oncelog chaos`, through oncelog.admin.chaos): `run` (run_chaos, the result),
  `settings`, `sessions`, `workers` (the client threads), `targets` (the broker or cluster
  under test, behind fault proxies, and the Nemesis thread);
- the faults: `proxy` (FaultProxy, a Kafka-aware TCP proxy that drops, cuts, delays and
  duplicates), `nemesis` (a cluster's faults: kill, pause, partition, disk,
  sessions);
- the judges: `history` (recording clients and the operations they record), `checker`
  (the anomalies of a history), `stalls` (how long clients waited during each fault),
  `replicas` (every replica of a partition holds the same batches);
- `ctp`: a consume-transform-produce application process, to kill -9.

Used by `oncelog chaos` and by the tests (the chaos, history, fault proxy, idempotence and
consume-transform-produce tests, and the checker's unit tests). The processes these drive
come from oncelog.local.
"""
