"""Query-string discipline shared by the routes: a parameter a route does not know is
a 400 that names it, never silently ignored."""

from __future__ import annotations

from fastapi import Request

from app.api.errors import ApiError


def only_params(*allowed: str):
    """A dependency that rejects query parameters other than `allowed`."""

    def check(request: Request) -> None:
        unknown = sorted(set(request.query_params) - set(allowed))
        if unknown:
            known = ", ".join(repr(a) for a in allowed) or "none"
            raise ApiError(400, "unknown_parameter",
                           f"unknown query parameter {unknown[0]!r}; this route takes: {known}",
                           {"unknown": unknown, "allowed": list(allowed)})

    return check
