"""IncrementalAlterConfigs (key 44), v0-v1 (KIP-339): SET, DELETE, APPEND and SUBTRACT of
single keys of a resource's overrides (oncelog.broker.config_changes), with
`validate_only`; the resources as in `_configs`.
"""

from __future__ import annotations

from oncelog.broker.config_changes import changed
from oncelog.broker.dispatch import RequestContext, api
from oncelog.broker.handlers._configs import alter_resource, answers, duplicated
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode


@api(44, "IncrementalAlterConfigs", range(0, 2))
async def handle(ctx: RequestContext, request) -> object:
    twice = duplicated(request.resources)
    outcome = []
    for resource in request.resources:
        if (resource.resource_type, resource.resource_name) in twice:
            outcome.append((ErrorCode.invalid_request, "Duplicate resource in the request."))
            continue
        changes = [(config.name, config.config_operation, config.value) for config in resource.configs]

        def change(current, effective, list_keys, changes=changes):
            return changed(current, effective, changes, list_keys)

        outcome.append(await alter_resource(ctx, resource, change, request.validate_only))
    return ctx.response.make("IncrementalAlterConfigsResponse", throttle_time=NO_THROTTLE,
                             responses=answers(ctx, request, outcome))
