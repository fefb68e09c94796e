"""The OpenAPI document, completed with what the app does to every route.

FastAPI describes each route's own parameters and answers. The manners every route
shares are added here, once, so no route can forget them:

- every error answer has the one error shape (`Error`), including FastAPI's own 422;
- every route documents 400 (unknown or bad query parameters), 500, and, when it
  touches the database, 503; every route but the health probes documents 429;
- side-effecting routes take the Idempotency-Key header, document its 409 and 422, and
  say that a replayed answer carries Idempotent-Replayed;
- /cron/pipeline needs the bearer CRON_SECRET (a security scheme, and its 401);
- `limit` on list routes shows the configured default and maximum;
- a job `type` in a request body lists the types this deployment runs."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from app.api.deps import JOB_TYPES_MARK, enqueueable_types_of, listed_types_of
from app.api.idempotency import MAX_KEY_LENGTH, REPLAYED, applies
from app.api.ratelimit import TRIGGER_PATH, UNLIMITED_PREFIXES
from app.api.runtime import Runtime
from app.settings import Settings

ERROR_REF = {"$ref": "#/components/schemas/Error"}

ERROR_SCHEMA = {
    "title": "Error",
    "type": "object",
    "description": "The one shape of every answer that is not a success (4xx and 5xx alike).",
    "required": ["error"],
    "additionalProperties": False,
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message", "details"],
            "additionalProperties": False,
            "properties": {
                "code": {"type": "string", "description": "stable, for programs: not_found, unknown_parameter, ..."},
                "message": {"type": "string", "description": "a sentence a person can act on"},
                "details": {"description": "what the code needs to say more (null when nothing)"},
            },
        },
    },
}

COMMON_ERRORS = {
    "400": "unknown_parameter (a query parameter this route does not take), invalid_parameter "
           "(a bad value), invalid_cursor, invalid_idempotency_key, bad_request",
    "500": "internal_error: unexpected; the details are in the server log, never in the answer",
    "503": "database_unavailable or database_not_configured",
    "429": "rate_limited: too many requests from this client this minute (only with REDIS_URL); "
           "see Retry-After",
}

# Request bodies whose `type` names a stage (documented as the enum of this deployment's).
JOB_TYPE_BODIES = ("JobIn", "BatchJobIn")

RETRY_AFTER = {"Retry-After": {"description": "seconds to wait", "schema": {"type": "integer"}}}


def _error_content() -> dict[str, Any]:
    return {"application/json": {"schema": ERROR_REF}}


def _add_error(responses: dict[str, Any], status: str, description: str) -> None:
    if status in responses:
        existing = responses[status].get("description", "")
        if description not in existing:
            responses[status]["description"] = f"{existing}; {description}" if existing else description
    else:
        responses[status] = {"description": description}


# The routes that need an API key and see only the key's tenant (auth.py).
TENANT_PREFIXES = ("/campaigns", "/batches", "/jobs", "/runs", "/audit")


def _complete_operation(path: str, method: str, op: dict[str, Any], settings: Settings) -> None:
    responses = op.setdefault("responses", {})
    health = path.startswith(UNLIMITED_PREFIXES)
    for status in ("400", "500"):
        _add_error(responses, status, COMMON_ERRORS[status])
    if path != "/health/live":
        _add_error(responses, "503", COMMON_ERRORS["503"])
    if not health:
        _add_error(responses, "429", COMMON_ERRORS["429"])
        responses["429"].setdefault("headers", {}).update(RETRY_AFTER)
    if op.get("parameters") or op.get("requestBody"):
        _add_error(responses, "422", "invalid_request: a path parameter or the body is malformed")
    if path.startswith(TENANT_PREFIXES):
        op["security"] = [{"apiKey": []}]
        _add_error(responses, "401", "unauthorized: missing, unknown, revoked or malformed "
                                     "Authorization: Bearer <API key>")
        _add_error(responses, "403", "forbidden: the key may not do this (another account's row, "
                                     "or an admin-only route)")
    if path == TRIGGER_PATH:
        op["security"] = [{"cronSecret": []}]
        for param in op.get("parameters", []):
            if param.get("name") == "budget":  # parsed by hand in cron.py, so FastAPI calls it a string
                param["schema"] = {"type": "number", "exclusiveMinimum": 0}
        _add_error(responses, "401", "unauthorized: missing or wrong Authorization: Bearer <CRON_SECRET>")
        _add_error(responses, "503", "cron_secret_not_configured")
    if applies(method.upper(), path):
        params = op.setdefault("parameters", [])
        if not any(p.get("name") == "Idempotency-Key" for p in params):
            params.append({
                "name": "Idempotency-Key", "in": "header", "required": False,
                "description": "send the same key when you retry this request: the first answer is "
                               "replayed instead of acting twice (kept IDEMPOTENCY_RETENTION_HOURS)",
                "schema": {"type": "string", "minLength": 1, "maxLength": MAX_KEY_LENGTH,
                           "pattern": "^[!-~]+$"}})
        _add_error(responses, "409", "idempotency_in_progress: the first request with this "
                                     "Idempotency-Key has not answered yet; send it again shortly")
        _add_error(responses, "422", "idempotency_key_reused: this Idempotency-Key came with another request")
        _add_error(responses, "413", "payload_too_large: a body over 1 MB with an Idempotency-Key")
        responses["409"].setdefault("headers", {}).update(RETRY_AFTER)
        for status, response in responses.items():
            if status.startswith("2"):
                response.setdefault("headers", {})[REPLAYED] = {
                    "description": "true when this is the stored answer to an earlier request with the "
                                   "same Idempotency-Key", "schema": {"type": "string", "enum": ["true"]}}
    for param in op.get("parameters", []):
        if param.get("in") == "query" and param.get("name") == "limit" \
                and "maximum" not in param.get("schema", {}):
            param["schema"] = {"type": "integer", "minimum": 1, "maximum": settings.page_size_max,
                               "default": settings.page_size_default}
    for status, response in responses.items():
        if status[0] in "45":
            response["content"] = _error_content()


def build_openapi(app: FastAPI, runtime: Runtime) -> dict[str, Any]:
    settings = runtime.settings
    schema = get_openapi(title=app.title, version=app.version, description=app.description,
                         routes=app.routes)
    components = schema.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    schemas["Error"] = ERROR_SCHEMA
    # the job types this deployment runs: anything else is a 422 unknown_job_type
    types = {"enqueueable": enqueueable_types_of(runtime), "listed": listed_types_of(runtime)}
    for name in JOB_TYPE_BODIES:
        prop = schemas.get(name, {}).get("properties", {}).get("type")
        if prop is not None and types["enqueueable"]:
            prop["enum"] = types["enqueueable"]
    components.setdefault("securitySchemes", {})["cronSecret"] = {
        "type": "http", "scheme": "bearer", "description": "CRON_SECRET"}
    components["securitySchemes"]["apiKey"] = {
        "type": "http", "scheme": "bearer",
        "description": "an API key (slk_...): python -m app key create EMAIL; it sees its owner's rows, "
                       "an admin key every tenant's"}
    for path, item in schema.get("paths", {}).items():
        for method, op in item.items():
            if isinstance(op, dict) and "responses" in op:
                _complete_operation(path, method, op, settings)
                for param in op.get("parameters", []):
                    which = param.get("schema", {}).pop(JOB_TYPES_MARK, None)
                    if which in types and types[which]:
                        param["schema"]["enum"] = types[which]
    # FastAPI's own validation error schemas are never sent (errors.py answers in the
    # one shape instead); drop them when nothing refers to them any more.
    text = str(schema["paths"])
    for name in ("HTTPValidationError", "ValidationError"):
        if f"#/components/schemas/{name}'" not in text:
            schemas.pop(name, None)
    return schema


def install(app: FastAPI, runtime: Runtime) -> None:
    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = build_openapi(app, runtime)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
