"""Checking a user's password outside SASL (the web console's sign-in): against the
user's SCRAM credentials (either mechanism: the salted password derived again from the
stored salt and iterations must give the stored key) or against a listener's PLAIN users.
Comparisons are constant-time; a password is never kept or logged."""

from __future__ import annotations

import hmac
from collections.abc import Callable, Iterable, Mapping

from oncelog.security.sasl.scram import SCRAM_MECHANISMS, ScramCredential, scram_credential_from_salted_password
from oncelog.security.sasl.scram import salted_password as derive_salted_password

ScramLookup = Callable[[str, str], "ScramCredential | None"]


def password_matches(user: str, password: str, *, scram_lookup: ScramLookup,
                     plain_users: Iterable[Mapping[str, str]] = ()) -> bool:
    """Whether `password` is `user`'s: a SCRAM credential of the user (SHA-512 first)
    or the PLAIN users of some listener."""
    for mechanism in sorted(SCRAM_MECHANISMS, reverse=True):
        credential = scram_lookup(user, mechanism)
        if credential is None:
            continue
        derived = scram_credential_from_salted_password(
            mechanism, credential.salt,
            derive_salted_password(mechanism, password, credential.salt, credential.iterations),
            credential.iterations)
        return hmac.compare_digest(derived.stored_key, credential.stored_key)
    for users in plain_users:
        expected = users.get(user)
        if expected is not None:
            return hmac.compare_digest(expected.encode(), password.encode())
    return False
