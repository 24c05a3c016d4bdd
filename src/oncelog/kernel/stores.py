"""Where a broker keeps what may change while it runs (dynamic and group configs, SCRAM
credentials, ACLs, client quotas): files standalone, the metadata quorum in cluster mode,
loaded by the broker's mode (`broker.modes`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from oncelog.config.dynamic_store import DynamicConfigStore
    from oncelog.config.group_store import GroupConfigStore
    from oncelog.kernel.authorization import Acls
    from oncelog.kernel.quota_store import ClientQuotaStore
    from oncelog.security.scram_credentials import ScramCredentialStore


@dataclass(frozen=True, slots=True)
class Stores:
    """The stores, loaded."""

    dynamic_configs: DynamicConfigStore
    group_configs: GroupConfigStore
    scram_credentials: ScramCredentialStore
    acls: Acls | None  # None without `authorizer.class.name`: everything is allowed
    client_quotas: ClientQuotaStore
