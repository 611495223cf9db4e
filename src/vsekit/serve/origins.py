"""Which sites may talk to the server: a Host allow-list and a same-origin rule for POSTs.

The server listens on this machine, but a web page the user visits elsewhere can still reach it: by DNS
rebinding (its own name made to resolve to 127.0.0.1, so the browser sends ``Host: attacker.example``
and lets that page read the answers) and by a plain cross-site form POST (which a browser sends without
asking). So every request must name an allowed host in its ``Host`` header (else 400), and a request
that changes or uploads something (any method but GET, HEAD, OPTIONS) that carries an ``Origin`` (or,
lacking one, a ``Referer``) header must come from an allowed host too (else 403). A browser always sends
``Origin`` with a POST; a command-line client (curl) sends neither and is served.

Allowed hosts: ``localhost``, ``127.0.0.1``, ``[::1]``, the address the server is bound to, and the names
given with ``vsekit serve --allow-host NAME``; a server bound to every address (``0.0.0.0`` / ``::``)
also takes any IP address literal (the address of this machine on its network; an IP address cannot be
rebound, only a name can). Ports are not compared: a rebinding page reaches the server's own port anyway.
"""

from __future__ import annotations

import ipaddress
import json
import shlex
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

__all__ = ["HostGuard", "allowed_hosts"]

LOOPBACK = ("localhost", "127.0.0.1", "::1")
WILDCARDS = ("0.0.0.0", "::", "")
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")


def _bare(host: str) -> str:
    """``host`` without brackets and trailing dot, lower case (``[::1]`` -> ``::1``)."""
    host = host.strip().lower().rstrip(".")
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


def _host_of_header(value: str) -> str | None:
    """The host name of a ``Host`` header value (``name``, ``name:port``, ``[v6]:port``), or None."""
    value = value.strip()
    if value.startswith("["):
        end = value.find("]")
        if end < 0 or (value[end + 1 :] and not value[end + 1 :].startswith(":")):
            return None
        return _bare(value[: end + 1])
    name, _, port = value.partition(":")
    if port and not port.isdigit():
        return None
    return _bare(name) or None


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def allowed_hosts(bound: str, extra: Iterable[str] = ()) -> tuple[frozenset[str], bool]:
    """The allowed host names for a server bound to ``bound``, and whether any IP literal is allowed."""
    names = {_bare(h) for h in (*LOOPBACK, bound, *extra) if _bare(h) not in WILDCARDS}
    return frozenset(names), _bare(bound) in WILDCARDS


class HostGuard:
    """ASGI middleware: the Host allow-list (400) and the same-origin rule for non-GET requests (403)."""

    def __init__(self, app: Any, hosts: frozenset[str], any_ip: bool = False) -> None:
        self.app, self.hosts, self.any_ip = app, hosts, any_ip

    def allows(self, host: str | None) -> bool:
        return host is not None and (host in self.hosts or (self.any_ip and _is_ip(host)))

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope.get("headers", ())}
        refusal = self._refusal(scope.get("method", "GET"), headers)
        if refusal is None:
            await self.app(scope, receive, send)
            return
        status, message = refusal
        if scope["type"] == "websocket":  # no answer body on a websocket: close it, "policy violation"
            await send({"type": "websocket.close", "code": 1008, "reason": message[:120]})
            return
        body = json.dumps({"error": message}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})

    def _refusal(self, method: str, headers: dict[str, str]) -> tuple[int, str] | None:
        host_header = headers.get("host")
        if host_header is None:
            return 400, "no Host header: this server answers requests for localhost and its allowed hosts"
        name = _host_of_header(host_header)
        if not self.allows(name):
            allow = shlex.quote(name[:100]) if name else "NAME"
            return 400, (
                f"Host {host_header[:100]!r} is not this server's (allowed: {', '.join(sorted(self.hosts))}; "
                f"to answer it, start the server again with `--allow-host {allow}` added to its command)"
            )
        if method.upper() in SAFE_METHODS:
            return None
        for header in ("origin", "referer"):
            value = headers.get(header)
            if value is None:
                continue
            try:
                origin_host = urlsplit(value.strip()).hostname
            except ValueError:
                origin_host = None
            if not self.allows(_bare(origin_host) if origin_host else None):
                return (
                    403,
                    f"cross-origin request refused: {header.title()} {value[:100]!r} is not this server",
                )
            return None  # Origin decides when present; Referer only stands in for a missing Origin
        return None
