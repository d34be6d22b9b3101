"""Proxies from the environment, decided as urllib, requests and huggingface_hub decide them.

Pure (no sockets): which proxy, if any, a URL goes through. The native transport
(``_wire.py``) then tunnels https through it with ``CONNECT`` and sends http requests to it in
absolute form.

The rules, as ``urllib.request.getproxies_environment`` / ``proxy_bypass_environment`` and
``requests.utils.select_proxy`` / ``should_bypass_proxies`` apply them:

- ``<scheme>_proxy`` in any case; a lower-case variable wins over its upper-case twin, and an
  empty lower-case one unsets it. Under CGI (``REQUEST_METHOD`` set) upper-case ``HTTP_PROXY``
  is ignored (httpoxy, CVE-2016-1000110).
- A URL uses the proxy of its scheme (``https_proxy`` / ``http_proxy``), else ``all_proxy``.
- A proxy written without a scheme (``proxy:3128``) is an http proxy, as requests reads it;
  ``user:password@`` in it are the proxy's credentials (percent-decoded), sent as
  ``Proxy-Authorization: Basic`` and never shown.
- ``no_proxy``: comma-separated entries, spaces ignored; ``*`` bypasses every host. A host name
  matches an entry equal to it or to ``host:port``, or a domain suffix at a dot boundary
  (``example.com`` and ``.example.com`` both match ``cdn.example.com``, not
  ``notexample.com``). An IP address matches an equal entry or a CIDR block
  (``10.0.0.0/8``; IPv6 too, where requests checks IPv4 only). ``host:port`` entries match the
  URL's port, its scheme's default when it names none (requests compares only a port written
  in the URL).

Supported proxy kinds: ``http://`` (plain TCP to the proxy). ``https://`` proxies (TLS to the
proxy itself) and ``socks*://`` are refused with a :class:`ProxyError` naming the variable.
"""

from __future__ import annotations

import base64
import ipaddress
import os
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field

from episodestream.errors import ProxyError

__all__ = ["Proxy", "bypasses_proxy", "environment_proxies", "proxy_for"]

_DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True, slots=True)
class Proxy:
    """An http proxy: where it is, its credentials, and the variable that named it."""

    host: str
    port: int
    variable: str
    username: str | None = field(default=None, repr=False)
    password: str | None = field(default=None, repr=False)

    @property
    def label(self) -> str:
        """``http://host:port (from HTTPS_PROXY)``: for messages; never the credentials."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port} (from {self.variable})"

    @property
    def has_credentials(self) -> bool:
        return self.username is not None

    def authorization(self) -> str | None:
        """The ``Proxy-Authorization`` value (Basic), or None without credentials."""
        if self.username is None:
            return None
        pair = f"{self.username}:{self.password or ''}".encode()
        return "Basic " + base64.b64encode(pair).decode("ascii")


def environment_proxies(environ: Mapping[str, str] | None = None) -> dict[str, tuple[str, str]]:
    """``{scheme: (proxy URL, variable name)}`` from ``environ`` (default ``os.environ``);
    the key ``"no"`` holds ``no_proxy``."""
    env = os.environ if environ is None else environ
    found: dict[str, tuple[str, str]] = {}
    for name, value in env.items():
        if value and name.lower().endswith("_proxy"):
            found[name.lower()[:-6]] = (value, name)
    if "REQUEST_METHOD" in env:
        found.pop("http", None)
    for name, value in env.items():  # lower-case spellings win, and an empty one unsets
        if name.endswith("_proxy"):
            if value:
                found[name.lower()[:-6]] = (value, name)
            else:
                found.pop(name.lower()[:-6], None)
    return found


def proxy_for(url: str, environ: Mapping[str, str] | None = None) -> Proxy | None:
    """The proxy ``url`` goes through, or None (no variable set, or ``no_proxy`` matches)."""
    parts = urllib.parse.urlsplit(url)
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    if not host:
        return None
    proxies = environment_proxies(environ)
    chosen = proxies.get(scheme) or proxies.get("all")
    if chosen is None:
        return None
    no_proxy = proxies.get("no", ("", ""))[0]
    port = parts.port or _DEFAULT_PORTS.get(scheme, 0)
    if bypasses_proxy(host, port, no_proxy):
        return None
    return parse_proxy(*chosen)


def parse_proxy(value: str, variable: str) -> Proxy:
    """The :class:`Proxy` written as ``value`` in ``variable``, or :class:`ProxyError`."""
    text = value.strip()
    if "://" not in text:
        text = "http://" + text
    try:
        parts = urllib.parse.urlsplit(text)
        port = parts.port
    except ValueError:
        raise ProxyError(f"{variable} is not a proxy URL (bad host or port)") from None
    scheme = parts.scheme.lower()
    shown = f"{scheme}://{parts.hostname or ''}"
    if scheme != "http":
        why = (
            "TLS to the proxy itself is not supported (an https:// site is still tunnelled "
            "through an http:// proxy)"
            if scheme == "https"
            else "only http:// proxies are supported"
        )
        raise ProxyError(f"{variable}={shown}…: {why}")
    if not parts.hostname:
        raise ProxyError(f"{variable} names no proxy host")
    username = urllib.parse.unquote(parts.username) if parts.username is not None else None
    password = urllib.parse.unquote(parts.password) if parts.password is not None else None
    return Proxy(parts.hostname.lower(), port or 80, variable, username, password)


def bypasses_proxy(host: str, port: int, no_proxy: str) -> bool:
    """Whether ``host`` (lower-case, no brackets) on ``port`` is exempt by ``no_proxy``."""
    entries = [entry for entry in no_proxy.replace(" ", "").lower().split(",") if entry]
    if "*" in entries:
        return True
    address = _ip(host)
    host_port = f"{host}:{port}"
    for entry in entries:
        if address is not None:
            if "/" in entry:
                try:
                    network = ipaddress.ip_network(entry, strict=False)
                except ValueError:
                    continue
                if address.version == network.version and address in network:
                    return True
                continue
            bare = entry[1:-1] if entry.startswith("[") and entry.endswith("]") else entry
            if _ip(bare) == address:
                return True
        entry = entry.lstrip(".")
        if not entry:
            continue
        if entry in (host, host_port):
            return True
        if host.endswith("." + entry) or host_port.endswith("." + entry):
            return True
    return False


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None
