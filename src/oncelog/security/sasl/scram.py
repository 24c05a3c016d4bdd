"""SASL/SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802, RFC 7677), server side, and the
credentials it checks: what Kafka's ScramSaslServer, ScramMessages and ScramFormatter do.

The exchange (no channel binding: the gs2 header is "n,," or "n,a=<authzid>,"):

    client-first  n,,n=<saslname>,r=<client nonce>[,<ext>=<value>…]
    server-first  r=<client nonce><server nonce>,s=<base64 salt>,i=<iterations>
    client-final  c=<base64 gs2 header, "biws">,r=<both nonces>,p=<base64 ClientProof>
    server-final  v=<base64 ServerSignature>

    SaltedPassword = PBKDF2-HMAC(password, salt, iterations)
    ClientKey = HMAC(SaltedPassword, "Client Key")    StoredKey = H(ClientKey)
    ServerKey = HMAC(SaltedPassword, "Server Key")
    AuthMessage = client-first-bare "," server-first "," client-final-without-proof
    ClientProof = ClientKey XOR HMAC(StoredKey, AuthMessage)
    ServerSignature = HMAC(ServerKey, AuthMessage)

The server keeps only (salt, StoredKey, ServerKey, iterations): `ScramCredential`.

Deviations from Kafka, all stricter or safer:
- An unknown user (or one whose credential has too few iterations) gets the server-first
  message of a user stored with the default parameters, and fails only after the
  client-final message, with the same message as a wrong password: the exchange does not
  tell whether the user exists. Kafka fails such a user at the client-first message. The
  default parameters are Kafka's (ScramFormatter, UserScramCredentialUpsertion): 4096
  iterations and a salt that is a 130-bit random number in base 36, as ASCII (up to 26
  bytes, most often 25 or 26), which `oncelog configs`, kafka-configs.sh and the Java
  AdminClient store. The unknown user's salt has that form, derived with HMAC-SHA-256
  from the broker's secret (`fake_salt_key`, kept across restarts:
  `scram_credentials.load_fake_salt_key`) and the mechanism and name, so it is the same
  on every attempt, as a stored salt is. A credential stored with other parameters
  (more iterations; librdkafka's AdminClient, given no salt, makes 64 random bytes) is
  told from an unknown user by its server-first message, as it is from other stored ones.
- The client-final nonce must equal the combined nonce (as Kafka 4; Kafka 3.8.1-3.9 only
  checked that it ended with the server's, which librdkafka before 2.6.1 relied on: its
  kcat 1.7.1 build fails SCRAM here, as with Kafka 4),
  the channel binding must be the client-first's gs2 header (Kafka does not check it),
  and the AuthMessage is built from the messages as received (Kafka re-serializes them,
  dropping client-final extensions).
- "tokenauth=true" (delegation tokens) is refused; other extensions are ignored, as Kafka.
- A mandatory extension (`m=`) is refused, as RFC 5802 requires.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

from oncelog.security.sasl.mechanism import (
    IllegalSaslStateError,
    SaslAuthenticationError,
    invalid_credentials_message,
)

SCRAM_SHA_256 = "SCRAM-SHA-256"
SCRAM_SHA_512 = "SCRAM-SHA-512"
SCRAM_MECHANISMS = (SCRAM_SHA_256, SCRAM_SHA_512)
_HASHES = {SCRAM_SHA_256: "sha256", SCRAM_SHA_512: "sha512"}
# The int8 `mechanism` of DescribeUserScramCredentials and AlterUserScramCredentials.
SCRAM_MECHANISM_TYPES = {SCRAM_SHA_256: 1, SCRAM_SHA_512: 2}
UNKNOWN_MECHANISM = "UNKNOWN"  # type 0, or any type this broker does not know

MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384
DEFAULT_ITERATIONS = 4096  # kafka-configs' default

_PRINTABLE_NONCE = re.compile(r"[\x21-\x2b\x2d-\x7e]+")  # printable ASCII but ","
_EXTENSION = re.compile(r"([A-Za-z]+)=([^,]+)")
_BASE36 = "0123456789abcdefghijklmnopqrstuvwxyz"
_TOKEN_AUTH_EXTENSION = "tokenauth"

# Derives the salts shown for unknown users, so that one name always gets the same salt
# (a salt that changed between attempts would tell that the user does not exist). Only
# for servers made without the broker's own key, which lasts across restarts.
_PROCESS_FAKE_SALT_KEY = secrets.token_bytes(32)


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What the server stores for one user and mechanism; never the password."""

    salt: bytes = field(repr=False)
    stored_key: bytes = field(repr=False)
    server_key: bytes = field(repr=False)
    iterations: int


