"""``app.web.clients``: who a request counts against, with and without trusted proxies."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from app.config import Settings
from app.web.clients import ProxyListError, resolve_client, trusted_networks
from app.web.main import create_app

PROXY = trusted_networks("10.0.0.5, 10.1.0.0/16, fd00::/8")


def test_a_peer_that_is_no_trusted_proxy_is_the_client_whatever_it_sends() -> None:
    assert resolve_client("203.0.113.7", [], PROXY) == "203.0.113.7"
    assert resolve_client("203.0.113.7", ["198.51.100.1"], PROXY) == "203.0.113.7"
    assert resolve_client("203.0.113.7", ["10.0.0.5, 198.51.100.1"], ()) == "203.0.113.7"
    assert resolve_client("127.0.0.1", ["198.51.100.1"], ()) == "127.0.0.1"  # no proxy is trusted by default


def test_behind_trusted_proxies_the_rightmost_untrusted_hop_is_the_client() -> None:
    assert resolve_client("10.0.0.5", ["198.51.100.1"], PROXY) == "198.51.100.1"
    # the client wrote its own X-Forwarded-For; our proxy appended the address it saw
    assert resolve_client("10.0.0.5", ["1.2.3.4, 198.51.100.1"], PROXY) == "198.51.100.1"
    assert resolve_client("10.0.0.5", ["1.2.3.4", "198.51.100.1"], PROXY) == "198.51.100.1"
    # a chain of our own proxies (an edge proxy in 10.1/16 in front of the balancer)
    assert resolve_client("10.0.0.5", ["9.9.9.9, 198.51.100.1, 10.1.2.3"], PROXY) == "198.51.100.1"
    # a proxy's own request (a health check) carries no header: the proxy is the client
    assert resolve_client("10.0.0.5", [], PROXY) == "10.0.0.5"
    # garbage where our proxy should have written: nothing to its left is believed
    assert resolve_client("10.0.0.5", ["1.2.3.4, nonsense"], PROXY) == "10.0.0.5"
    assert resolve_client("10.0.0.5", ["192.0.2.9:4711"], PROXY) == "192.0.2.9"


def test_ipv6_clients_are_their_slash_64() -> None:
    one = resolve_client("2001:db8:1:2::1", [], PROXY)
    assert one == resolve_client("2001:db8:1:2:ffff::9", [], PROXY) == "2001:db8:1:2::/64"
    assert one != resolve_client("2001:db8:1:3::1", [], PROXY)
    assert resolve_client("fd00::1", ["[2001:db8:1:2::7]:80"], PROXY) == "2001:db8:1:2::/64"
    assert resolve_client("::ffff:10.0.0.5", ["198.51.100.1"], PROXY) == "198.51.100.1"


def test_a_bad_proxy_list_stops_the_start() -> None:
    with pytest.raises(ProxyListError):
        trusted_networks("10.0.0.5, proxy.internal")
    with pytest.raises(ProxyListError):
        create_app(Settings(trusted_proxies="not-an-address"))


def test_the_rate_key_follows_the_header_only_from_a_trusted_proxy(tmp_path) -> None:
    """One token per minute per client: a spoofed header from an untrusted peer spends the peer's
    own token; from a trusted proxy each forwarded client has its own."""
    def shares(settings: Settings, headers: list[dict[str, str]]) -> list[int]:
        # shares never run code: no sandbox needed
        with TestClient(create_app(settings, runner=NoRunner()), client=("192.0.2.10", 5000)) as client:
            return [client.post("/api/links", json={"code": f"x = {n}\n"}, headers=h).status_code
                    for n, h in enumerate(headers)]

    spoofed = [{"X-Forwarded-For": f"198.51.100.{n}"} for n in range(3)]
    base = {"rate_per_minute": 1, "rate_burst": 1}
    assert shares(Settings(**base, data_dir=tmp_path / "a"), spoofed) == [200, 429, 429]
    trusted = Settings(**base, data_dir=tmp_path / "b", trusted_proxies="192.0.2.10")
    assert shares(trusted, spoofed) == [200, 200, 200]


class NoRunner:
    async def run(self, code: str) -> None:
        raise AssertionError("no run expected")
