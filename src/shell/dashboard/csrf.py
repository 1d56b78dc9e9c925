"""The dashboard's defence against cross-site request forgery: two checks on every
action (every POST), each of which alone refuses the attacks it is for.

1. **Where the request comes from.** A browser says it: `Sec-Fetch-Site` (sent by
   current browsers to HTTPS and loopback origins) must be `same-origin` (or
   `none`, a request the user made directly, whose `Origin`, if any, is then
   checked as below); else the `Origin` header must be the
   dashboard's own (its scheme-less host and port equal the `Host` header's) or one
   of the `trusted_origins`. A request carrying neither header did not come from a
   browser page, so no other site can have made it; the token below still applies.
   A page on another port of the same host, or on a sibling subdomain, is *same-site*
   for cookies (so `SameSite=Strict` does not stop it) but not *same-origin*: it is
   refused here.
2. **A token only this server can make.** The cookie holds a random nonce; each
   form's hidden field holds an HMAC of the nonce, under a secret the server keeps
   (random per process unless given) and bound to the request's `Authorization`
   header. A page that can write cookies for the dashboard's host (a sibling
   subdomain, another port) can plant a nonce, but cannot compute the field that
   goes with it; a token taken from the dashboard under other credentials (or none)
   does not match this user's.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from collections.abc import Iterable
from urllib.parse import urlsplit

from starlette.requests import Request

from ...core import ValidationError

#: The cookie holding the CSRF nonce.
CSRF_COOKIE = "conveyor_csrf"

#: The hidden form field holding the token signed over the cookie's nonce.
CSRF_FIELD = "csrf_token"

#: What `secrets.token_urlsafe` makes: a cookie of any other shape is not a nonce.
_URLSAFE = re.compile(r"[A-Za-z0-9_-]{20,100}")

_DEFAULT_PORTS = {"http": 80, "https": 443}


def _origin(text: str) -> tuple[str, str, int] | None:
    """An origin (`scheme://host[:port]`) as (scheme, host, port), or None when it is
    not one (`null`, a path, an unknown scheme)."""
    try:
        parts = urlsplit(text.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname or parts.path not in ("", "/"):
        return None
    return scheme, parts.hostname.lower(), port or _DEFAULT_PORTS[scheme]


def _matches_host(origin: tuple[str, str, int], host_header: str) -> bool:
    """Whether `origin` names the host (and port) the request was sent to. A `Host`
    without a port stands for the default port of the origin's scheme (a proxy may
    end TLS, so the scheme the server sees can differ from the browser's)."""
    try:
        host = urlsplit(f"//{host_header.strip()}")
        port = host.port
    except ValueError:
        return False
    if not host.hostname or host.hostname.lower() != origin[1]:
        return False
    return origin[2] == (port if port is not None else _DEFAULT_PORTS[origin[0]])


class CsrfGuard:
    """Makes the CSRF nonce and token of a page, and checks an action's."""

    def __init__(
        self, secret: bytes | str | None = None, trusted_origins: Iterable[str] = ()
    ) -> None:
        key = secret.encode() if isinstance(secret, str) else secret
        if key is not None and len(key) < 16:
            raise ValidationError.of("csrf_secret", f"must be at least 16 bytes, got {len(key)}")
        self._key = key or secrets.token_bytes(32)
        trusted = []
        for text in trusted_origins:
            parsed = _origin(text)
            if parsed is None:
                raise ValidationError.of(
                    "trusted_origins", f"{text!r} is not an origin (http[s]://host[:port])"
                )
            trusted.append(parsed)
        self._trusted = frozenset(trusted)

    def nonce(self, request: Request) -> tuple[str, bool]:
        """The request's nonce, and whether it is new (to be set as the cookie)."""
        found = request.cookies.get(CSRF_COOKIE, "")
        if found.isascii() and _URLSAFE.fullmatch(found):
            return found, False
        return secrets.token_urlsafe(32), True

    def token(self, nonce: str, request: Request) -> str:
        """The form token for `nonce` and the request's credentials."""
        credentials = hashlib.sha256(request.headers.get("authorization", "").encode()).digest()
        mac = hmac.new(self._key, b"conveyor-csrf\x00" + nonce.encode() + b"\x00", "sha256")
        mac.update(credentials)
        return base64.urlsafe_b64encode(mac.digest()).decode().rstrip("=")

    def seal(self, text: str) -> str:
        """A mark that this server wrote `text` (the notice a redirect after an action
        asks its page to show), so a link made elsewhere cannot show a false one."""
        mac = hmac.new(self._key, b"conveyor-notice\x00" + text.encode(), "sha256")
        return base64.urlsafe_b64encode(mac.digest()[:12]).decode()

    def foreign_origin(self, request: Request) -> str | None:
        """Why the request did not come from the dashboard's own pages (None when it
        did, or when it came from no browser page at all)."""
        origin_header = request.headers.get("origin")
        origin = None if origin_header is None else _origin(origin_header)
        if origin is not None and origin in self._trusted:
            return None
        site = request.headers.get("sec-fetch-site")
        said = None if site is None else site.strip().lower()
        if said == "same-origin":
            return None
        if site is not None and said != "none":
            return f"it came from another origin (Sec-Fetch-Site: {site[:40]})"
        # "none" is the user's own doing (a bookmark, a typed address): no page sent
        # it, so an Origin it carries must still be this dashboard's.
        if origin_header is None:
            return None
        if origin is not None and _matches_host(origin, request.headers.get("host", "")):
            return None
        return f"it came from another origin ({origin_header[:100]!r})"

    def token_matches(self, request: Request, field: str) -> bool:
        """Whether `field` is the token of the request's nonce cookie and credentials."""
        nonce, new = self.nonce(request)
        return not new and hmac.compare_digest(self.token(nonce, request).encode(), field.encode())
