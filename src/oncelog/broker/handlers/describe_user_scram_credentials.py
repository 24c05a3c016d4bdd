"""DescribeUserScramCredentials (key 50), v0 (KIP-554).

Each user's SCRAM mechanisms with their iteration counts (never salts or keys); every
user with credentials when the request names none. A named user without credentials is
RESOURCE_NOT_FOUND, one named twice DUPLICATE_RESOURCE.

Needs Cluster DESCRIBE: else the top-level error is CLUSTER_AUTHORIZATION_FAILED, with
one result carrying it per user named (with no user name, as Kafka's error response).
"""

from __future__ import annotations

from oncelog.broker.dispatch import RequestContext, api
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode
from oncelog.security.acl import AclOperation
from oncelog.security.sasl.scram import SCRAM_MECHANISM_TYPES


@api(50, "DescribeUserScramCredentials", range(0, 1))
async def handle(ctx: RequestContext, request):
    make = ctx.response.make
    if not ctx.authorize_cluster(AclOperation.DESCRIBE):
        refused, message = ErrorCode.cluster_authorization_failed, "Cluster authorization failed."
        result = make("DescribeUserScramCredentialsResult", user="", error_code=refused, error_message=message,
                      credential_infos=())
        return make("DescribeUserScramCredentialsResponse", throttle_time=NO_THROTTLE, error_code=refused,
                    error_message=message, results=(result,) * len(request.users or ()))
    users = None if request.users is None else [user.name async for user in ctx.paced(request.users)]
    described = await ctx.broker.scram_credentials.describe_paced(users, ctx.pace)
    return make("DescribeUserScramCredentialsResponse", throttle_time=NO_THROTTLE, error_code=ErrorCode.none,
                error_message=None, results=tuple([
                    make("DescribeUserScramCredentialsResult", user=each.user, error_code=ErrorCode(each.error_code),
                         error_message=each.error_message, credential_infos=tuple(
                             make("CredentialInfo", mechanism=SCRAM_MECHANISM_TYPES[mechanism], iterations=iterations)
                             for mechanism, iterations in each.credentials))
                    async for each in ctx.paced(described)]))
