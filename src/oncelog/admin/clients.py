"""Client plumbing shared by the admin commands: connection options, client properties,
and librdkafka errors turned into one-line messages.

Every command takes the same connection options as Kafka's tools:
`--bootstrap-server` (default `$ONCELOG_BOOTSTRAP`, else `localhost:9092`),
`--command-config FILE` (a Java-style properties file of client properties) and
`-X key=value` (one librdkafka/Kafka client property, repeatable; wins over the file).
"""

from __future__ import annotations

import argparse
import logging
import os
import time
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaError, KafkaException

from oncelog.client.wire import (
    DEFAULT_REQUEST_TIMEOUT_MS,
    LIBRDKAFKA_ONLY_TLS_SETTINGS,
    Cluster,
    WireSettings,
    check_security,
)
from oncelog.errors import CommandError

DEFAULT_BOOTSTRAP = "localhost:9092"

# Kafka's `Topic.INTERNAL_TOPICS`: librdkafka's metadata does not expose the
# is_internal flag, and these are the only topics Kafka itself marks internal.

# How long a command waits for the cluster before giving up with a one-line error,
# and how long it keeps retrying a bootstrap server that refuses connections.
CONNECT_TIMEOUT_S = 15.0
UNREACHABLE_GRACE_S = 5.0


def add_connection_arguments(parser: argparse.ArgumentParser, *, aliases: tuple[str, ...] = ()) -> None:
    parser.add_argument(
        "--bootstrap-server", *aliases, dest="bootstrap_server",
        metavar="HOST:PORT[,HOST:PORT]",
        help="broker(s) to connect to (default: bootstrap.servers from -X or "
        f"--command-config, else $ONCELOG_BOOTSTRAP, else {DEFAULT_BOOTSTRAP})",
    )
    parser.add_argument(
        "--command-config",
        metavar="FILE",
        help="properties file with extra client properties (key=value per line)",
    )
    parser.add_argument(
        "-X",
        dest="client_properties",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra client property, repeatable; overrides --command-config",
    )


def parse_key_value(text: str, option: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise CommandError(f"{option} expects KEY=VALUE, got {text!r}")
    return key.strip(), value


def read_properties_file(path: str | os.PathLike[str]) -> dict[str, str]:
    """Read a Java `.properties` file: `key=value` or `key: value`, `#`/`!` comments,
    backslash line continuations. Enough for client and server configs."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise CommandError(f"cannot read properties file {str(path)!r}: {error.strerror}") from None
    except UnicodeDecodeError as error:
        line_number = Path(path).read_bytes()[: error.start].count(b"\n") + 1
        raise CommandError(f"{path}:{line_number}: not UTF-8 text (byte 0x{error.object[error.start]:02x}); "
                           "save the file as UTF-8") from None
    properties: dict[str, str] = {}
    pending = ""
    for raw_line in text.splitlines():
        line = pending + raw_line.strip()
        pending = ""
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending = line[:-1]
            continue
        if not line or line[0] in "#!":
            continue
        positions = [p for p in (line.find("="), line.find(":")) if p >= 0]
        if not positions:
            properties[line] = ""
            continue
        split_at = min(positions)
        properties[line[:split_at].strip()] = line[split_at + 1 :].strip()
    if pending:
        key, _, value = pending.partition("=")
        properties[key.strip()] = value.strip()
    return properties


def user_properties(args: argparse.Namespace) -> dict[str, str]:
    """The client properties the user gave: `--command-config`, then `-X` over it."""
    properties: dict[str, str] = {}
    if args.command_config:
        properties.update(read_properties_file(args.command_config))
    for item in args.client_properties:
        key, value = parse_key_value(item, "-X")
        properties[key] = value
    return properties


def client_config(args: argparse.Namespace, **defaults: Any) -> dict[str, Any]:
    """Client properties for one command, lowest precedence first: the command's own
    defaults, `$ONCELOG_BOOTSTRAP` (or localhost:9092), `--command-config`, `-X`, and
    `--bootstrap-server`."""
    config: dict[str, Any] = dict(defaults)
    config["bootstrap.servers"] = os.environ.get("ONCELOG_BOOTSTRAP") or DEFAULT_BOOTSTRAP
    config.update(user_properties(args))
    # As in Kafka's tools, --bootstrap-server wins over a bootstrap.servers property.
    if args.bootstrap_server:
        config["bootstrap.servers"] = args.bootstrap_server
    args.bootstrap_server = config["bootstrap.servers"]  # for error messages
    config.setdefault("client.id", f"oncelog-{args.command}")
    # librdkafka logs every refused connection on stderr; commands report failures
    # themselves, one line each. `-X debug=...` brings the log back.
    config["logger"] = _librdkafka_logger(verbose="debug" in config)
    return config


def _librdkafka_logger(*, verbose: bool) -> logging.Logger:
    logger = logging.getLogger("oncelog.librdkafka")
    if verbose:
        if not logger.handlers:
            logger.addHandler(logging.StreamHandler())
        logger.setLevel(logging.DEBUG)
    else:
        logger.setLevel(logging.CRITICAL + 1)
    logger.propagate = False
    return logger


def make_client(factory: Any, config: dict[str, Any]) -> Any:
    """Construct a confluent-kafka client, turning bad properties into a CommandError.
    Kafka's property names stay usable: a Java `sasl.jaas.config` (which librdkafka
    refuses) reaches librdkafka as sasl.username/sasl.password or sasl.oauthbearer.config."""
    from oncelog.client.config import librdkafka_settings

    try:
        return factory(librdkafka_settings(config.items()))
    except (KafkaException, ValueError, TypeError) as error:
        raise CommandError(f"invalid client configuration: {_error_text(error)}") from None


def _error_text(error: BaseException) -> str:
    if isinstance(error, KafkaException) and error.args and isinstance(error.args[0], KafkaError):
        return error.args[0].str()
    return str(error)


_UNREACHABLE = {
    KafkaError._TRANSPORT,
    KafkaError._ALL_BROKERS_DOWN,
    KafkaError._TIMED_OUT,
    KafkaError._RESOLVE,
}
_UNKNOWN_TOPIC = {KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC}


def describe_kafka_error(
    error: KafkaError | KafkaException | BaseException,
    *,
    topic: str | None = None,
    bootstrap: str | None = None,
) -> str:
    """One line for a librdkafka error, with Kafka's wording for the common cases."""
    if isinstance(error, KafkaException) and error.args and isinstance(error.args[0], KafkaError):
        error = error.args[0]
    if not isinstance(error, KafkaError):
        return str(error)
    code = error.code()
    if code in _UNKNOWN_TOPIC and topic is not None:
        return f"topic {topic!r} does not exist"
    if code == KafkaError.TOPIC_ALREADY_EXISTS and topic is not None:
        return f"topic {topic!r} already exists"
    if code in _UNREACHABLE and bootstrap is not None:
        return f"cannot reach bootstrap server(s) {bootstrap}: {error.str()}"
    text = error.str()
    name = error.name()
    return text if name in text else f"{name}: {text}"


