"""meta.properties, as Kafka writes it in each log dir: the cluster and node a log dir
belongs to. Every dir must agree, and a broker never opens another node's or another
cluster's logs."""

from __future__ import annotations

import base64
import uuid
from collections.abc import Sequence
from pathlib import Path

from oncelog.config.broker import ConfigError

FILE_NAME = "meta.properties"


def stored_cluster_id(log_dirs: Sequence[Path]) -> str | None:
    """The cluster id in the log dirs' meta.properties, if any."""
    for directory in log_dirs:
        path = directory / FILE_NAME
        if path.exists():
            for line in path.read_text().splitlines():
                if line.startswith("cluster.id="):
                    return line.split("=", 1)[1]
    return None


def load_or_create(log_dirs: Sequence[Path], node_id: int, configured: str | None) -> str:
    """The cluster id the log dirs belong to, after writing meta.properties in each dir
    that has none. `configured`: the id the dirs must have (`cluster.id`, or the
    quorum's in cluster mode); a new id when neither it nor any dir names one."""
    found: set[str] = set()
    for directory in log_dirs:
        path = directory / FILE_NAME
        if path.exists():
            values = dict(
                line.split("=", 1) for line in path.read_text().splitlines()
                if "=" in line and not line.startswith("#")
            )
            if values.get("node.id") and int(values["node.id"]) != node_id:
                raise ConfigError(f"{path} belongs to node.id {values['node.id']}, this broker is node.id {node_id}")
            found.add(values["cluster.id"])
    if len(found) > 1:
        raise ConfigError(f"log.dirs belong to different clusters: {sorted(found)}")
    if configured and found and configured not in found:
        raise ConfigError(f"cluster.id={configured} but log.dirs belong to cluster {found.pop()}")
    cluster_id = configured or (found.pop() if found else new_cluster_id())
    for directory in log_dirs:
        path = directory / FILE_NAME
        if not path.exists():
            temporary = path.with_suffix(".tmp")
            temporary.write_text(
                "#\n#Written by oncelog\nversion=1\n"
                f"cluster.id={cluster_id}\nnode.id={node_id}\n"
                f"directory.id={new_cluster_id()}\n"
            )
            temporary.replace(path)
    return cluster_id


def new_cluster_id() -> str:
    """A random id in Kafka's form: a UUID, base64url without padding."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
