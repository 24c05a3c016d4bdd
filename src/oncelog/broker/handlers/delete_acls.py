"""DeleteAcls (key 31), v1-v3 (v0 went with Kafka 4.0, KIP-896).

Needs Cluster ALTER. Each filter removes the bindings it matches and lists them; a
filter with an UNKNOWN field is INVALID_REQUEST. The removal is stored before the
answer. Without an authorizer every result is SECURITY_DISABLED.
"""

from __future__ import annotations

from oncelog.broker.dispatch import RequestContext, api
from oncelog.broker.handlers._acls import NO_AUTHORIZER, filter_of
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode
from oncelog.security.acl import AclOperation


@api(31, "DeleteAcls", range(1, 4))
async def handle(ctx: RequestContext, request):
    make = ctx.response.make
    acls = ctx.broker.acls

    async def result(code: ErrorCode, message: str | None, matched=()):
        return make("DeleteAclsFilterResult", error_code=code, error_message=message, matching_acls=tuple([
            make("DeleteAclsMatchingAcl", error_code=ErrorCode.none, error_message=None,
                 resource_type=b.pattern.resource_type, resource_name=b.pattern.name,
                 pattern_type=b.pattern.pattern_type, principal=b.entry.principal, host=b.entry.host,
                 operation=b.entry.operation, permission_type=b.entry.permission_type)
            async for b in ctx.paced(matched)]))

    if acls is None:
        results = [await result(ErrorCode.security_disabled, NO_AUTHORIZER)] * len(request.filters)
    elif not ctx.authorize_cluster(AclOperation.ALTER):
        results = [await result(ErrorCode.cluster_authorization_failed, None)] * len(request.filters)
    else:
        deleted = await acls.delete([filter_of(each) async for each in ctx.paced(request.filters)], ctx.pace)
        results = [await result(ErrorCode(outcome.error_code), outcome.message, matched)
                   async for outcome, matched in ctx.paced(deleted)]
    return make("DeleteAclsResponse", throttle_time=NO_THROTTLE, filter_results=tuple(results))