def command_error(
    error: KafkaError | BaseException, *, topic: str | None = None, bootstrap: str | None = None
) -> CommandError:
    return CommandError(describe_kafka_error(error, topic=topic, bootstrap=bootstrap))


def fetch_metadata(client: Any, args: argparse.Namespace, topic: str | None = None) -> Any:
    """Cluster metadata (all topics, or one), or a one-line error if the cluster is not
    reachable. Never creates the topic: callers that need it must create it.

    A refused or unresolvable bootstrap server fails after UNREACHABLE_GRACE_S (room for
    a broker that is still starting); a connected but slow one gets CONNECT_TIMEOUT_S."""
    started = time.monotonic()
    attempt_timeout_s = 1.0
    security_checked = False
    while True:
        remaining_s = started + CONNECT_TIMEOUT_S - time.monotonic()
        try:
            if topic is None:
                return client.list_topics(timeout=max(0.1, min(attempt_timeout_s, remaining_s)))
            return client.list_topics(
                topic=topic, timeout=max(0.1, min(attempt_timeout_s, remaining_s))
            )
        except KafkaException as error:
            elapsed_s = time.monotonic() - started
            code = error.args[0].code() if error.args and isinstance(error.args[0], KafkaError) else None
            refused = code in (KafkaError._TRANSPORT, KafkaError._RESOLVE,
                               KafkaError._ALL_BROKERS_DOWN)
            if code in _UNREACHABLE and not security_checked:
                security_checked = True
                _check_security(args)
            if (
                code not in _UNREACHABLE
                or elapsed_s >= CONNECT_TIMEOUT_S
                or (refused and elapsed_s >= UNREACHABLE_GRACE_S)
            ):
                raise command_error(error, bootstrap=args.bootstrap_server) from None
        attempt_timeout_s = min(attempt_timeout_s * 2, CONNECT_TIMEOUT_S)


def _check_security(args: argparse.Namespace) -> None:
    """A refused login or TLS handshake, which librdkafka reports only in its log (and then
    as an unreachable broker), as its own one-line error (oncelog.client.wire)."""
    check_security(args.bootstrap_server, user_properties(args))


def wire_cluster(args: argparse.Namespace) -> Cluster:
    """The cluster the command's connection options name, for the wire-protocol commands."""
    settings = wire_settings(args)
    return Cluster(settings.bootstrap, request_timeout_s=settings.request_timeout_s, properties=settings.properties)


def wire_settings(args: argparse.Namespace) -> WireSettings:
    """The connection options of a wire-protocol command (oncelog.client.wire), resolved as
    for every command."""
    from confluent_kafka.admin import AdminClient

    config = client_config(args)
    try:
        timeout_ms = int(config.get("request.timeout.ms", DEFAULT_REQUEST_TIMEOUT_MS))
    except ValueError:
        timeout_ms = 0
    if timeout_ms <= 0:
        raise CommandError(f"request.timeout.ms must be a positive number of milliseconds, "
                           f"got {config['request.timeout.ms']!r}")
    make_client(AdminClient, config)  # librdkafka's check of every property; no connection is made
    properties = {key: str(value) for key, value in config.items() if key != "logger"}
    if str(properties.get("security.protocol", "PLAINTEXT")).upper() in ("SSL", "SASL_SSL"):
        for key in LIBRDKAFKA_ONLY_TLS_SETTINGS:
            if key in properties:
                raise CommandError(
                    f"invalid client configuration: {key}: this command takes the client certificate, its key "
                    "and the CA as PEM files (ssl.certificate.location, ssl.key.location, ssl.ca.location)"
                )
    return WireSettings(str(config["bootstrap.servers"]), timeout_ms / 1000, properties)


def topic_partitions(metadata: Any, topic: str) -> list[int]:
    """Partition ids of an existing topic, or CommandError if the topic is unknown."""
    topic_metadata = metadata.topics.get(topic)
    if topic_metadata is None:
        raise CommandError(f"topic {topic!r} does not exist")
    if topic_metadata.error is not None:
        raise command_error(topic_metadata.error, topic=topic)
    if not topic_metadata.partitions:
        raise CommandError(f"topic {topic!r} does not exist")
    return sorted(topic_metadata.partitions)
