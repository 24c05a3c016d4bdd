"""ListConfigResources (key 74), v0-v1 (v0 is KIP-714's ListClientMetricsResources).

- v1 (KIP-1142) lists the resources DescribeConfigs can be asked about, of the types
  asked for (all supported types when the list is empty): every topic, internal ones
  included (TOPIC, 2), this broker (BROKER, 4, named by its node id), and every group
  that has configs of its own (GROUP, 32; whether or not the group exists, as Kafka's
  configs of groups without members). A type Kafka does not list (anything but 2, 4, 8,
  16, 32) makes the whole answer UNSUPPORTED_VERSION, as in Kafka.
- Client metrics subscriptions (16): oncelog has none, so none are listed; v0 (client
  metrics only) is always empty.
- Deviation: broker loggers (8) are accepted but not listed, since oncelog's
  DescribeConfigs has no logger resources (Kafka lists each broker).
- Authorization, as Kafka's KafkaApis, before anything else: Cluster DESCRIBE_CONFIGS,
  else CLUSTER_AUTHORIZATION_FAILED with no resources. The topics are not filtered.
"""

from __future__ import annotations

from oncelog.broker.dispatch import RequestContext, api
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode
from oncelog.security.acl import AclOperation

TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP = 2, 4, 8, 16, 32
SUPPORTED_TYPES = (TOPIC, BROKER, BROKER_LOGGER, CLIENT_METRICS, GROUP)


@api(74, "ListConfigResources", range(0, 2))
async def handle(ctx: RequestContext, request) -> object:
    make = ctx.response.make
    if not ctx.authorize_cluster(AclOperation.DESCRIBE_CONFIGS):
        return make("ListConfigResourcesResponse", throttle_time=NO_THROTTLE,
                    error_code=ErrorCode.cluster_authorization_failed, config_resources=())
    if ctx.version == 0:
        wanted = {CLIENT_METRICS}
    else:
        wanted = set(request.resource_types) or set(SUPPORTED_TYPES)
    if not wanted <= set(SUPPORTED_TYPES):
        return make("ListConfigResourcesResponse", throttle_time=NO_THROTTLE,
                    error_code=ErrorCode.unsupported_version, config_resources=())
    resources = []
    if BROKER in wanted:
        resources.append(make("ConfigResource", resource_name=str(ctx.broker.node_id), resource_type=BROKER))
    if TOPIC in wanted:
        resources.extend(make("ConfigResource", resource_name=name, resource_type=TOPIC)
                         for name in sorted(ctx.broker.logs.topics()))
    if GROUP in wanted:
        resources.extend(make("ConfigResource", resource_name=group_id, resource_type=GROUP)
                         for group_id in sorted(ctx.broker.group_configs.current().per_group))
    return make("ListConfigResourcesResponse", throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                config_resources=tuple(resources))
