"""IncrementalAlterConfigs (key 44), v0-v1 (KIP-339): SET, DELETE, APPEND and SUBTRACT of
single keys of a resource's overrides (oncelog.config.changes), with
`validate_only`; the resources as in `_configs`.
"""

from __future__ import annotations

from oncelog.broker.dispatch import RequestContext, api
from oncelog.broker.handlers._configs import alter_all
from oncelog.config.changes import PlannedChange, plan_changed
from oncelog.pacing import Steps


@api(44, "IncrementalAlterConfigs", range(0, 2))
async def handle(ctx: RequestContext, request) -> object:
    return await alter_all(ctx, request, _plan, "IncrementalAlterConfigsResponse", incremental=True)


def _plan(resource, list_keys: frozenset[str]) -> Steps[PlannedChange]:
    return plan_changed(((config.name, config.config_operation, config.value) for config in resource.configs),
                        list_keys)
