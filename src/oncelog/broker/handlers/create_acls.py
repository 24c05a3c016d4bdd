"""CreateAcls (key 30), v1-v3 (v0 went with Kafka 4.0, KIP-896).

Needs Cluster ALTER. Each creation gets its own result: INVALID_REQUEST with Kafka's
message for a binding that cannot exist (an UNKNOWN or ANY field, a CLUSTER resource
not named kafka-cluster, a principal not of the form Type:name); the others are stored
(oncelog.kernel.authorization) before the answer. Without an authorizer every result is
SECURITY_DISABLED.
"""

from __future__ import annotations

from oncelog.broker.dispatch import RequestContext, api
from oncelog.broker.handlers._acls import NO_AUTHORIZER, binding_of
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode
from oncelog.security.acl import AclOperation


@api(30, "CreateAcls", range(1, 4))
async def handle(ctx: RequestContext, request):
    make = ctx.response.make
    acls = ctx.broker.acls
    if acls is None:
        result = make("AclCreationResult", error_code=ErrorCode.security_disabled, error_message=NO_AUTHORIZER)
        return make("CreateAclsResponse", throttle_time=NO_THROTTLE, results=(result,) * len(request.creations))
    if not ctx.authorize_cluster(AclOperation.ALTER):
        result = make("AclCreationResult", error_code=ErrorCode.cluster_authorization_failed, error_message=None)
        return make("CreateAclsResponse", throttle_time=NO_THROTTLE, results=(result,) * len(request.creations))
    created = await acls.create([binding_of(creation) async for creation in ctx.paced(request.creations)],
                                ctx.pace)
    return make("CreateAclsResponse", throttle_time=NO_THROTTLE, results=tuple([
        make("AclCreationResult", error_code=ErrorCode(result.error_code), error_message=result.message)
        async for result in ctx.paced(created)]))
