"""ApiVersions (key 18), v0-v3.

- Answered from the dispatcher's registry: every API the broker handles, with exactly
  the versions it handles. The versions of KIP-890 part 2 (EndTxn v5, Produce v12,
  TxnOffsetCommit v5) are offered only with `transaction.version` finalized at 2.
- v3 carries the features: SupportedFeatures `transaction.version` 0-2 and
  `share.version` 0-1, and FinalizedFeatures each at the broker's setting of that name
  (left out at level 0, as Kafka leaves out features finalized at 0). The share group
  APIs are offered only with `share.version` at 1. Clients (the Java
  client from 4.0) use transaction version 2 only when it is finalized at 2.
  FinalizedFeaturesEpoch is the time the broker started (Kafka: the metadata offset of
  the finalized features), so a client sees a changed level after a restart.
- A request in a version newer than v3 gets a v0-format response with
  UNSUPPORTED_VERSION and the ApiVersions range, as Kafka does, so the client retries
  with a version both sides know.
- Deviation: Kafka finalizes features with `kafka-features.sh` (UpdateFeatures, the
  metadata log) and always offers the KIP-890 part 2 versions; oncelog reads the level
  from its configuration and offers those versions only at level 2, so a broker at level
  0 or 1 offers the API versions it offered before the feature existed.
"""

from __future__ import annotations

from collections.abc import Mapping

from oncelog.broker.dispatch import ApiHandler, RequestContext, api
from oncelog.config.broker import MAX_SHARE_VERSION, MAX_TRANSACTION_VERSION
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode, ResponseBuilder, encode_response

KEY = 18
TRANSACTION_VERSION_FEATURE = "transaction.version"
SHARE_VERSION_FEATURE = "share.version"


@api(KEY, "ApiVersions", range(0, 4))
async def handle(ctx: RequestContext, request) -> object:
    make = ctx.response.make
    levels = {SHARE_VERSION_FEATURE: ctx.broker.config["share.version"],
              TRANSACTION_VERSION_FEATURE: ctx.broker.config["transaction.version"]}
    fields: dict[str, object] = {}
    if ctx.response.has("ApiVersionsResponse", "supported_features"):
        fields["supported_features"] = (
            make("SupportedFeatureKey", name=SHARE_VERSION_FEATURE, min_version=0, max_version=MAX_SHARE_VERSION),
            make("SupportedFeatureKey", name=TRANSACTION_VERSION_FEATURE, min_version=0,
                 max_version=MAX_TRANSACTION_VERSION),
        )
        fields["finalized_features_epoch"] = ctx.finalized_features_epoch
        fields["finalized_features"] = tuple(
            make("FinalizedFeatureKey", name=name, max_version_level=level, min_version_level=level)
            for name, level in levels.items() if level != 0)
    return make(
        "ApiVersionsResponse",
        error_code=ErrorCode.none,
        api_keys=_api_keys(ctx.response, ctx.handlers),  # what requests dispatch to
        throttle_time=NO_THROTTLE,
        **fields,
    )


def _api_keys(builder: ResponseBuilder, registry: Mapping[int, ApiHandler]) -> tuple:
    return tuple(
        builder.make("ApiVersion", api_key=h.api_key, min_version=h.min_version, max_version=h.max_version)
        for h in sorted(registry.values(), key=lambda h: h.api_key)
    )


def unsupported_version_response(registry: dict[int, ApiHandler]) -> bytes:
    """The v0 body Kafka sends to an ApiVersions request of a version it does not know."""
    v0 = ResponseBuilder(KEY, 0)
    own = registry[KEY]
    entry = v0.make("ApiVersion", api_key=KEY, min_version=own.min_version, max_version=own.max_version)
    return encode_response(
        v0.make("ApiVersionsResponse", error_code=ErrorCode.unsupported_version, api_keys=(entry,))
    )
