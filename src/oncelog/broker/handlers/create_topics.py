"""CreateTopics (key 19), v2-v7.

- num_partitions / replication_factor -1 take `num.partitions` /
  `default.replication.factor`. Standalone, explicit replica assignments are accepted
  when every replica is this broker.
- Cluster mode: the topic is written to the cluster metadata with Kafka's replica
  placement over the registered brokers (or the explicit assignment, checked against
  them); the answer comes once this broker's metadata has it.
- Topic configs use Kafka's topic keys (`max.message.bytes`, `segment.bytes`,
  `retention.ms`, `cleanup.policy`, ...); an unknown key or bad value is INVALID_CONFIG.
- More than 10,000 partitions in one request is POLICY_VIOLATION, as in Kafka.
- Errors per topic: TOPIC_ALREADY_EXISTS, INVALID_TOPIC_EXCEPTION, INVALID_PARTITIONS,
  INVALID_REPLICATION_FACTOR (above the number of brokers), INVALID_CONFIG,
  INVALID_REQUEST for a name given twice.
- v5+ returns the topic's partition count, replication factor and effective configs.
- `validate_only` checks everything and creates nothing.
- Authorization, as Kafka's controller (ControllerApis.createTopics): Cluster CREATE
  allows every topic, else each topic needs Topic CREATE (TOPIC_AUTHORIZATION_FAILED,
  "Authorization failed.", after the duplicate check). A topic created without Topic
  DESCRIBE_CONFIGS is answered with no configs, partition count and replication factor
  -1 and `topic_config_error_code` TOPIC_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from oncelog.broker.dispatch import RequestContext, api
from oncelog.kernel.node import TopicCreation
from oncelog.kernel.topics import TopicRequestError
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode
from oncelog.security.acl import AclOperation, ResourceType
from oncelog.storage.config import TOPIC_CONFIGS

CONFIG_SOURCE_TOPIC = 1
CONFIG_SOURCE_DEFAULT = 5


@api(19, "CreateTopics", range(2, 8))
async def handle(ctx: RequestContext, request) -> object:
    make = ctx.response.make
    named: set[str] = set()
    duplicated: set[str] = set()  # named more than once
    async for topic in ctx.paced(request.topics):
        if topic.name in named:
            duplicated.add(topic.name)
        named.add(topic.name)
    may_create_any = ctx.authorize_cluster(AclOperation.CREATE)
    has_configs = ctx.response.has("CreatableTopicConfigs")  # v5+
    # Each topic's request checks first; the valid ones are then created together.
    outcomes: list[TopicCreation | TopicRequestError] = []
    for topic in request.topics:
        await ctx.pace()
        try:
            outcomes.append(await _creation(ctx, topic, duplicated, may_create_any))
        except TopicRequestError as error:
            outcomes.append(error)
    creations = [outcome for outcome in outcomes if isinstance(outcome, TopicCreation)]
    created = iter(await ctx.broker.topics.create_topics(creations, validate_only=request.validate_only,
                                                          pace=ctx.pace))
    results = []
    for topic, outcome in zip(request.topics, outcomes, strict=True):
        await ctx.pace()
        info = next(created) if isinstance(outcome, TopicCreation) else outcome
        if isinstance(info, TopicRequestError):
            results.append(
                make(
                    "CreatableTopicResult", name=topic.name, topic_id=None, error_code=info.code,
                    error_message=str(info), num_partitions=-1, replication_factor=-1, configs=None,
                )
            )
            continue
        assert isinstance(outcome, TopicCreation)
        replication_factor = outcome.replication_factor
        if replication_factor == -1:
            replication_factor = ctx.broker.config["default.replication.factor"]
        topic_id = None if request.validate_only else info.topic_id
        if not ctx.authorize(AclOperation.DESCRIBE_CONFIGS, ResourceType.TOPIC, topic.name):
            results.append(make(
                "CreatableTopicResult", name=topic.name, topic_id=topic_id, error_code=ErrorCode.none,
                error_message=None, topic_config_error_code=ErrorCode.topic_authorization_failed,
                num_partitions=-1, replication_factor=-1, configs=() if has_configs else None,
            ))
            continue
        results.append(
            make(
                "CreatableTopicResult",
                name=topic.name,
                topic_id=topic_id,
                error_code=ErrorCode.none,
                error_message=None,
                num_partitions=info.num_partitions,
                replication_factor=replication_factor,
                configs=_configs(make, info) if has_configs else None,
            )
        )
    return make("CreateTopicsResponse", throttle_time=NO_THROTTLE, topics=tuple(results))


async def _creation(ctx: RequestContext, topic, duplicated: set[str], may_create_any: bool) -> TopicCreation:
    """The topic as the topic admin creates it, once the request's own checks pass."""
    if topic.name in duplicated:
        raise TopicRequestError(ErrorCode.invalid_request,
                                f"Create topics request contains duplicate topic {topic.name}")
    if not (may_create_any or ctx.authorize(AclOperation.CREATE, ResourceType.TOPIC, topic.name)):
        raise TopicRequestError(ErrorCode.topic_authorization_failed, "Authorization failed.")
    replication_factor, num_partitions = topic.replication_factor, topic.num_partitions
    assignment = None
    if topic.assignments:
        replication_factor, num_partitions, assignment = await _from_assignments(ctx, topic)
    return TopicCreation(topic.name, num_partitions, replication_factor, await _configs_asked(ctx, topic), assignment)


async def _from_assignments(ctx: RequestContext, topic) -> tuple[int, int, list[list[int]] | None]:
    if topic.num_partitions != -1 or topic.replication_factor != -1:
        raise TopicRequestError(
            ErrorCode.invalid_request,
            "Both numPartitions or replicationFactor and replicasAssignments were set. "
            "Both cannot be used at the same time.",
        )
    # The partition indexes must be 0..n-1, each once: each assignment is put in its place.
    count = len(topic.assignments)
    by_index: list = [None] * count
    async for assignment in ctx.paced(topic.assignments):
        index = assignment.partition_index
        if not 0 <= index < count or by_index[index] is not None:
            raise TopicRequestError(
                ErrorCode.invalid_replica_assignment, "Partitions must be numbered 0..n-1 without gaps."
            )
        by_index[index] = assignment
    # Checked against the brokers that may hold replicas by the topic admin.
    return len(by_index[0].broker_ids), count, [list(a.broker_ids) async for a in ctx.paced(by_index)]


async def _configs_asked(ctx: RequestContext, topic) -> dict[str, str]:
    """The topic's configs as the topic admin reads them (a key named twice has its last
    value), without those that cannot change its answer: keys with a null value, which
    it skips, and every key after the first unknown one, where it stops (INVALID_CONFIG
    naming that key). A million configs then cost the admin no more than forty."""
    named: dict[str, str | None] = {}
    async for config in ctx.paced(topic.configs):
        named[config.name] = config.value
    configs: dict[str, str] = {}
    async for key, value in ctx.paced(named.items()):
        if value is None:
            continue
        configs[key] = value
        if key not in TOPIC_CONFIGS:
            break
    return configs


def _configs(make, info) -> tuple:
    overrides = info.config_overrides
    return tuple(
        make(
            "CreatableTopicConfigs",
            name=key,
            value=value,
            read_only=False,
            config_source=CONFIG_SOURCE_TOPIC if key in overrides else CONFIG_SOURCE_DEFAULT,
            is_sensitive=False,
        )
        for key, value in sorted(info.config.to_kafka_dict().items())
    )
