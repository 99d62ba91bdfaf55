"""Parsing of etcd endpoint lists (``host:port[,host:port...]``), pure and I/O free."""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_PORT = 2379


@dataclass(frozen=True)
class Endpoint:
    """One etcd client address. ``host`` may be a DNS name: it is resolved at every (re)connect."""

    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


def parse_endpoints(text: str) -> tuple[Endpoint, ...]:
    """Parse ``host[:port][,host[:port]...]``; an optional ``http://`` scheme is dropped.

    The port defaults to 2379. IPv6 hosts are written in brackets (``[::1]:2379``).
    Raises ``ValueError`` naming the bad entry.
    """
    entries = [part.strip() for part in text.split(",")]
    if not text.strip() or not all(entries):
        raise ValueError(f"invalid etcd endpoint list {text!r}: expected host:port[,host:port...]")
    return tuple(_parse_one(entry) for entry in entries)


def _parse_one(entry: str) -> Endpoint:
    rest = entry
    if rest.startswith("https://"):
        raise ValueError(f"etcd endpoint {entry!r}: TLS endpoints are not supported yet")
    rest = rest.removeprefix("http://")
    rest = rest.rstrip("/")
    port_text: str | None = None
    if rest.startswith("["):
        close = rest.find("]")
        if close < 0:
            raise ValueError(f"invalid etcd endpoint {entry!r}: unclosed '[' in IPv6 address")
        host = rest[1:close]
        after = rest[close + 1 :]
        if after:
            if not after.startswith(":"):
                raise ValueError(f"invalid etcd endpoint {entry!r}: expected ':' after ']'")
            port_text = after[1:]
    elif rest.count(":") == 1:
        host, port_text = rest.split(":")
    elif ":" in rest:
        raise ValueError(f"invalid etcd endpoint {entry!r}: write IPv6 addresses as [addr]:port")
    else:
        host = rest
    if not host:
        raise ValueError(f"invalid etcd endpoint {entry!r}: empty host")
    if port_text is None:
        return Endpoint(host, DEFAULT_PORT)
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"invalid etcd endpoint {entry!r}: port must be 1-65535")
    return Endpoint(host, int(port_text))
