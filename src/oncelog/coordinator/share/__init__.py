"""Share groups (KIP-932, "Queues for Kafka"): many consumers on one partition, each
record acquired by one member at a time, acknowledged, released or rejected, delivered
a bounded number of times.

    partition.py    SharePartition: one partition's in-flight records, their states and
                    delivery counts, as a table of transitions (the domain: no bytes)
    groups.py       ShareGroups: membership (ShareGroupHeartbeat), the assignment
    manager.py      SharePartitions: the share partitions led here and the share
                    sessions (ShareFetch, ShareAcknowledge), lock expiry
    state_topic.py  ShareStateTopic: `__share_group_state`, where each share partition's
                    state is persisted (the share coordinator's topic)
    records.py      that topic's records
    settings.py     a group's share settings: its configs over the broker's
"""
