"""DescribeAcls (key 29), v1-v3 (v0 went with Kafka 4.0, KIP-896).

Needs Cluster DESCRIBE. The bindings the filter matches, grouped by resource pattern
(as Kafka answers). Without an authorizer: SECURITY_DISABLED; a filter with an UNKNOWN
field: INVALID_REQUEST.
"""

from __future__ import annotations

from oncelog.broker.dispatch import RequestContext, api
from oncelog.broker.handlers._acls import NO_AUTHORIZER, filter_of
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode
from oncelog.security.acl import AclBinding, AclOperation, ResourcePattern, validate_filter


@api(29, "DescribeAcls", range(1, 4))
async def handle(ctx: RequestContext, request):
    make = ctx.response.make
    acls = ctx.broker.acls

    async def answer(code: ErrorCode, message: str | None, bindings: list[AclBinding]):
        by_pattern: dict[ResourcePattern, list[AclBinding]] = {}
        async for binding in ctx.paced(bindings):
            by_pattern.setdefault(binding.pattern, []).append(binding)
        return make("DescribeAclsResponse", throttle_time=NO_THROTTLE, error_code=code, error_message=message,
                    resources=tuple([
                        make("DescribeAclsResource", resource_type=pattern.resource_type, resource_name=pattern.name,
                             pattern_type=pattern.pattern_type, acls=tuple([
                                 make("AclDescription", principal=b.entry.principal, host=b.entry.host,
                                      operation=b.entry.operation, permission_type=b.entry.permission_type)
                                 async for b in ctx.paced(grouped)]))
                        async for pattern, grouped in ctx.paced(by_pattern.items())]))

    if acls is None:
        return await answer(ErrorCode.security_disabled, NO_AUTHORIZER, [])
    if not ctx.authorize_cluster(AclOperation.DESCRIBE):
        return await answer(ErrorCode.cluster_authorization_failed, None, [])
    binding_filter = filter_of(request)
    problem = validate_filter(binding_filter)
    if problem is not None:
        return await answer(ErrorCode.invalid_request, problem, [])
    return await answer(ErrorCode.none, None, acls.describe(binding_filter))