def scram_mechanism_name(mechanism_type: int) -> str:
    """The mechanism of a wire `mechanism` int8; UNKNOWN_MECHANISM for any other value."""
    for name, known_type in SCRAM_MECHANISM_TYPES.items():
        if known_type == mechanism_type:
            return name
    return UNKNOWN_MECHANISM


def _hash_name(mechanism: str) -> str:
    try:
        return _HASHES[mechanism]
    except KeyError:
        raise ValueError(f"not a SCRAM mechanism: {mechanism!r} (supported: {', '.join(SCRAM_MECHANISMS)})") from None


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """SaltedPassword = Hi(password, salt, i), the PBKDF2-HMAC of the password's UTF-8
    bytes (Kafka applies no SASLprep). A client's computation: tests and the CLI use it
    to build what AlterUserScramCredentials sends."""
    return hashlib.pbkdf2_hmac(_hash_name(mechanism), password.encode("utf-8"), salt, iterations)


def scram_credential_from_salted_password(mechanism: str, salt: bytes, salted_password: bytes,
                                          iterations: int) -> ScramCredential:
    """The stored credential for an AlterUserScramCredentials upsertion (salt and
    SaltedPassword): StoredKey and ServerKey derived, SaltedPassword dropped."""
    hash_name = _hash_name(mechanism)
    client_key = hmac.digest(salted_password, b"Client Key", hash_name)
    return ScramCredential(
        salt=salt,
        stored_key=hashlib.new(hash_name, client_key).digest(),
        server_key=hmac.digest(salted_password, b"Server Key", hash_name),
        iterations=iterations,
    )


def scram_credential_from_password(mechanism: str, password: str, iterations: int = DEFAULT_ITERATIONS,
                                   salt: bytes | None = None) -> ScramCredential:
    """A credential for `password`, with a fresh random salt unless one is given."""
    if salt is None:
        salt = random_salt()
    salted = salted_password(mechanism, password, salt, iterations)
    return scram_credential_from_salted_password(mechanism, salt, salted, iterations)


def _base36(number: int) -> str:
    digits = []
    while number:
        number, digit = divmod(number, 36)
        digits.append(_BASE36[digit])
    return "".join(reversed(digits)) or "0"


SALT_BITS = 130  # Kafka's ScramFormatter.secureRandomString: new BigInteger(130, random), base 36


def random_salt() -> bytes:
    """A salt as Kafka's tools make it (a 130-bit random number in base 36, as ASCII), the
    form the salts shown to unknown users have."""
    return _base36(secrets.randbits(SALT_BITS)).encode("ascii")


def new_server_nonce() -> str:
    """A server nonce as Kafka makes it: a 130-bit random number in base 36."""
    return _base36(secrets.randbits(130))


def encode_sasl_name(user: str) -> str:
    """The `saslname` spelling of a user name: "=" as "=3D", "," as "=2C"."""
    return user.replace("=", "=3D").replace(",", "=2C")


def decode_sasl_name(sasl_name: str) -> str:
    """The user name of a `saslname`; ValueError for an "=" not starting =2C or =3D."""
    if not sasl_name or "\x00" in sasl_name:
        raise ValueError("empty name or NUL in name")
    pieces = sasl_name.split("=")
    decoded = [pieces[0]]
    for piece in pieces[1:]:
        if piece.startswith("2C"):
            decoded.append("," + piece[2:])
        elif piece.startswith("3D"):
            decoded.append("=" + piece[2:])
        else:
            raise ValueError("'=' in a name must start =2C or =3D")
    return "".join(decoded)


