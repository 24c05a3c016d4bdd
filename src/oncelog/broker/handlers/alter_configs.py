"""AlterConfigs (key 33), v0-v2: the legacy form (deprecated by Kafka since 2.3, still
used by kafka-python and older tools), where the keys sent become a resource's whole
override set and a key left out returns to its default (oncelog.broker.config_changes),
with `validate_only`; the resources as in `_configs`.
"""

from __future__ import annotations

from oncelog.broker.config_changes import replaced
from oncelog.broker.dispatch import RequestContext, api
from oncelog.broker.handlers._configs import Change, alter_all


@api(33, "AlterConfigs", range(0, 3))
async def handle(ctx: RequestContext, request) -> object:
    return await alter_all(ctx, request, _change, "AlterConfigsResponse", incremental=False)


def _change(resource) -> Change:
    changes = [(config.name, config.value) for config in resource.configs]
    return lambda _current, _defaults, _list_keys: replaced(changes)
