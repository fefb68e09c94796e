"""The OpenAPI document, completed with what the app does to every route.

FastAPI describes each route's own parameters and answers. The manners every route
shares are added here, once, so no route can forget them:

- every error answer has the one error shape (`Error`), including FastAPI's own 422;
- every route documents 400 (unknown or bad query parameters), 405 (another method on
  its path), 413 (a body over MAX_BODY_BYTES, whatever the method), 500, and, when it
  touches the database, 503; every route but the health probes documents 429;
- side-effecting routes take the Idempotency-Key header, document its 409 and 422, and
  say that a replayed answer carries Idempotent-Replayed;
- /cron/pipeline needs the bearer CRON_SECRET (a security scheme, and its 401);
- `limit` on list routes shows the configured default and maximum;
- a job `type` in a request body lists the types this deployment runs, and each stage's
  declared payload is a component, with an example job per type;
- links say which operation follows from an answer (a new job's id to its cancel)."""

from __future__ import annotations

from typing import Any, Sequence

from fastapi import APIRouter, FastAPI
from fastapi.openapi.utils import get_openapi

from app.api.deps import JOB_TYPES_MARK, enqueueable_types_of, listed_types_of
from app.api.idempotency import MAX_KEY_LENGTH, REPLAYED, applies
from app.api.ratelimit import TRIGGER_PATH, UNLIMITED_PREFIXES
from app.runtime import Runtime
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
    "405": "method_not_allowed: this path does not take that method; Allow lists the ones it does",
    "500": "internal_error: unexpected; the details are in the server log, never in the answer",
    "503": "database_unavailable or database_not_configured",
    "429": "rate_limited: too many requests from this client this minute (only with REDIS_URL); "
           "see Retry-After",
}

# Request bodies whose `type` names a stage (documented as the enum of this deployment's).
JOB_TYPE_BODIES = ("JobIn", "BatchJobIn")

RETRY_AFTER = {"Retry-After": {"description": "seconds to wait", "schema": {"type": "integer"}}}
ALLOW = {"Allow": {"description": "the methods this path takes", "schema": {"type": "string"}}}


def _error_content() -> dict[str, Any]:
    return {"application/json": {"schema": ERROR_REF}}


def _add_error(responses: dict[str, Any], status: str, description: str) -> None:
    if status in responses:
        existing = responses[status].get("description", "")
        if description not in existing:
            responses[status]["description"] = f"{existing}; {description}" if existing else description
    else:
        responses[status] = {"description": description}


def _complete_operation(path: str, method: str, op: dict[str, Any], settings: Settings,
                        tenant: bool) -> None:
    responses = op.setdefault("responses", {})
    health = path.startswith(UNLIMITED_PREFIXES)
    for status in ("400", "405", "500"):
        _add_error(responses, status, COMMON_ERRORS[status])
    _add_error(responses, "413", f"payload_too_large: the request body is over {settings.max_body_bytes} "
                                 "bytes (MAX_BODY_BYTES), refused as it streams in; body_too_complex: a JSON "
                                 f"body of more than {settings.json_max_values} values (JSON_MAX_VALUES), an "
                                 f"object of more than {settings.json_max_object_keys} keys "
                                 "(JSON_MAX_OBJECT_KEYS) or nested deeper than 64, refused before it is parsed")
    _add_error(responses, "408", f"request_timeout: the request body did not arrive within "
                                 f"{settings.request_body_timeout_seconds:g} s of its headers "
                                 "(REQUEST_BODY_TIMEOUT_SECONDS); the connection is closed")
    responses["405"].setdefault("headers", {}).update(ALLOW)
    if path != "/health/live":
        _add_error(responses, "503", COMMON_ERRORS["503"])
    if not health:
        _add_error(responses, "429", COMMON_ERRORS["429"])
        responses["429"].setdefault("headers", {}).update(RETRY_AFTER)
    if op.get("parameters") or op.get("requestBody"):
        _add_error(responses, "422", "invalid_request: a path parameter or the body is malformed")
    if tenant:
        op["security"] = [{"apiKey": []}]
        _add_error(responses, "401", "unauthorized: missing, unknown, revoked or malformed "
                                     "Authorization: Bearer <API key>")
        _add_error(responses, "403", "forbidden: the key may not do this (another account's row, "
                                     "or an admin-only route)")
        _add_error(responses, "503", "statement_timeout: a statement ran past TENANT_STATEMENT_TIMEOUT_SECONDS "
                                     "and the request was rolled back; see Retry-After")
        responses["503"].setdefault("headers", {}).update(RETRY_AFTER)
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


