"""Where a site's webhook may go: the target URL checked when it is added, and every address its name
resolves to checked when the connection is made (a name that later resolves inside the network is
refused then too). Only `https://` (plain `http://` to loopback with
PRESSROOM_WEBHOOKS_ALLOW_LOOPBACK); hosts read as the HTTP client's resolver reads them."""

from __future__ import annotations

import ipaddress
import re
import socket
from urllib.parse import urlsplit

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult

from pressroom.errors import BadInput
from pressroom.settings import Settings

_SHARED = ipaddress.ip_network("100.64.0.0/10")  # carrier-grade NAT: inside someone's network, not global
# Not global whatever this Python's table says: IETF protocol assignments (192.0.0.0/24, some of
# which it calls global), the 6to4 relay anycast, IPv6's old site-local addresses.
_NEVER = (ipaddress.ip_network("192.0.0.0/24"), ipaddress.ip_network("192.88.99.0/24"),
          ipaddress.ip_network("fec0::/10"))
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
# A host the HTTP client's resolver reads as an IPv4 address though it is not dotted-quad:
# `2130706433`, `0177.0.0.1`, `127.1`, `0x7f.1` (inet_aton's forms).
# Each part decimal, octal or hex; a name has a letter in some part other than a 0x prefix (`1a.de`).
_NUMERIC_HOST = re.compile(r"(?:0[xX][0-9a-fA-F]*|\d+)(?:\.(?:0[xX][0-9a-fA-F]*|\d+))*")


class RefusedAddress(Exception):
    """The target's address is one a site's webhook may not reach."""


def address_refusal(address: str, settings: Settings) -> str | None:
    """Why this address may not be reached by a webhook (None: it may). An IPv6 address that carries
    an IPv4 one (mapped, 6to4, Teredo, NAT64) is judged by the IPv4 address it reaches."""
    ip = _reached(ipaddress.ip_address(address.split("%", 1)[0]))
    if any(ip in network for network in _NEVER if network.version == ip.version):
        return "a private, link-local or reserved address"
    if ip.is_loopback:
        return None if settings.site_webhooks_allow_loopback else "a loopback address"
    if ip.is_multicast or ip.is_unspecified or ip.is_reserved:
        return "a private, link-local or reserved address"
    if ip.is_global:
        return None
    if settings.site_webhooks_allow_private and (ip.is_private or ip.is_link_local or ip in _SHARED):
        return None
    return "a private, link-local or reserved address"


def _reached(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    if not isinstance(ip, ipaddress.IPv6Address):
        return ip
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return ip


def numeric_host(host: str) -> str | None:
    """The IPv4 address a numeric host stands for, as the resolver reads it (`127.1` is 127.0.0.1);
    None for a name. A host that looks numeric but is no address raises BadInput."""
    host = host.rstrip(".")
    if not _NUMERIC_HOST.fullmatch(host):
        return None
    try:
        return socket.inet_ntoa(socket.inet_aton(host))
    except OSError:
        raise BadInput("target_url's host is neither a name nor an address") from None


def check_target_url(url: str, settings: Settings) -> str:
    """The target URL as stored, or BadInput saying what is wrong with it (in one line, without the URL)."""
    if not isinstance(url, str) or not url or len(url) > 2000 or any(c.isspace() for c in url):
        raise BadInput("target_url must be an absolute https:// URL of at most 2000 characters")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (a bad port raises here)
    except ValueError:
        raise BadInput("target_url is not a valid URL") from None
    host = parts.hostname or ""
    if not host or parts.username or parts.password:
        raise BadInput("target_url must name a host, without a user or password")
    if parts.scheme == "http":
        if not (settings.site_webhooks_allow_loopback and _is_loopback_name(host)):
            raise BadInput("target_url must be https:// (plain http:// only to loopback, with "
                           "PRESSROOM_WEBHOOKS_ALLOW_LOOPBACK=true)")
    elif parts.scheme != "https":
        raise BadInput("target_url must be an https:// URL")
    address = host if _is_ip(host) else numeric_host(host)
    if address is not None and (why := address_refusal(address, settings)):
        raise BadInput(f"target_url is {why}, which a webhook may not reach")
    return url


def connection_refusal(address: str, settings: Settings, *, loopback_only: bool) -> str | None:
    """Why a connection to this address is refused (None: it is not): a webhook may not reach it, or
    plain http:// goes to loopback only."""
    refusal = address_refusal(address, settings)
    if refusal is None and loopback_only and not ipaddress.ip_address(address.split("%", 1)[0]).is_loopback:
        refusal = "not loopback (plain http:// goes to loopback only)"
    return refusal


def check_literal_host(host: str, settings: Settings, *, loopback_only: bool) -> None:
    """A literal address is never resolved, so the resolver never sees it: RefusedAddress here."""
    if _is_ip(host) and (refusal := connection_refusal(host, settings, loopback_only=loopback_only)):
        raise RefusedAddress(f"the target is {refusal}, which a webhook may not reach")


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    return True


def _is_loopback_name(host: str) -> bool:
    return host == "localhost" or (_is_ip(host) and ipaddress.ip_address(host).is_loopback)


class GuardedResolver(AbstractResolver):
    """Resolves as usual, then refuses when any address is one a webhook may not reach: the check
    is on the addresses the connection is made to (DNS rebinding finds it closed)."""

    def __init__(self, settings: Settings, *, loopback_only: bool) -> None:
        self.settings = settings
        self.loopback_only = loopback_only
        self.inner = aiohttp.ThreadedResolver()

    async def resolve(self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET,
                      ) -> list[ResolveResult]:
        found = await self.inner.resolve(host, port, family)
        for result in found:
            if refusal := connection_refusal(result["host"], self.settings, loopback_only=self.loopback_only):
                raise RefusedAddress(f"the target resolves to {refusal}, which a webhook may not reach")
        return found

    async def close(self) -> None:
        await self.inner.close()
