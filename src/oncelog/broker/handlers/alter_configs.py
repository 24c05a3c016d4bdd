"""AlterConfigs (key 33), v0-v2: the legacy form (deprecated by Kafka since 2.3, still
used by kafka-python and older tools), where the keys sent become a resource's whole
override set and a key left out returns to its default (oncelog.config.changes),
with `validate_only`; the resources as in `_configs`.
"""

from __future__ import annotations

from oncelog.broker.dispatch import RequestContext, api
from oncelog.broker.handlers._configs import alter_all
from oncelog.config.changes import PlannedChange, plan_replaced
from oncelog.pacing import Steps


@api(33, "AlterConfigs", range(0, 3))
async def handle(ctx: RequestContext, request) -> object:
    return await alter_all(ctx, request, _plan, "AlterConfigsResponse", incremental=False)


def _plan(resource, _list_keys: frozenset[str]) -> Steps[PlannedChange]:
    return plan_replaced((config.name, config.value) for config in resource.configs)