# Links between operations: what a client (or schemathesis's stateful phase) does next
# with what an answer names. (from path, method, statuses) -> (to path, method), parameters.
LINKS = [
    (("/jobs", "post", ("200", "201")),
     [("/jobs/{job_id}", "get"), ("/jobs/{job_id}/cancel", "post"), ("/jobs/{job_id}/retry", "post")],
     {"job_id": "$response.body#/job/id"}),
    (("/jobs/{job_id}/cancel", "post", ("200",)), [("/jobs/{job_id}/retry", "post")], {"job_id": "$response.body#/id"}),
    (("/jobs/{job_id}/retry", "post", ("200",)), [("/jobs/{job_id}/cancel", "post")], {"job_id": "$response.body#/id"}),
    (("/lanes/{lane_id}/batches", "post", ("201",)),
     [("/batches/{batch_id}", "get"), ("/batches/{batch_id}/cancel", "post")],
     {"batch_id": "$response.body#/batchId"}),
]


def _add_links(paths: dict[str, Any]) -> None:
    for (path, method, statuses), targets, parameters in LINKS:
        responses = paths.get(path, {}).get(method, {}).get("responses", {})
        for status in statuses:
            for to_path, to_method in targets:
                target = paths.get(to_path, {}).get(to_method)
                if status in responses and target and "operationId" in target:
                    name = target["operationId"]
                    responses[status].setdefault("links", {})[name] = {
                        "operationId": name, "parameters": parameters}


def _declare_payloads(schemas: dict[str, Any], runtime: Runtime) -> None:
    """Each stage's declared payload (`Stage(payload=Model)`) as a component that the job
    bodies' `payload` names, and an example job for each type whose payload is known."""
    declared: dict[str, str] = {}
    examples: list[dict[str, Any]] = []
    for stage in runtime.stages:
        if stage.internal:
            continue
        if stage.payload is None:
            examples.append({"type": stage.type, "payload": {}})
            continue
        model = stage.payload.model_json_schema(ref_template="#/components/schemas/{model}")
        for name, sub in model.pop("$defs", {}).items():
            schemas.setdefault(name, sub)
        schemas.setdefault(stage.payload.__name__, model)
        declared[stage.type] = stage.payload.__name__
        examples.extend({"type": stage.type, "payload": e} for e in model.get("examples", [])[:1])
    for body in JOB_TYPE_BODIES:
        payload = schemas.get(body, {}).get("properties", {}).get("payload")
        if payload is not None and declared:
            payload["description"] = (payload.get("description", "") + "; declared by type: " + ", ".join(
                f"{t}: #/components/schemas/{name}" for t, name in declared.items()))
    if examples and "JobIn" in schemas:
        schemas["JobIn"]["examples"] = examples
    if examples and "BatchIn" in schemas:
        schemas["BatchIn"]["examples"] = [{"jobs": examples}]


def build_openapi(app: FastAPI, runtime: Runtime, tenant_routers: Sequence[APIRouter]) -> dict[str, Any]:
    """tenant_routers: what main.py mounted behind an API key and row-level security (the
    same list, so the document cannot drift from what is served)."""
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
    _declare_payloads(schemas, runtime)
    for body in schemas.values():  # a body's field that takes a job type (a bulk action's filter)
        for prop in body.get("properties", {}).values():
            which = prop.pop(JOB_TYPES_MARK, None)
            if which in types and types[which]:
                prop["enum"] = types[which]
    components.setdefault("securitySchemes", {})["cronSecret"] = {
        "type": "http", "scheme": "bearer", "description": "CRON_SECRET"}
    components["securitySchemes"]["apiKey"] = {
        "type": "http", "scheme": "bearer",
        "description": "an API key (slk_...): skiplock key create EMAIL; it sees its owner's rows, "
                       "an admin key every tenant's"}
    tenant_routes = {route.path for router in tenant_routers for route in router.routes}
    for path, item in schema.get("paths", {}).items():
        for method, op in item.items():
            if isinstance(op, dict) and "responses" in op:
                _complete_operation(path, method, op, settings,
                                    tenant=path in tenant_routes)
                for param in op.get("parameters", []):
                    which = param.get("schema", {}).pop(JOB_TYPES_MARK, None)
                    if which in types and types[which]:
                        param["schema"]["enum"] = types[which]
    _add_links(schema.get("paths", {}))
    # FastAPI's own validation error schemas are never sent (errors.py answers in the
    # one shape instead); drop them when nothing refers to them any more.
    text = str(schema["paths"])
    for name in ("HTTPValidationError", "ValidationError"):
        if f"#/components/schemas/{name}'" not in text:
            schemas.pop(name, None)
    return schema


def install(app: FastAPI, runtime: Runtime, tenant_routers: Sequence[APIRouter]) -> None:
    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = build_openapi(app, runtime, tenant_routers)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