def _b64decode(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except binascii.Error:
        raise ValueError("not base64") from None


class _Malformed(ValueError):
    """A message that does not follow RFC 5802; the text says what, never a secret."""


class _State(Enum):
    RECEIVE_CLIENT_FIRST_MESSAGE = "receive client-first message"
    RECEIVE_CLIENT_FINAL_MESSAGE = "receive client-final message"
    COMPLETE = "complete"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class _ClientFirst:
    gs2_header: str
    bare: str  # client-first-message-bare, as received
    user: str
    nonce: str
    extensions: dict[str, str]


class ScramSaslServer:
    """One SCRAM exchange. `lookup(user, mechanism)` gives the stored credential or None;
    `nonce` makes the server nonce (tests inject RFC test vectors' nonces);
    `fake_salt_key` derives the salts shown for unknown users: the broker passes its own,
    which outlives restarts (brokers of one cluster should share it, so that they all show
    an unknown user the same salt, as they show a stored user's)."""

    def __init__(self, mechanism: str, lookup: Callable[[str, str], ScramCredential | None], *,
                 nonce: Callable[[], str] = new_server_nonce, fake_salt_key: bytes = _PROCESS_FAKE_SALT_KEY) -> None:
        self._hash_name = _hash_name(mechanism)
        self.mechanism = mechanism
        self.session_lifetime_ms: int | None = None
        self._lookup = lookup
        self._new_nonce = nonce
        self._fake_salt_key = fake_salt_key
        self._state = _State.RECEIVE_CLIENT_FIRST_MESSAGE
        self._user: str | None = None
        self._client_first: _ClientFirst | None = None
        self._server_first = ""
        self._combined_nonce = ""
        self._credential: ScramCredential | None = None
        self._user_known = False

    @property
    def complete(self) -> bool:
        return self._state is _State.COMPLETE

    @property
    def principal(self) -> str:
        if self._state is not _State.COMPLETE or self._user is None:
            raise RuntimeError(f"SASL/{self.mechanism} authentication has not completed")
        return f"User:{self._user}"

    def evaluate(self, token: bytes) -> bytes:
        try:
            if self._state is _State.RECEIVE_CLIENT_FIRST_MESSAGE:
                return self._receive_client_first(token)
            if self._state is _State.RECEIVE_CLIENT_FINAL_MESSAGE:
                return self._receive_client_final(token)
        except _Malformed as malformed:
            self._fail()
            raise SaslAuthenticationError(invalid_credentials_message(self.mechanism),
                                          log_detail=f"malformed SCRAM message: {malformed}") from None
        except SaslAuthenticationError:
            self._fail()
            raise
        raise IllegalSaslStateError(f"Unexpected SASL/{self.mechanism} token in state {self._state.value}")

    def _fail(self) -> None:
        self._state = _State.FAILED
        self._credential = None

    def _receive_client_first(self, token: bytes) -> bytes:
        client_first = _parse_client_first(token)
        if client_first.extensions.get(_TOKEN_AUTH_EXTENSION, "").lower() == "true":
            raise SaslAuthenticationError(invalid_credentials_message(self.mechanism),
                                          log_detail="delegation token authentication is not supported")
        credential = self._lookup(client_first.user, self.mechanism)
        self._user_known = credential is not None and credential.iterations >= MIN_ITERATIONS
        if credential is None or not self._user_known:
            credential = self._fake_credential(client_first.user)
        server_nonce = self._new_nonce()
        if not _PRINTABLE_NONCE.fullmatch(server_nonce):
            raise RuntimeError("the server nonce must be printable ASCII without ','")
        self._client_first = client_first
        self._credential = credential
        self._combined_nonce = client_first.nonce + server_nonce
        self._server_first = (f"r={self._combined_nonce},s={base64.b64encode(credential.salt).decode()},"
                              f"i={credential.iterations}")
        self._state = _State.RECEIVE_CLIENT_FINAL_MESSAGE
        return self._server_first.encode()

    def _fake_credential(self, user: str) -> ScramCredential:
        digest = hmac.digest(self._fake_salt_key, f"{self.mechanism}\x00{user}".encode(), "sha256")
        # 130 of its bits, uniform as random_salt's, so the salt's length varies as a stored one's
        salt = _base36(int.from_bytes(digest, "big") >> (len(digest) * 8 - SALT_BITS)).encode("ascii")
        size = hashlib.new(self._hash_name).digest_size
        return ScramCredential(salt=salt, stored_key=secrets.token_bytes(size), server_key=secrets.token_bytes(size),
                               iterations=DEFAULT_ITERATIONS)

    def _receive_client_final(self, token: bytes) -> bytes:
        assert self._client_first is not None and self._credential is not None
        text = _decode(token, "client-final")
        fields = text.split(",")
        if len(fields) < 3 or not fields[0].startswith("c=") or not fields[1].startswith("r=") \
                or not fields[-1].startswith("p="):
            raise _Malformed("client-final message is not c=…,r=…[,extensions],p=…")
        for extension in fields[2:-1]:
            if not _EXTENSION.fullmatch(extension):
                raise _Malformed("client-final extension is not <letters>=<value>")
        try:
            channel_binding = _b64decode(fields[0][2:])
            proof = _b64decode(fields[-1][2:])
        except ValueError:
            raise _Malformed("client-final channel binding or proof is not base64") from None
        if channel_binding != self._client_first.gs2_header.encode():
            raise _Malformed("channel binding does not repeat the client-first gs2 header")
        if fields[1][2:] != self._combined_nonce:
            raise _Malformed("client-final nonce is not the server-first nonce")
        credential = self._credential
        if len(proof) != len(credential.stored_key):
            raise _Malformed("client proof has the wrong length")
        without_proof = text[: len(text) - len(fields[-1]) - 1]
        auth_message = f"{self._client_first.bare},{self._server_first},{without_proof}".encode()
        client_signature = hmac.digest(credential.stored_key, auth_message, self._hash_name)
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature, strict=True))
        proof_valid = hmac.compare_digest(hashlib.new(self._hash_name, client_key).digest(), credential.stored_key)
        if not (proof_valid and self._user_known):
            raise SaslAuthenticationError(
                invalid_credentials_message(self.mechanism),
                log_detail=f"invalid client proof for user {self._client_first.user!r}" if self._user_known
                else f"unknown user {self._client_first.user!r} (or a credential with too few iterations)")
        server_signature = hmac.digest(credential.server_key, auth_message, self._hash_name)
        self._user = self._client_first.user
        self._state = _State.COMPLETE
        self._credential = None
        return b"v=" + base64.b64encode(server_signature)


