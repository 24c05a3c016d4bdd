"""DescribeCluster (key 60), v0-v1: the live brokers and the active controller (a
standalone broker: itself, as both); endpoint type 2 (controllers) is
UNSUPPORTED_ENDPOINT_TYPE.

No authorization, as in Kafka. With `include_cluster_authorized_operations`, the
principal's operations on the cluster (every cluster operation without an authorizer),
0 without Cluster DESCRIBE; not asked for, AUTHORIZED_OPERATIONS_OMITTED.
"""

from __future__ import annotations

from oncelog.broker.dispatch import RequestContext, api
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode
from oncelog.security.acl import AUTHORIZED_OPERATIONS_OMITTED, CLUSTER_NAME, AclOperation, ResourceType

BROKERS_ENDPOINT = 1


@api(60, "DescribeCluster", range(0, 2))
async def handle(ctx: RequestContext, request) -> object:
    make = ctx.response.make
    broker = ctx.broker
    if getattr(request, "endpoint_type", BROKERS_ENDPOINT) != BROKERS_ENDPOINT:
        return make(
            "DescribeClusterResponse", throttle_time=NO_THROTTLE, error_code=ErrorCode.unsupported_endpoint_type,
            error_message="Only brokers can be described (endpoint type 1).", endpoint_type=request.endpoint_type,
            cluster_id=broker.cluster_id, controller_id=-1, brokers=(),
            cluster_authorized_operations=AUTHORIZED_OPERATIONS_OMITTED,
        )
    return make(
        "DescribeClusterResponse",
        throttle_time=NO_THROTTLE,
        error_code=ErrorCode.none,
        error_message=None,
        endpoint_type=BROKERS_ENDPOINT,
        cluster_id=broker.cluster_id,
        controller_id=broker.leadership.controller_id,
        brokers=tuple(make("DescribeClusterBroker", broker_id=b.node_id, host=b.host, port=b.port, rack=None)
                      for b in broker.leadership.live_brokers(ctx.listener)),
        cluster_authorized_operations=_cluster_operations(ctx, request),
    )


def _cluster_operations(ctx: RequestContext, request) -> int:
    if not request.include_cluster_authorized_operations:
        return AUTHORIZED_OPERATIONS_OMITTED
    if not ctx.authorize_cluster(AclOperation.DESCRIBE):
        return 0
    return ctx.authorized_operations(ResourceType.CLUSTER, CLUSTER_NAME)
