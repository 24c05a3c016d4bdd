"""AlterUserScramCredentials (key 51), v0 (KIP-554).

Creates, replaces and deletes users' SCRAM-SHA-256 and SCRAM-SHA-512 credentials. The
client sends the salt and the salted password, never the password; the broker keeps
the salt, StoredKey and ServerKey (oncelog.security.scram_credentials), durably, before
it answers. Each user gets its own result: UNSUPPORTED_SASL_MECHANISM,
UNACCEPTABLE_CREDENTIAL (iterations outside 4096-16384, an empty name), RESOURCE_NOT_FOUND
(deleting what does not exist), DUPLICATE_RESOURCE (a user twice in one request).

Needs Cluster ALTER (Kafka's controller): else each user named, once, in name order,
gets CLUSTER_AUTHORIZATION_FAILED, and nothing changes.
"""

from __future__ import annotations

import logging

from oncelog.broker.dispatch import RequestContext, api
from oncelog.pacing import sorted_paced
from oncelog.protocol.messages import NO_THROTTLE, ErrorCode
from oncelog.security.acl import AclOperation
from oncelog.security.sasl.scram import scram_mechanism_name
from oncelog.storage.errors import StorageError

log = logging.getLogger("oncelog.security")


@api(51, "AlterUserScramCredentials", range(0, 1))
async def handle(ctx: RequestContext, request):
    make = ctx.response.make
    if not ctx.authorize_cluster(AclOperation.ALTER):
        named = {d.name async for d in ctx.paced(request.deletions)}
        named |= {u.name async for u in ctx.paced(request.upsertions)}
        return make("AlterUserScramCredentialsResponse", throttle_time=NO_THROTTLE, results=tuple([
            make("AlterUserScramCredentialsResult", user=user, error_code=ErrorCode.cluster_authorization_failed,
                 error_message="Cluster authorization failed.")
            async for user in ctx.paced(await sorted_paced(named, ctx.pace))]))
    deletions = [(d.name, scram_mechanism_name(d.mechanism)) async for d in ctx.paced(request.deletions)]
    upsertions = [(u.name, scram_mechanism_name(u.mechanism), u.iterations, bytes(u.salt), bytes(u.salted_password))
                  async for u in ctx.paced(request.upsertions)]
    try:
        results = await ctx.broker.scram_credentials.store_alteration(deletions, upsertions, pace=ctx.pace)
    except StorageError as error:
        log.error("AlterUserScramCredentials not stored: %s", error)
        users = dict.fromkeys([name for name, *_ in deletions] + [name for name, *_ in upsertions])
        results = dict.fromkeys(users, (ErrorCode.kafka_storage_error, "the credentials could not be stored"))
    else:
        changed = [user async for user, (code, _message) in ctx.paced(results.items()) if code == ErrorCode.none]
        if changed:
            log.info("%s altered the SCRAM credentials of %s", ctx.principal, ", ".join(changed))
    return make("AlterUserScramCredentialsResponse", throttle_time=NO_THROTTLE, results=tuple([
        make("AlterUserScramCredentialsResult", user=user, error_code=ErrorCode(code), error_message=message)
        async for user, (code, message) in ctx.paced(results.items())]))
