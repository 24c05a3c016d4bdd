"""AlterConfigs (key 33), v0-v2: the legacy form (deprecated by Kafka since 2.3, still
used by kafka-python and older tools), where the keys sent become a resource's whole
override set and a key left out returns to its default (oncelog.broker.config_changes),
with `validate_only`; the resources as in `_configs`.
"""

from __future__ import annotations

from oncelog.broker.config_changes import replaced
from oncelog.broker.dispatch import RequestContext, api
from oncelog.broker.handlers._configs import alter_resource, answers, duplicated
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode


@api(33, "AlterConfigs", range(0, 3))
async def handle(ctx: RequestContext, request) -> object:
    twice = duplicated(request.resources)
    outcome = []
    for resource in request.resources:
        if (resource.resource_type, resource.resource_name) in twice:
            outcome.append((ErrorCode.invalid_request, "Duplicate resource in the request."))
            continue
        changes = [(config.name, config.value) for config in resource.configs]

        def change(current, effective, list_keys, changes=changes):
            return replaced(changes)

        outcome.append(await alter_resource(ctx, resource, change, request.validate_only))
    return ctx.response.make("AlterConfigsResponse", throttle_time=NO_THROTTLE,
                             responses=answers(ctx, request, outcome))
