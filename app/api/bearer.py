"""`Authorization: Bearer <token>`, read the same way by the cron route and the API keys."""

from __future__ import annotations

from fastapi import Request

from app.api.errors import ApiError


def challenge(realm: str) -> dict[str, str]:
    return {"WWW-Authenticate": f'Bearer realm="{realm}"'}


def bearer_token(request: Request, realm: str, what: str) -> str:
    """The token, or a 401 saying what to send (`what`: "<CRON_SECRET>", "<API key>")."""
    header = request.headers.get("authorization")
    if not header:
        raise ApiError(401, "unauthorized", f"missing header: Authorization: Bearer {what}",
                       headers=challenge(realm))
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise ApiError(401, "unauthorized", f"the Authorization header must be: Bearer {what}",
                       headers=challenge(realm))
    return token.strip()
