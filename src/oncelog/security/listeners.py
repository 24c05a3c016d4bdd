"""Listeners as Kafka configures them: `listeners`, `advertised.listeners`,
`listener.security.protocol.map` and `inter.broker.listener.name`.

    listeners=PLAINTEXT://:9092,SECURE://0.0.0.0:9093
    listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SECURE:SASL_SSL
    advertised.listeners=PLAINTEXT://broker1:9092,SECURE://broker1.example.com:9093
    inter.broker.listener.name=SECURE

Each listener has a name, an address to bind, a security protocol (from the map; a
listener named after a protocol needs no entry) and an address to advertise to clients
(from `advertised.listeners` by name, else the bound one). Pure parsing: errors are
ValueErrors that name the key, and the broker's config turns them into ConfigErrors.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from urllib.parse import urlsplit


class SecurityProtocol(Enum):
    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"

    @property
    def tls(self) -> bool:
        return self in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL)

    @property
    def sasl(self) -> bool:
        return self in (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL)


# Kafka's default map: each protocol as a listener of its own name.
DEFAULT_PROTOCOL_MAP = ",".join(f"{p.value}:{p.value}" for p in SecurityProtocol)
_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


@dataclass(frozen=True, slots=True)
class Address:
    host: str  # empty: every interface (binding) / the bound address (advertising)
    port: int


@dataclass(frozen=True, slots=True)
class ListenerSpec:
    name: str  # upper case, as Kafka normalizes it
    bind: Address
    protocol: SecurityProtocol
    advertised: Address | None = None  # None: advertise what is bound


def parse_protocol_map(value: str) -> dict[str, SecurityProtocol]:
    """`listener.security.protocol.map`: NAME:PROTOCOL,..."""
    protocols: dict[str, SecurityProtocol] = {}
    for entry in filter(None, (part.strip() for part in value.split(","))):
        name, separator, protocol = entry.partition(":")
        if not separator or not _NAME.match(name.strip()):
            raise ValueError(f"listener.security.protocol.map: expected NAME:PROTOCOL, got {entry!r}")
        try:
            protocols[name.strip().upper()] = SecurityProtocol(protocol.strip().upper())
        except ValueError:
            known = ", ".join(p.value for p in SecurityProtocol)
            raise ValueError(f"listener.security.protocol.map: unknown security protocol {protocol.strip()!r} "
                             f"for {name.strip()} (known: {known})") from None
    return protocols


def parse_endpoints(value: str, key: str) -> dict[str, Address]:
    """`listeners` or `advertised.listeners`: NAME://host:port,... by listener name, in order."""
    endpoints: dict[str, Address] = {}
    for entry in filter(None, (part.strip() for part in value.split(","))):
        name, separator, address = entry.partition("://")
        if not separator or not _NAME.match(name):
            raise ValueError(f"{key}: expected NAME://host:port, got {entry!r}")
        try:
            parts = urlsplit(f"//{address}")
            port = parts.port
        except ValueError:
            port = None
        if port is None:
            raise ValueError(f"{key}: no valid port in {entry!r}")
        name = name.upper()
        if name in endpoints:
            raise ValueError(f"{key}: listener {name} is given twice")
        endpoints[name] = Address(parts.hostname or "", port)
    if not endpoints:
        raise ValueError(f"{key}: no listener given")
    return endpoints


def parse_listeners(listeners: str, advertised: str, protocol_map: str) -> list[ListenerSpec]:
    protocols = parse_protocol_map(protocol_map or DEFAULT_PROTOCOL_MAP)
    bound = parse_endpoints(listeners, "listeners")
    advertised_by_name = parse_endpoints(advertised, "advertised.listeners") if advertised.strip() else {}
    for name in advertised_by_name:
        if name not in bound:
            raise ValueError(f"advertised.listeners: {name} is not one of listeners ({', '.join(bound)})")
    specs = []
    for name, address in bound.items():
        protocol = protocols.get(name)
        if protocol is None:
            raise ValueError(f"listener.security.protocol.map: no security protocol for listener {name} "
                             f"(add {name}:PLAINTEXT, {name}:SSL, {name}:SASL_PLAINTEXT or {name}:SASL_SSL)")
        specs.append(ListenerSpec(name, address, protocol, advertised_by_name.get(name)))
    ports = [spec.bind.port for spec in specs if spec.bind.port != 0]
    if len(ports) != len(set(ports)):
        raise ValueError("listeners: each listener needs its own port")
    return specs


def inter_broker_listener(specs: list[ListenerSpec], name: str, protocol: str) -> ListenerSpec:
    """`inter.broker.listener.name`, else the listener named after
    `security.inter.broker.protocol` (Kafka's rule), else the first listener."""
    by_name = {spec.name: spec for spec in specs}
    if name:
        spec = by_name.get(name.upper())
        if spec is None:
            raise ValueError(f"inter.broker.listener.name: {name} is not one of listeners ({', '.join(by_name)})")
        return spec
    return by_name.get(protocol.upper()) or specs[0]
