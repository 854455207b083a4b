"""Listeners: where a broker accepts connections and which security protocol each one speaks.

Kafka's keys, read as Kafka reads them:

``listeners``
    ``NAME://host:port`` entries, comma-separated, e.g.
    ``PLAINTEXT://0.0.0.0:9092,SASL_SSL://0.0.0.0:9093``.  Names are unique; port 0
    picks a free port; an empty host means every interface.
``listener.security.protocol.map``
    ``NAME:PROTOCOL`` pairs giving each listener's security protocol (PLAINTEXT, SSL,
    SASL_PLAINTEXT or SASL_SSL).  Every protocol maps to itself by default, so a
    listener named after its protocol needs no entry; ``INTERNAL`` or ``CLIENTS`` do.
``advertised.listeners``
    What clients are told (Metadata, ``/brokers/ids``), per listener name; a listener
    missing here is advertised at its own host and port.
``security.inter.broker.protocol`` / ``inter.broker.listener.name``
    The listener brokers and coordinators use to reach each other: the address
    ``/brokers/ids`` gives as the broker's ``host``/``port`` and the one the
    coordinator hands members in ClusterMetadata.  Empty: the PLAINTEXT listener if
    there is one (Kafka's default), else the first listener.

Errors are ``ConfigError`` naming the key.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from spark_coord.config import ConfigError

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
TLS_PROTOCOLS = ("SSL", "SASL_SSL")
SASL_PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")
DEFAULT_PROTOCOL_MAP = {p: p for p in SECURITY_PROTOCOLS}

_ENTRY = re.compile(r"^([A-Za-z0-9_]+)://(\[[0-9A-Fa-f:.%a-zA-Z]*\]|[^:/\[\]]*):([0-9]{1,5})$")


@dataclass(frozen=True)
class Listener:
    """One listener: its name, security protocol and bind address."""

    name: str
    protocol: str
    host: str
    port: int

    @property
    def tls(self) -> bool:
        return self.protocol in TLS_PROTOCOLS

    @property
    def sasl(self) -> bool:
        return self.protocol in SASL_PROTOCOLS

    @property
    def config_prefix(self) -> str:
        """``listener.name.<name>.``: per-listener settings (Kafka lower-cases the name)."""
        return f"listener.name.{self.name.lower()}."

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.name}://{host}:{self.port}"


def parse_protocol_map(text: str | None, key: str = "listener.security.protocol.map") -> dict[str, str]:
    """``{"INTERNAL": "PLAINTEXT", ...}``, on top of the default that maps every protocol to itself."""
    out = dict(DEFAULT_PROTOCOL_MAP)
    for item in (text or "").split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, protocol = item.partition(":")
        name, protocol = name.strip().upper(), protocol.strip().upper()
        if not sep or not re.fullmatch(r"[A-Z0-9_]+", name):
            raise ConfigError(f"{key}: expected NAME:PROTOCOL entries, got {item!r}")
        if protocol not in SECURITY_PROTOCOLS:
            raise ConfigError(f"{key}: {name}: unknown security protocol {protocol!r} "
                              f"(one of {', '.join(SECURITY_PROTOCOLS)})")
        out[name] = protocol
    return out


def parse_entries(text: str | None, key: str) -> list[tuple[str, str, int]]:
    """``[(NAME, host, port)]`` of ``NAME://host:port,...`` with unique names."""
    out: list[tuple[str, str, int]] = []
    for item in (text or "").split(","):
        item = item.strip()
        if not item:
            continue
        m = _ENTRY.match(item)
        if not m:
            raise ConfigError(f"{key}: expected NAME://host:port, got {item!r}")
        name, host, port = m.group(1).upper(), m.group(2), int(m.group(3))
        if host.startswith("["):
            host = host[1:-1]
        if port > 65535:
            raise ConfigError(f"{key}: port {port} of {item!r} is above 65535")
        if any(n == name for n, _, _ in out):
            raise ConfigError(f"{key}: listener name {name} appears twice")
        out.append((name, host, port))
    return out


@dataclass(frozen=True)
class ListenerConfig:
    """A broker's listeners, what each advertises, and the inter-broker listener."""

    listeners: tuple[Listener, ...]
    advertised: dict[str, tuple[str | None, int | None]]  # name -> (host or None: bind host, port or None: bound)
    inter_broker: str

    def listener(self, name: str) -> Listener:
        for li in self.listeners:
            if li.name == name:
                return li
        raise KeyError(name)

    def endpoints(self, bound_ports: Mapping[str, int]) -> list[tuple[str, str, str, int]]:
        """``(listener, protocol, host, port)`` clients are told, the inter-broker listener first:
        the advertised host, else the bind host (loopback for a wildcard bind); the advertised port,
        else the one bound (``bound_ports``: listener name -> port), else the configured one."""
        out = []
        for li in sorted(self.listeners, key=lambda li: li.name != self.inter_broker):
            host, port = self.advertised[li.name]
            if host is None:
                host = li.host if li.host not in ("0.0.0.0", "::", "") else "127.0.0.1"
            out.append((li.name, li.protocol, host, port or bound_ports.get(li.name) or li.port))
        return out

    @property
    def protocol_map(self) -> dict[str, str]:
        """``{name: protocol}`` of this broker's listeners (what /brokers/ids carries)."""
        return {li.name: li.protocol for li in self.listeners}


def from_config(cfg) -> ListenerConfig:
    """The listeners of a broker ``Config``."""
    pmap = parse_protocol_map(cfg["listener.security.protocol.map"])
    entries = parse_entries(cfg["listeners"], "listeners")
    if not entries:
        raise ConfigError("listeners: at least one NAME://host:port is needed")
    listeners = []
    for name, host, port in entries:
        if name not in pmap:
            raise ConfigError(f"listeners: listener {name} has no security protocol; add {name}:<PROTOCOL> "
                              f"to listener.security.protocol.map")
        listeners.append(Listener(name, pmap[name], host or "0.0.0.0", port))
    names = {li.name for li in listeners}
    advertised: dict[str, tuple[str | None, int | None]] = {li.name: (None, None) for li in listeners}
    for name, host, port in parse_entries(cfg["advertised.listeners"], "advertised.listeners"):
        if name not in names:
            raise ConfigError(f"advertised.listeners: {name} is not one of the listeners ({', '.join(sorted(names))})")
        if not host:
            raise ConfigError(f"advertised.listeners: {name} needs a host clients can reach")
        advertised[name] = (host, port or None)
    inter = (cfg["inter.broker.listener.name"] or "").strip().upper()
    protocol = (cfg["security.inter.broker.protocol"] or "").strip().upper()
    if inter and protocol:
        raise ConfigError("inter.broker.listener.name and security.inter.broker.protocol: set one, not both")
    if inter:
        if inter not in names:
            raise ConfigError(f"inter.broker.listener.name: {inter} is not one of the listeners "
                              f"({', '.join(sorted(names))})")
    elif protocol:
        if protocol not in SECURITY_PROTOCOLS:
            raise ConfigError(f"security.inter.broker.protocol: unknown protocol {protocol!r}")
        match = [li.name for li in listeners if li.protocol == protocol]
        if not match:
            raise ConfigError(f"security.inter.broker.protocol: no listener speaks {protocol} "
                              f"(listeners: {', '.join(str(li) for li in listeners)})")
        inter = match[0]
    else:
        plain = [li.name for li in listeners if li.protocol == "PLAINTEXT"]
        inter = plain[0] if plain else listeners[0].name
    return ListenerConfig(tuple(listeners), advertised, inter)
