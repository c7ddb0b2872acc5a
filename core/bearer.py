"""The front door's token: one API key, carried as `authorization: Bearer <key>` (gRPC
metadata; the same header over HTTP). Pure Python so that every front door shares it:
the conductor's interceptor (conductor/auth.py), a gateway, and the clients that send it.

    check_bearer(header_value, api_key)     # raises Unauthenticated unless it matches
    bearer_metadata(api_key)                # what a client sends: (("authorization", ...),)

The comparison is constant-time (hmac.compare_digest): the time to refuse a token says
nothing about the key.
"""
from __future__ import annotations

import hmac

from core.errors import Unauthenticated

API_KEY_ENV = "STARMESH_API_KEY"  # where the conductor, `starmesh up` and the clients read the key
AUTHORIZATION = "authorization"   # gRPC metadata keys are lowercase
SCHEME = "Bearer "


def check_bearer(header_value: str | None, api_key: str) -> None:
    """Raises Unauthenticated unless `header_value` is "Bearer <api_key>"."""
    if not api_key:
        raise ValueError("api_key is empty: a front door without a key checks nothing")
    if not header_value:
        raise Unauthenticated(f"missing {AUTHORIZATION} metadata: send '{AUTHORIZATION}: Bearer <api key>'")
    token = bearer_token(header_value)
    if token is None:
        raise Unauthenticated(f"{AUTHORIZATION} metadata: expected the Bearer scheme")
    if not hmac.compare_digest(token.encode(), api_key.encode()):
        raise Unauthenticated(f"{AUTHORIZATION} metadata: wrong api key")


def bearer_token(header_value: str) -> str | None:
    """The token of "Bearer <token>" (the scheme in any case), None for another scheme."""
    if header_value[:len(SCHEME)].lower() != SCHEME.lower():
        return None
    return header_value[len(SCHEME):].strip()


def bearer_metadata(api_key: str) -> tuple[tuple[str, str], ...]:
    """The call metadata that carries `api_key` (empty without one)."""
    return ((AUTHORIZATION, f"{SCHEME}{api_key}"),) if api_key else ()
