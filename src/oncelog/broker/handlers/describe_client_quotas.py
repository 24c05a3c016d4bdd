"""DescribeClientQuotas (key 48), v0-v1 (KIP-546).

The stored quotas (oncelog.kernel.quotas) of the entities the filter matches, as Kafka's
ClientQuotasImage answers: each component names an entity type (`user`, `client-id`,
`ip`) and a match (0: that exact name, 1: the default, 2: any name or the default); an
entity matches when it has every type named as asked, and, with `strict`, no other
type. No components: every entity (strict: none). Entries are ordered by entity, each
entity's types listed user first. A bad filter (an empty or repeated type, a match
string where none belongs or none where one does, ip with user or client-id, an unknown
match type) is INVALID_REQUEST, an unknown entity type UNSUPPORTED_VERSION, with no
entries.

Needs Cluster DESCRIBE_CONFIGS: else CLUSTER_AUTHORIZATION_FAILED, with no entries.
"""

from __future__ import annotations

from oncelog.broker.dispatch import RequestContext, api
from oncelog.kernel.quotas import QuotaFilterError, describe
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode
from oncelog.security.acl import AclOperation

# Within an entry, the entity types in the order kafka-configs.sh prints them.
_TYPE_ORDER = {"user": 0, "client-id": 1, "ip": 2}


@api(48, "DescribeClientQuotas", range(0, 2))
async def handle(ctx: RequestContext, request):
    make = ctx.response.make
    if not ctx.authorize_cluster(AclOperation.DESCRIBE_CONFIGS):
        return make("DescribeClientQuotasResponse", throttle_time=NO_THROTTLE,
                    error_code=ErrorCode.cluster_authorization_failed, error_message="Cluster authorization failed.",
                    entries=None)
    # Read lazily: a filter holds at most one component per entity type, and is refused at
    # the first that breaks that.
    components = ((component.entity_type, component.match_type, component.match) for component in request.components)
    try:
        matched = describe(ctx.broker.client_quotas.current(), components, request.strict)
    except QuotaFilterError as error:
        return make("DescribeClientQuotasResponse", throttle_time=NO_THROTTLE, error_code=error.error_code,
                    error_message=str(error), entries=None)
    return make("DescribeClientQuotasResponse", throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                error_message=None, entries=tuple([
                    make("EntryData",
                         entity=tuple(make("EntityData", entity_type=kind, entity_name=name)
                                      for kind, name in sorted(entity, key=lambda pair: _TYPE_ORDER[pair[0]])),
                         values=tuple(make("ValueData", key=key, value=value) for key, value in sorted(values.items())))
                    async for entity, values in ctx.paced(matched)]))
