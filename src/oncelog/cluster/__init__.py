"""Cluster mode: several brokers sharing metadata through a controller quorum.

The quorum is etcd (Debian's `etcd-server`), spoken to over its HTTP/JSON gateway
(`etcd.py`); the plan and its reasons are in docs/cluster-design.md. Without
`controller.quorum.voters` or `controller.quorum.bootstrap.servers` a broker runs
standalone and nothing here is used.
"""
