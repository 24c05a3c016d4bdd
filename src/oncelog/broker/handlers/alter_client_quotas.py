"""AlterClientQuotas (key 49), v0-v1 (KIP-546).

Sets and removes the quotas of user, client-id and ip entities (oncelog.kernel.quotas),
stored before the answer (a file standalone, the metadata quorum in cluster mode) and
enforced from the next request on. One result per entry, in request order, with Kafka's
checks and messages (INVALID_REQUEST): an empty entity, an unknown or repeated entity
type, an empty name, ip with user or client-id, an entity or key twice in one request,
a key the entity type does not take, a value that is not above 0, a fractional byte rate.
An entry with an error changes nothing; the others apply. `validate_only` checks
everything and changes nothing. Removing a key that is not set is no error; an entity
left without quotas is gone.

`controller_mutation_rate` (and an ip's `connection_creation_rate`) are stored and
described but not enforced: oncelog has no controller mutation or connection rate quota.

Deviations: Kafka reports an entity named twice once (and applies its first entry);
here each entry gets its result and neither applies. A name that is not an IP address
is refused for ip (Kafka resolves host names). A value that is not a finite number is
refused (Kafka stores NaN).

Needs Cluster ALTER_CONFIGS: else every entry gets CLUSTER_AUTHORIZATION_FAILED and
nothing changes.
"""

from __future__ import annotations

import logging

from oncelog.broker.dispatch import RequestContext, api
from oncelog.kernel.quotas import Alteration, AlterationResult, entity_text
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode
from oncelog.security.acl import AclOperation

log = logging.getLogger("oncelog.quotas")


@api(49, "AlterClientQuotas", range(0, 2))
async def handle(ctx: RequestContext, request):
    make = ctx.response.make
    if not ctx.authorize_cluster(AclOperation.ALTER_CONFIGS):
        results = [AlterationResult(ErrorCode.cluster_authorization_failed, "Cluster authorization failed.")
                   ] * len(request.entries)
    else:
        alterations = [Alteration(tuple([(data.entity_type, data.entity_name)
                                         async for data in ctx.paced(entry.entity)]),
                                  tuple([(op.key, None if op.remove else float(op.value))
                                         async for op in ctx.paced(entry.ops)]))
                       async for entry in ctx.paced(request.entries)]
        results = await ctx.broker.client_quotas.alter(alterations, validate_only=request.validate_only,
                                                       pace=ctx.pace)
        if not request.validate_only:
            async for alteration, result in ctx.paced(zip(alterations, results, strict=True)):
                if result.ok:  # an entity of at most three types, each operation once
                    log.info("%s altered the client quotas of %s: %s", ctx.principal, entity_text(alteration.entity),
                             ", ".join(f"{key}={'(removed)' if value is None else value}"
                                       for key, value in alteration.ops))
    return make("AlterClientQuotasResponse", throttle_time=NO_THROTTLE, entries=tuple([
        make("EntryData", error_code=result.error_code, error_message=result.error_message,
             entity=tuple([make("EntityData", entity_type=data.entity_type, entity_name=data.entity_name)
                           async for data in ctx.paced(entry.entity)]))
        async for entry, result in ctx.paced(zip(request.entries, results, strict=True))]))
