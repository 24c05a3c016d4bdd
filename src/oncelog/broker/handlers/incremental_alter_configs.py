"""IncrementalAlterConfigs (key 44), v0-v1 (KIP-339): SET, DELETE, APPEND and SUBTRACT of
single keys of a resource's overrides (oncelog.broker.config_changes), with
`validate_only`; the resources as in `_configs`.
"""

from __future__ import annotations

from oncelog.broker.config_changes import changed
from oncelog.broker.dispatch import RequestContext, api
from oncelog.broker.handlers._configs import Change, alter_all


@api(44, "IncrementalAlterConfigs", range(0, 2))
async def handle(ctx: RequestContext, request) -> object:
    return await alter_all(ctx, request, _change, "IncrementalAlterConfigsResponse", incremental=True)


def _change(resource) -> Change:
    changes = [(config.name, config.config_operation, config.value) for config in resource.configs]
    return lambda current, defaults, list_keys: changed(current, defaults, changes, list_keys)
