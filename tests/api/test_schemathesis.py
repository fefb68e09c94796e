"""Schemathesis against the app's own OpenAPI document, from outside: a real uvicorn and
the real database, an admin API key and the cron secret, run by schemathesis's own
engine as `st run --checks all --phases examples,coverage,fuzzing,stateful` runs it.
Every phase and every check; bounded (MAX_EXAMPLES per operation, a fixed seed) so a
run stays well under a minute and sends the same requests every time.

Left out, because no schema can carry it (every other check, the 5xx one included,
runs on every request):

- positive_data_acceptance ("schema-valid input is accepted") on a request with a
  `cursor`: a schema cannot say "a cursor this API issued", so a well-formed made-up
  one is rightly a 400 invalid_cursor;
- positive_data_acceptance on the bodies in LOOSER_SCHEMAS, for the reasons given there;
- positive_data_acceptance on a request with a path parameter of None: the stateful
  phase also follows links it infers itself, some through a field that may be null (a
  job's `batchId`), picks among the values with true randomness, and sends a null as
  the text "None" (`GET /batches/None`), a rightful 422.

Each generated request carries a fresh Idempotency-Key: reusing a key for another
request is a documented 422 (tests/api/test_idempotency.py), not something to find
again on every operation. And a lane id in schema-valid requests names a real lane, so
the batch and job routes are fuzzed past "no such lane". (The example plug-in's routes
are fuzzed the same way by tests/outreach/test_schemathesis.py.)"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass, field

import schemathesis
from schemathesis.config import SchemathesisConfig
from schemathesis.engine import Status, events, from_schema
from pydantic import BaseModel, ConfigDict, Field, StrictInt
from schemathesis.generation import GenerationMode

from app.pipeline.stage import Stage
from tests import factories as f
from tests.api.serving_kit import SECRET, Recorder, make_settings

PHASES = ("examples", "coverage", "fuzzing", "stateful")
MAX_EXAMPLES = 5
SEED = 20240611

# Bodies whose schema is looser than their validation: a schema-valid one can be a 422.
LOOSER_SCHEMAS = {
    # `payload` is any JSON object for a type that declares none, but jsonb cannot hold
    # "\u0000" (a 422 saying so); and a payload must be the one its `type` declares
    "POST /jobs",
    "POST /lanes/{lane_id}/batches",
}


@dataclass
class Outcome:
    requests: int = 0
    failures: list[str] = field(default_factory=list)
    phases: dict[str, str] = field(default_factory=dict)
    server_errors: int = 0
    transitions: int = 0  # links the stateful phase follows


def fuzz(document: dict, base_url: str, api_key: str, lane_id: str, *, looser: set[str] = LOOSER_SCHEMAS,
         lane_params: tuple[str, ...] = ("lane_id",), paths: str | None = None) -> Outcome:
    """Every phase and check against the served `document` (its paths matching the regex
    `paths`, if given). `looser`: the operations whose schema-valid bodies may rightly be
    refused; `lane_params`: the path parameters that name a lane, all given `lane_id`."""
    config = SchemathesisConfig.from_dict({
        "seed": SEED,
        "base-url": base_url,
        "workers": 1,
        "auth": {"openapi": {"apiKey": {"bearer": api_key}, "cronSecret": {"bearer": SECRET}}},
        "checks": {"enabled": True},
        "phases": {phase: {"enabled": True} for phase in PHASES},
        "generation": {"max-examples": MAX_EXAMPLES},
    })
    schema = schemathesis.openapi.from_dict(document, config=config)
    if paths is not None:
        schema = schema.include(path_regex=paths)

    def not_applicable(ctx, failure, case, response) -> bool:
        """filter_failure: keep every failure but the inapplicable ones named above."""
        if "positive_data_acceptance" not in getattr(failure, "checks", ()):
            return True
        return not ((case.query and "cursor" in case.query) or case.operation.label in looser
                    or any(value is None for value in (case.path_parameters or {}).values()))

    schema.hook("filter_failure")(not_applicable)

    def fresh_key_and_real_lane(ctx, case, kwargs) -> None:
        if case.headers and "Idempotency-Key" in case.headers:
            case.headers["Idempotency-Key"] = str(uuid.uuid4())
        if case.meta is None or case.meta.generation.mode is not GenerationMode.POSITIVE:
            return
        for name in lane_params:
            if case.path_parameters and name in case.path_parameters:
                case.path_parameters[name] = lane_id
        if isinstance(case.body, dict) and case.body.get("lane"):
            case.body["lane"] = lane_id

    schemathesis.hook("before_call")(fresh_key_and_real_lane)  # a global hook: only there
    outcome = Outcome()
    try:
        for event in from_schema(schema).execute():
            if isinstance(event, events.PhaseStarted) and isinstance(event.payload, events.StatefulPhasePayload):
                outcome.transitions = event.payload.transitions_selected
            elif isinstance(event, events.PhaseFinished):
                outcome.phases[event.phase.name.value] = event.status.value
            elif isinstance(event, (events.ScenarioFinished, events.FuzzScenarioFinished)):
                recorder = event.recorder
                outcome.requests += len(recorder.interactions)
                outcome.server_errors += sum(1 for i in recorder.interactions.values()
                                             if i.response is not None and i.response.status_code >= 500)
                for case_id, checks in recorder.checks.items():
                    for check in checks:
                        if check.status is Status.FAILURE:
                            interaction = recorder.interactions.get(case_id)
                            request = interaction.request if interaction else None
                            response = interaction.response if interaction else None
                            outcome.failures.append(
                                f"{recorder.label} [{check.name}] "
                                f"{request.method + ' ' + request.uri if request else ''}"
                                f" body={(request.body if request else '')!r:.300}"
                                f" -> {response.status_code if response else ''}"
                                f" {(response.content if response else b'')[:300]!r}: "
                                f"{str(check.failure_info.failure if check.failure_info else '')[:600]}")
            elif isinstance(event, events.NonFatalError):
                outcome.failures.append(f"error in {event.label}: {str(event.value)[:600]}")
            elif isinstance(event, events.FatalError):
                outcome.failures.append(f"fatal: {event.exception}")
    finally:
        schemathesis.hooks.unregister(fresh_key_and_real_lane)
    return outcome


def assert_found_nothing(outcome: Outcome, at_least: int = 300) -> None:
    """No failure, no 5xx, every phase a success, after at least `at_least` requests and a
    link followed."""
    print(f"schemathesis: {outcome.requests} requests, {outcome.transitions} links, phases {outcome.phases}")
    assert not outcome.failures, "\n\n".join(outcome.failures)
    assert outcome.server_errors == 0
    assert {phase: outcome.phases.get(phase) for phase in PHASES} == {phase: "success" for phase in PHASES}
    assert outcome.requests > at_least and outcome.transitions > 0, outcome


EXAMPLE_IMAGE = "0b7e2c1a-5d4f-4e3b-9a8c-1f2e3d4c5b6a"


class ResizePayload(BaseModel):
    """A payload a stage declares, so declared payloads get fuzzed too."""
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"image_id": EXAMPLE_IMAGE}]})
    image_id: uuid.UUID
    width: StrictInt = Field(100, ge=1, le=100)


async def test_schemathesis_every_phase_every_check_finds_nothing(make_client, pool, dsn, admin_key):
    async def noop(job, ctx) -> None:
        return None

    stages = [Recorder("record").stage, Stage(type="resize", handler=noop, payload=ResizePayload, lease=60, timeout=10)]
    client = await make_client(make_settings(dsn, idempotency_wait_seconds=0.5), stages=stages, via="uvicorn")
    lane = await f.lane(pool, await f.user(pool))
    await f.jobs(pool, "record", 3, lane=lane)
    await f.run(pool)
    document = (await client.get("/openapi.json")).json()
    assert_found_nothing(await asyncio.to_thread(fuzz, document, str(client.base_url).rstrip("/"), admin_key,
                                                 str(lane)))


async def test_the_document_describes_every_route_and_error(make_client):
    client = await make_client(make_settings(None), stages=[Recorder("record").stage])
    document = (await client.get("/openapi.json")).json()
    assert "HTTPValidationError" not in document["components"]["schemas"]
    operations = [(path, method, op) for path, item in document["paths"].items() for method, op in item.items()]
    assert {("/jobs", "get"), ("/jobs", "post"), ("/jobs/{job_id}", "get"), ("/jobs/{job_id}/retry", "post"),
            ("/jobs/{job_id}/cancel", "post"), ("/runs", "get"), ("/runs/{run_id}", "get"), ("/trends", "get")} \
        <= {(p, m) for p, m, _ in operations}
    for path, method, op in operations:
        responses = op["responses"]
        assert {"400", "405", "413", "500"} <= set(responses), (path, method)
        assert "Allow" in responses["405"]["headers"]
        for status, response in responses.items():
            if status[0] in "45":
                assert response["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Error"}
                assert response["description"]
        headers = {p["name"] for p in op.get("parameters", []) if p["in"] == "header"}
        side_effect = method in ("post", "put", "patch", "delete") or path == "/cron/pipeline"
        assert ("Idempotency-Key" in headers) == side_effect, (path, method)
        if op.get("requestBody"):
            assert "422" in responses, (path, method)
        if not path.startswith("/health/"):
            assert "429" in responses
    jobs_list = {p["name"]: p for p in document["paths"]["/jobs"]["get"]["parameters"]}
    assert set(jobs_list) == {"status", "type", "lane", "batch_id", "since", "until", "error", "limit", "cursor"}
    assert jobs_list["limit"]["schema"]["maximum"] == 200
    assert "record" in jobs_list["type"]["schema"]["enum"]
    schemas = document["components"]["schemas"]
    assert schemas["JobIn"]["properties"]["type"]["enum"] == ["record"]
    assert schemas["JobIn"]["examples"] == [{"type": "record", "payload": {}}]
    assert schemas["BatchJobIn"]["properties"]["total"]["anyOf"][0]["maximum"] == 1_000_000
    assert document["paths"]["/cron/pipeline"]["post"]["security"] == [{"cronSecret": []}]
    trends_window = document["paths"]["/trends"]["get"]["parameters"][0]
    assert (trends_window["name"], trends_window["schema"]["enum"]) == ("window", ["hour", "day"])


async def test_declared_payloads_are_in_the_document(make_client):
    async def noop(job, ctx) -> None:
        return None

    client = await make_client(make_settings(None), stages=[
        Stage(type="resize", handler=noop, payload=ResizePayload, lease=60, timeout=10)])
    schemas = (await client.get("/openapi.json")).json()["components"]["schemas"]
    assert schemas["ResizePayload"]["properties"]["width"]["maximum"] == 100
    assert "resize: #/components/schemas/ResizePayload" in schemas["JobIn"]["properties"]["payload"]["description"]
    assert schemas["JobIn"]["examples"] == [{"type": "resize", "payload": {"image_id": EXAMPLE_IMAGE}}]
