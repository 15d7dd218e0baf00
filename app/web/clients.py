"""Who is asking: the one answer every per-client decision uses (the run rate, the short-link quota).

The client is the connection's peer address, unless the peer is one of the proxies the operator
named (``EXPLORER_TRUSTED_PROXIES``: addresses or networks, comma-separated). Then it is read from
``X-Forwarded-For``, right to left: each trusted proxy appends the address it was reached from, so
the rightmost entry that is not a trusted proxy is the first hop nobody here vouches for. Whatever a
client writes into the header itself stands to the left of that and is never read. A peer that is
not a trusted proxy is the client, whatever headers it sends.

An IPv6 client is its /64: one machine usually holds a whole /64 and can pick any address in it.

uvicorn's own ``--proxy-headers`` is switched off (``app.serving``): this is the one place that reads
the header, so the rate key cannot be changed by a header uvicorn would trust from loopback.
"""

from __future__ import annotations

import ipaddress
from functools import lru_cache

from starlette.requests import HTTPConnection

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address

CLIENT_KEY = "explorer.client"  # scope key: the request's client, worked out once
UNKNOWN = "unknown"  # no peer address (a test client, a Unix socket): one client for all of them
MAX_HOPS = 32  # X-Forwarded-For entries read at most (a header is bounded anyway: EXPLORER_MAX_HEADER_BYTES)


class ProxyListError(ValueError):
    pass


@lru_cache(maxsize=16)
def trusted_networks(spec: str) -> tuple[Network, ...]:
    """``EXPLORER_TRUSTED_PROXIES`` parsed: ``"10.0.0.5, 10.1.0.0/16, fd00::/8"``."""
    networks = []
    for item in spec.replace(";", ",").split(","):
        item = item.strip()
        if not item:
            continue
        try:
            networks.append(ipaddress.ip_network(item, strict=False))
        except ValueError as error:
            raise ProxyListError(f"EXPLORER_TRUSTED_PROXIES: {item!r} is not an address or a network") \
                from error
    return tuple(networks)


def _address(text: str) -> Address | None:
    text = text.strip()
    if text.startswith("[") and "]" in text:  # "[2001:db8::1]:4711" (RFC 7239 style, some proxies)
        text = text[1:text.index("]")]
    elif text.count(":") == 1:  # "192.0.2.1:4711"
        text = text.split(":")[0]
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        return address.ipv4_mapped
    return address


def _trusted(address: Address, networks: tuple[Network, ...]) -> bool:
    return any(address.version == network.version and address in network for network in networks)


def _key(address: Address) -> str:
    if isinstance(address, ipaddress.IPv6Address):
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return str(address)


def resolve_client(peer: str | None, forwarded: list[str], networks: tuple[Network, ...]) -> str:
    """The client key for a connection from ``peer`` that carried ``forwarded`` (the values of every
    ``X-Forwarded-For`` header, in order). Pure, for tests."""
    address = _address(peer) if peer else None
    if address is None:
        return peer or UNKNOWN  # not an IP address (a test client's name): itself
    if not _trusted(address, networks):
        return _key(address)
    hops = [hop for value in forwarded for hop in value.split(",")][-MAX_HOPS:]
    for hop in reversed(hops):
        found = _address(hop)
        if found is None:
            break  # garbage where a proxy of ours wrote: trust nothing further left
        address = found
        if not _trusted(address, networks):
            break
    return _key(address)


def client_key(connection: HTTPConnection) -> str:
    """The client this request counts against (an address, or an IPv6 /64). Worked out once per
    request; every per-client limit uses it."""
    scope = connection.scope
    key = scope.get(CLIENT_KEY)
    if key is None:
        settings = connection.app.state.settings
        forwarded = [v.decode("latin-1") for k, v in scope.get("headers", ()) if k == b"x-forwarded-for"]
        peer = connection.client.host if connection.client else None
        key = scope[CLIENT_KEY] = resolve_client(peer, forwarded, trusted_networks(settings.trusted_proxies))
    return key
