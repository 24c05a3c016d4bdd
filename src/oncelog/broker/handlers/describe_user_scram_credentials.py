"""DescribeUserScramCredentials (key 50), v0 (KIP-554).

Each user's SCRAM mechanisms with their iteration counts (never salts or keys); every
user with credentials when the request names none. A named user without credentials is
RESOURCE_NOT_FOUND, one named twice DUPLICATE_RESOURCE.
"""

from __future__ import annotations

from oncelog.broker.dispatch import RequestContext, api
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode
from oncelog.security.sasl.scram import SCRAM_MECHANISM_TYPES


@api(50, "DescribeUserScramCredentials", range(0, 1))
async def handle(ctx: RequestContext, request):
    make = ctx.response.make
    users = None if request.users is None else [user.name for user in request.users]
    described = ctx.broker.scram_credentials.describe(users)
    return make("DescribeUserScramCredentialsResponse", throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                error_message=None, results=tuple(
                    make("DescribeUserScramCredentialsResult", user=each.user, error_code=ErrorCode(each.error_code),
                         error_message=each.error_message, credential_infos=tuple(
                             make("CredentialInfo", mechanism=SCRAM_MECHANISM_TYPES[mechanism], iterations=iterations)
                             for mechanism, iterations in each.credentials))
                    for each in described))