def _decode(token: bytes, what: str) -> str:
    try:
        return token.decode("utf-8")
    except UnicodeDecodeError:
        raise _Malformed(f"{what} message is not UTF-8") from None


def _parse_client_first(token: bytes) -> _ClientFirst:
    text = _decode(token, "client-first")
    if text.startswith(("p=", "y,")):
        raise _Malformed("channel binding is not supported (the gs2 header must start 'n,')")
    if not text.startswith("n,"):
        raise _Malformed("client-first message does not start with a gs2 header 'n,'")
    header_end = text.find(",", 2)
    if header_end < 0:
        raise _Malformed("client-first gs2 header is not terminated")
    authorization_field = text[2:header_end]
    gs2_header, bare = text[: header_end + 1], text[header_end + 1:]
    fields = bare.split(",")
    if fields[0].startswith("m="):
        raise _Malformed("mandatory extensions are not supported")
    if len(fields) < 2 or not fields[0].startswith("n=") or not fields[1].startswith("r="):
        raise _Malformed("client-first message is not n=…,r=…[,extensions]")
    if authorization_field and not authorization_field.startswith("a="):
        raise _Malformed("client-first gs2 header has something other than a=<authzid>")
    try:
        user = decode_sasl_name(fields[0][2:])
        authorization_id = decode_sasl_name(authorization_field[2:]) if authorization_field else ""
    except ValueError as error:
        raise _Malformed(f"client-first user or authorization id: {error}") from None
    nonce = fields[1][2:]
    if not _PRINTABLE_NONCE.fullmatch(nonce):
        raise _Malformed("client nonce is empty or not printable ASCII")
    extensions: dict[str, str] = {}
    for extension in fields[2:]:
        match = _EXTENSION.fullmatch(extension)
        if match is None:
            raise _Malformed("client-first extension is not <letters>=<value>")
        extensions[match[1]] = match[2]
    if authorization_id and authorization_id != user:
        raise SaslAuthenticationError(
            "Authentication failed: Client requested an authorization id that is different from username")
    return _ClientFirst(gs2_header=gs2_header, bare=bare, user=user, nonce=nonce, extensions=extensions)
