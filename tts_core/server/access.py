"""Who may call the HTTP routes: Host allow-list, Origin check, optional API key.

- Host: bound to a loopback address, a request must name a loopback host or an allowed
  origin's host: a page on another site that re-points its DNS name at 127.0.0.1 (DNS
  rebinding) sends its own name and is refused.
- Origin: a browser sends `Origin` with every cross-site POST, the "simple" ones a page sends
  without asking included (a form, JSON labelled text/plain). A state-changing request with an
  Origin must come from the server's own origin (the Host's host and port) or
  `--allowed-origins`. Clients without one (curl, the openai SDK, gradio_client) pass.
- API key: with `--api-key`, /v1 needs `Authorization: Bearer <key>`, as OpenAI clients send it.
- Owner keys (`OwnerKeys`): signed by the server with the client address they were issued to,
  so the quotas on them are the server's choosing, not the client's.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import logging
import os
import secrets
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from urllib.parse import urlsplit

from fastapi import Request

from .errors import ApiError

log = logging.getLogger(__name__)

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True)
class AccessPolicy:
    bind_host: str = "127.0.0.1"
    allowed_origins: tuple[str, ...] = ()  # "https://example.org"; "*" allows any origin
    api_key: str | None = None

    def check(self, request: Request, api: bool) -> None:
        """Raise ApiError 403/401 for a request this server must not serve."""
        self._check_host(request)
        if request.method.upper() not in SAFE_METHODS:
            self._check_origin(request)
        if api and self.api_key:
            self._check_key(request)

    def _check_host(self, request: Request) -> None:
        host = request.headers.get("host")
        if host is None or not is_loopback(self.bind_host):
            return
        name = split_host(host)[0]
        if name in LOOPBACK_NAMES or name in self._origin_names:
            return
        raise ApiError(
            403,
            f"Host '{host}' is not served here; use http://127.0.0.1 or "
            "http://localhost (or start the server with --allowed-origins).",
            None,
            "host_not_allowed",
        )

    def _check_origin(self, request: Request) -> None:
        origin = request.headers.get("origin")
        if origin is None or "*" in self.allowed_origins:
            return
        normalized = normalize_origin(origin)
        if normalized is not None:
            if normalized in self._allowed:
                return
            host = request.headers.get("host")
            if host is not None and _same_host(normalized, host):
                return
        raise ApiError(
            403,
            f"Requests from the web page at '{origin}' are not allowed; "
            "start the server with --allowed-origins to allow it.",
            None,
            "origin_not_allowed",
        )

    def _check_key(self, request: Request) -> None:
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        given = token.strip().encode()
        if scheme.lower() == "bearer" and hmac.compare_digest(given, self.api_key.encode()):
            return
        raise ApiError(
            401,
            "A valid API key is needed: send 'Authorization: Bearer <key>'.",
            None,
            "invalid_api_key",
            {"WWW-Authenticate": "Bearer"},
        )

    @cached_property
    def _allowed(self) -> frozenset[str]:
        """The allowed origins, normalized once."""
        return frozenset(filter(None, map(normalize_origin, self.allowed_origins)))

    @cached_property
    def _origin_names(self) -> frozenset[str]:
        """Host names of the allowed origins (they may name the server on loopback)."""
        return frozenset(split_host(o.split("://", 1)[1])[0] for o in self._allowed)


def is_loopback(host: str) -> bool:
    if host.strip("[]").lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def split_host(host: str) -> tuple[str, int | None]:
    """'Example.org:8080' -> ('example.org', 8080); '[::1]:7860' -> ('::1', 7860)."""
    parts = urlsplit(f"//{host.strip()}")
    try:
        port = parts.port
    except ValueError:
        port = None
    return (parts.hostname or "").lower(), port


def normalize_origin(origin: str) -> str | None:
    """'HTTP://Example.org:80/' -> 'http://example.org'; None for 'null' or no scheme/host."""
    parts = urlsplit(origin.strip())
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
        return None
    try:
        port = parts.port
    except ValueError:
        return None
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    if port is None or port == DEFAULT_PORTS[parts.scheme]:
        return f"{parts.scheme}://{host}"
    return f"{parts.scheme}://{host}:{port}"


def _same_host(normalized_origin: str, host_header: str) -> bool:
    """The origin names the host and port the request was sent to. The scheme is not
    compared: behind a TLS-terminating proxy the page is https while the app sees http."""
    scheme, netloc = normalized_origin.split("://", 1)
    origin_name, origin_port = split_host(netloc)
    name, port = split_host(host_header)
    default = DEFAULT_PORTS[scheme]
    same_port = (origin_port or default) == (port or default) or (
        origin_port is None and port in DEFAULT_PORTS.values()
    )
    return origin_name == name and same_port


# ---------------------------------------------------------------- owner keys the server issues
OWNER_KEY_PREFIX = "vo1."
SECRET_FILE = ".owner-key-secret"  # in the voice store's folder: keys outlive a restart
ENV_OWNER_SECRET = "TTS_OWNER_KEY_SECRET"
_TAG_CHARS, _MAC_CHARS = 16, 32  # hex digits of the issuer tag and of the signature
MAX_KEPT_IDENTITY = 160  # a browser's earlier key kept inside an issued one (<= 256 in all)


@dataclass(frozen=True)
class IssuedKey:
    identity: str  # the secret part: who owns a voice (its digest is stored)
    issuer: str  # a tag of the client address it was issued to (a quota's key)


class OwnerKeys:
    """Owner keys signed by a server secret: `vo1.<issuer>.<identity>.<signature>`. A client
    picking its own keys could mint a fresh quota at will; an issued key carries the (tagged)
    address it was issued to, signed, so the quota behind it is one the server chose."""

    def __init__(self, secret: bytes) -> None:
        if len(secret) < 16:
            raise ValueError("the owner-key secret must have at least 16 bytes")
        self._secret = secret

    @classmethod
    def for_folder(cls, folder: Path) -> OwnerKeys:
        """$TTS_OWNER_KEY_SECRET, else the secret kept in `folder` (made once, mode 0600); a
        folder that cannot keep one gets a secret for this process only (logged)."""
        if os.environ.get(ENV_OWNER_SECRET):
            return cls(os.environ[ENV_OWNER_SECRET].encode())
        path = folder / SECRET_FILE
        try:
            return cls(bytes.fromhex(path.read_text().strip()))
        except (OSError, ValueError):
            pass
        secret = secrets.token_bytes(32)
        try:
            folder.mkdir(parents=True, exist_ok=True)
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(descriptor, "w") as file:
                file.write(secret.hex())
        except FileExistsError:  # another process made it meanwhile: theirs counts
            return cls(bytes.fromhex(path.read_text().strip()))
        except OSError as exc:
            log.warning(
                "owner keys: cannot keep a secret in %s (%s); keys issued now end "
                "with this process",
                folder,
                exc,
            )
        return cls(secret)

    def issuer_tag(self, address: str | None) -> str:
        """The quota key of a client address (address_key form), not revealing it."""
        return self._mac(b"issuer|" + (address or "").encode())[:_TAG_CHARS]

    def issue(self, address: str | None, keep: str | None = None) -> str:
        """A key for the client at `address`: `keep` itself when this server issued it, else
        a new key whose identity is `keep` (a browser's own earlier key, so its voices stay
        its own) or a fresh random one."""
        if keep and self.parse(keep) is not None:
            return keep
        usable = keep and "." not in keep and 16 <= len(keep) <= MAX_KEPT_IDENTITY
        identity = keep if usable else secrets.token_urlsafe(24)
        issuer = self.issuer_tag(address)
        return f"{OWNER_KEY_PREFIX}{issuer}.{identity}.{self._sign(issuer, identity)}"

    def parse(self, key: str | None) -> IssuedKey | None:
        """The issued key's parts; None for a key this server did not sign."""
        if not key or not key.startswith(OWNER_KEY_PREFIX):
            return None
        issuer, dot, rest = key[len(OWNER_KEY_PREFIX) :].partition(".")
        identity, dot2, signature = rest.rpartition(".")
        if not (dot and dot2 and identity and len(issuer) == _TAG_CHARS):
            return None
        if not hmac.compare_digest(signature, self._sign(issuer, identity)):
            return None
        return IssuedKey(identity, issuer)

    def identity(self, key: str) -> str:
        """What owns a voice: an issued key's identity, or a self-made key as it is."""
        issued = self.parse(key)
        return issued.identity if issued is not None else key

    def _sign(self, issuer: str, identity: str) -> str:
        return self._mac(f"key|{issuer}|{identity}".encode())[:_MAC_CHARS]

    def _mac(self, message: bytes) -> str:
        return hmac.new(self._secret, message, hashlib.sha256).hexdigest()
