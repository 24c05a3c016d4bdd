"""CreateAcls (key 30), v1-v3 (v0 went with Kafka 4.0, KIP-896).

Needs Cluster ALTER. Each creation gets its own result: INVALID_REQUEST with Kafka's
message for a binding that cannot exist (an UNKNOWN or ANY field, a CLUSTER resource
not named kafka-cluster, a principal not of the form Type:name); the others are stored
(oncelog.broker.authorization) before the answer. Without an authorizer every result is
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
    results: list[tuple[ErrorCode, str | None]]
    if acls is None:
        results = [(ErrorCode.security_disabled, NO_AUTHORIZER)] * len(request.creations)
    elif not ctx.authorize_cluster(AclOperation.ALTER):
        results = [(ErrorCode.cluster_authorization_failed, None)] * len(request.creations)
    else:
        created = await acls.create([binding_of(creation) for creation in request.creations])
        results = [(ErrorCode(result.error_code), result.message) for result in created]
    return make("CreateAclsResponse", throttle_time=NO_THROTTLE, results=tuple(
        make("AclCreationResult", error_code=code, error_message=message) for code, message in results))
