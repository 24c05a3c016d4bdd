"""The kernel the domain stands on, below the coordinators and cluster mode.

- `node.py`: the narrow, typed seams every part is given instead of the broker;
- `partitions.py`: the append path's checks, in Kafka's order, and the coordinators' appends;
- `leadership.py`, `topics.py`: standalone mode's Leadership and TopicAdmin, and what both
  modes share of them (`TopicRequestError`, `check_epoch`, the views);
- `internal_topics.py`: how `__consumer_offsets` and `__transaction_state` are made;
- `peer.py`: the connections to the other brokers of a cluster, for whoever must send them a request;
- `authorization.py`, `quotas.py`, `quota_store.py`, `fetch_sessions.py`: the broker-wide
  owners of ACLs, client quotas and incremental fetch sessions, whichever mode stores them.
"""
