"""Metadata for topics that do not exist: an illegal name is INVALID_TOPIC_EXCEPTION (with
auto-creation on or off, as Kafka answers), a legal one is created or
UNKNOWN_TOPIC_OR_PARTITION."""

from __future__ import annotations

import uuid

import pytest
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v4 import request as metadata_v4
from kio.schema.metadata.v12 import request as metadata_v12
from kio.schema.types import TopicName

from oncelog import EmbeddedBroker
from oncelog.protocol.client import WireClient

ILLEGAL_NAMES = ["bad name", "slash/topic", "x" * 250, "..", "ünïcode"]


def metadata(bootstrap: str, names: list[str], *, allow_auto_create: bool = True, version=metadata_v12):
    with WireClient.connect(bootstrap) as client:
        request: metadata_v12.MetadataRequest | metadata_v4.MetadataRequest
        if version is metadata_v12:
            request = metadata_v12.MetadataRequest(
                topics=tuple(metadata_v12.MetadataRequestTopic(topic_id=None, name=TopicName(name)) for name in names),
                allow_auto_topic_creation=allow_auto_create, include_topic_authorized_operations=False)
        else:
            request = metadata_v4.MetadataRequest(
                topics=tuple(metadata_v4.MetadataRequestTopic(name=TopicName(name)) for name in names),
                allow_auto_topic_creation=allow_auto_create)
        return {t.name: t for t in client.request(request).topics}


@pytest.fixture(scope="module")
def no_auto_create(tmp_path_factory):
    with EmbeddedBroker(tmp_path_factory.mktemp("no-auto"), {"auto.create.topics.enable": "false"}) as broker:
        yield broker


@pytest.mark.parametrize("name", ILLEGAL_NAMES, ids=["space", "slash", "too-long", "dot-dot", "non-ascii"])
def test_illegal_name_with_auto_create_off_is_invalid_topic_exception(no_auto_create, name):
    answer = metadata(no_auto_create.bootstrap_servers, [name])[name]
    assert (answer.error_code, answer.partitions) == (ErrorCode.invalid_topic_exception, ())


@pytest.mark.parametrize("name", ILLEGAL_NAMES, ids=["space", "slash", "too-long", "dot-dot", "non-ascii"])
def test_illegal_name_with_auto_create_on_is_invalid_topic_exception(shared_broker, name):
    answer = metadata(shared_broker.bootstrap_servers, [name])[name]
    assert (answer.error_code, answer.partitions) == (ErrorCode.invalid_topic_exception, ())


def test_illegal_name_when_the_request_forbids_auto_create_is_invalid_topic_exception(shared_broker):
    answers = metadata(shared_broker.bootstrap_servers, ["bad name"], allow_auto_create=False, version=metadata_v4)
    assert answers["bad name"].error_code == ErrorCode.invalid_topic_exception


def test_missing_legal_name_is_unknown_or_created_next_to_an_illegal_one(no_auto_create, shared_broker):
    name = f"legal-{uuid.uuid4().hex[:8]}"
    answers = metadata(no_auto_create.bootstrap_servers, [name, "bad name"])
    assert answers[name].error_code == ErrorCode.unknown_topic_or_partition
    assert answers["bad name"].error_code == ErrorCode.invalid_topic_exception
    created = metadata(shared_broker.bootstrap_servers, [name, "bad name"])
    assert (created[name].error_code, len(created[name].partitions)) == (ErrorCode.none, 1)
    assert created["bad name"].error_code == ErrorCode.invalid_topic_exception
