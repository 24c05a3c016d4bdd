"""ApiVersions (key 18), v0-v3.

- Answered from the dispatcher's registry: every API the broker handles, with exactly
  the versions it handles.
- A request in a version newer than v3 gets a v0-format response with
  UNSUPPORTED_VERSION and the ApiVersions range, as Kafka does, so the client retries
  with a version both sides know.
- No feature flags are advertised (no `transaction.version`, so clients use the
  KIP-890 part 1 protocol at most).
"""

from __future__ import annotations

from oncelog.broker.dispatch import REGISTRY, ApiHandler, RequestContext, api
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode, ResponseBuilder, encode_response

KEY = 18


@api(KEY, "ApiVersions", range(0, 4))
async def handle(ctx: RequestContext, request) -> object:
    return ctx.response.make(
        "ApiVersionsResponse",
        error_code=ErrorCode.none,
        api_keys=_api_keys(ctx.response, REGISTRY),
        throttle_time=NO_THROTTLE,
    )


def _api_keys(builder: ResponseBuilder, registry: dict[int, ApiHandler]) -> tuple:
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
