"""OIDC bearer tokens (`agnitra serve --oidc-issuer URL --oidc-audience AUD`): a JWT signed by the
issuer (RS256 or ES256) whose issuer, audience, expiry and not-before hold; its keys are the
issuer's JWKS (`jwks_uri` of `<issuer>/.well-known/openid-configuration`), kept in memory, read
again when a token names a key id not among them (at most every REFRESH_FLOOR_S) and every
MAX_AGE_S. The claims `<prefix>role` (viewer, editor or admin; a list: its highest) and
`<prefix>project` (a project's name; absent: every project) grant what an API key would; the
prefix is `agnitra_` unless the server says otherwise."""

from __future__ import annotations

import json
import threading
import time
import urllib.request
from dataclasses import dataclass
from typing import Any

import jwt

from agnitra.errors import first_line

ALGORITHMS = ["RS256", "ES256"]
LEEWAY_S = 30  # clock skew allowed on exp and nbf
REFRESH_FLOOR_S = 5.0  # a token naming an unknown key reads the JWKS again at most this often
MAX_AGE_S = 3600.0  # the JWKS is read again this often, so a key the issuer withdrew stops working
FETCH_TIMEOUT_S = 5.0
MAX_DOCUMENT_BYTES = 1 << 20


class TokenRefused(Exception):
    """The token is not valid here (a 401); the message says why, in one line."""


class IssuerUnavailable(Exception):
    """The issuer's discovery document or keys cannot be read (a 503 for a token; at start, the server's error)."""


@dataclass(frozen=True)
class OidcSettings:
    issuer: str
    audience: str
    claim_prefix: str = "agnitra_"

    @property
    def role_claim(self) -> str:
        return self.claim_prefix + "role"

    @property
    def project_claim(self) -> str:
        return self.claim_prefix + "project"

    @property
    def organisation_claim(self) -> str:
        return self.claim_prefix + "organisation"


def looks_like_jwt(token: str) -> bool:
    return token.count(".") == 2


def _fetch_json(url: str) -> dict[str, Any]:
    if not url.startswith(("https://", "http://")):
        raise IssuerUnavailable(f"{url} is not an http(s) URL")
    try:
        with urllib.request.urlopen(url, timeout=FETCH_TIMEOUT_S) as response:  # noqa: S310 (http(s) only, checked above)
            data = json.loads(response.read(MAX_DOCUMENT_BYTES))
    except (OSError, ValueError) as exc:
        raise IssuerUnavailable(f"{url} cannot be read ({first_line(exc)})") from exc
    if not isinstance(data, dict):
        raise IssuerUnavailable(f"{url} is not a JSON object")
    return data


class OidcVerifier:
    """Checks tokens against one issuer; safe to share between the server's request threads."""

    def __init__(self, settings: OidcSettings, fetch=_fetch_json, clock=time.monotonic) -> None:
        self.settings, self.fetch, self.clock = settings, fetch, clock
        self.jwks_uri: str | None = None
        self.keys: dict[str | None, jwt.PyJWK] = {}
        self.read_at = self.tried_at = float("-inf")
        self.failure = ""
        self.lock = threading.Lock()

    def discover(self) -> None:
        """Read the discovery document and the keys now (the server does this at start)."""
        with self.lock:
            self._read_keys()

    def claims(self, token: str) -> dict[str, Any]:
        """The token's claims once it is shown valid; TokenRefused (why) or IssuerUnavailable."""
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise TokenRefused(f"the bearer token is neither an API key nor a readable JWT ({first_line(exc)})") from exc
        if header.get("alg") not in ALGORITHMS:
            raise TokenRefused(f"the token is signed with {header.get('alg')!r}; this server takes {' or '.join(ALGORITHMS)} tokens from {self.settings.issuer}")
        key = self._key(header.get("kid"))
        s = self.settings
        try:
            return jwt.decode(token, key, algorithms=ALGORITHMS, audience=s.audience, issuer=s.issuer, leeway=LEEWAY_S,
                              options={"require": ["exp", "iss", "aud", "sub"]})
        except jwt.ExpiredSignatureError as exc:
            raise TokenRefused(f"the token has expired; get a new one from {s.issuer}") from exc
        except jwt.ImmatureSignatureError as exc:
            raise TokenRefused("the token is not valid yet (nbf or iat in the future); check the clocks of this server and the issuer") from exc
        except jwt.InvalidAudienceError as exc:
            raise TokenRefused(f"the token is not for this server: its audience is not '{s.audience}'; ask {s.issuer} for a token with that audience") from exc
        except jwt.InvalidIssuerError as exc:
            raise TokenRefused(f"the token was not issued by {s.issuer}, the issuer this server trusts") from exc
        except jwt.InvalidSignatureError as exc:
            raise TokenRefused(f"the token's signature does not match {s.issuer}'s key {header.get('kid')!r}: it was not signed by that issuer") from exc
        except jwt.MissingRequiredClaimError as exc:
            raise TokenRefused(f"the token has no '{exc.claim}' claim; ask {s.issuer} for a token with exp, iss, aud and sub") from exc
        except jwt.PyJWTError as exc:
            raise TokenRefused(f"the token is not valid ({first_line(exc)})") from exc

    def _key(self, kid: str | None) -> jwt.PyJWK:
        with self.lock:
            now = self.clock()
            due = now - self.read_at > MAX_AGE_S or self._match(kid) is None
            if due and now - self.tried_at >= REFRESH_FLOOR_S:
                self.tried_at = now
                try:
                    self._read_keys()
                    self.failure = ""
                except IssuerUnavailable as exc:
                    self.failure = str(exc)  # a set read before still serves until the issuer is back
            if not self.keys:
                raise IssuerUnavailable(self.failure or f"{self.settings.issuer}'s keys are not read yet")
            key = self._match(kid)
        if key is None:
            named = f"key {kid!r}" if kid else "no key id (kid)"
            raise TokenRefused(f"the token names {named}, which {self.settings.issuer} does not publish in its JWKS")
        return key

    def _match(self, kid: str | None) -> jwt.PyJWK | None:
        if kid is None and len(self.keys) == 1:
            return next(iter(self.keys.values()))
        return self.keys.get(kid) if kid is not None else None

    def _read_keys(self) -> None:
        issuer = self.settings.issuer
        if self.jwks_uri is None:
            document = self.fetch(issuer.rstrip("/") + "/.well-known/openid-configuration")
            if document.get("issuer") != issuer:
                raise IssuerUnavailable(f"the discovery document names the issuer {document.get('issuer')!r}, not {issuer!r}; pass --oidc-issuer exactly as the issuer names itself")
            if not isinstance(document.get("jwks_uri"), str):
                raise IssuerUnavailable(f"{issuer}'s discovery document has no jwks_uri")
            self.jwks_uri = document["jwks_uri"]
        try:
            found = jwt.PyJWKSet.from_dict(self.fetch(self.jwks_uri)).keys
        except jwt.PyJWTError as exc:
            raise IssuerUnavailable(f"{self.jwks_uri} holds no usable signing key ({first_line(exc)})") from exc
        self.keys = {k.key_id: k for k in found if k.public_key_use != "enc" and k.algorithm_name in ALGORITHMS}
        self.read_at = self.tried_at = self.clock()
