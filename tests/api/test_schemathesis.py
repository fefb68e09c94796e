"""Schemathesis against the app's own OpenAPI document, through a real uvicorn and the
real database: for every operation, generated valid and invalid requests, with
schemathesis's checks (no 5xx, every status, header and body as documented, invalid
input refused, valid input accepted). Bounded: a few examples per operation, derandomized
so CI sees the same requests every time."""

from __future__ import annotations

import asyncio
import uuid

import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.specs.openapi.checks import positive_data_acceptance
from serving_kit import AUTH, Recorder, make_settings

from tests import factories as f

EXAMPLES = 12

# Operations whose body schema is looser than their validation (a valid-looking value
# can be a 422), so "schema-valid input is accepted" is not checked there. Every other
# check still runs on them, the 5xx one included.
LOOSER_SCHEMAS = {
    "POST /campaigns",  # `url` is any string in the schema; the route takes http(s) URLs only
    # `payload` is any JSON object in the schema, but PostgreSQL's jsonb cannot hold a
    # "\u0000" in its text: that is a 422 invalid_value saying so
    "POST /jobs",
    "POST /campaigns/{campaign_id}/batches",
}


def fuzz(document: dict, base_url: str, campaign_id: str, api_auth: dict) -> tuple[list[str], int]:
    """Failures (one line each) and the number of requests sent."""
    schema = schemathesis.openapi.from_dict(document)
    failures: list[str] = []
    sent = 0
    for result in schema.get_all_operations():
        operation = result.ok()
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

            @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
                      phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
            @given(case=operation.as_strategy(generation_mode=mode))
            def check(case) -> None:
                nonlocal sent
                sent += 1
                if case.headers and "Idempotency-Key" in case.headers:
                    # one key per generated request: reusing a key for another request is a
                    # documented 422 (tests/api/test_idempotency.py), not something to rediscover
                    case.headers["Idempotency-Key"] = str(uuid.uuid4())
                if mode is GenerationMode.POSITIVE and isinstance(case.body, dict) and case.body.get("campaign_id"):
                    # a made-up campaign is a 422 unknown_campaign; point it at a real one
                    case.body["campaign_id"] = campaign_id
                auth = dict(AUTH) if operation.path.startswith("/cron") else dict(api_auth)
                response = case.call(base_url=base_url, headers=auth, timeout=30)
                assert response.status_code < 500, f"{response.status_code}: {response.text[:300]}"
                excluded = []
                if case.query and "cursor" in case.query:
                    # a schema cannot say "a cursor this API issued": a well-formed but
                    # made-up one is rightly a 400 invalid_cursor
                    excluded.append(positive_data_acceptance)
                if operation.label in LOOSER_SCHEMAS:
                    excluded.append(positive_data_acceptance)
                case.validate_response(response, headers=auth, excluded_checks=excluded,
                                       transport_kwargs={"base_url": base_url})

            try:
                check()
            except Unsatisfiable:
                assert mode is GenerationMode.NEGATIVE  # nothing to get wrong (no parameters)
            except BaseException as exc:  # noqa: BLE001 - report them all, not just the first
                failures.append(f"{operation.label} [{mode.value}]: {str(exc)[:1500]}")
    return failures, sent


async def test_schemathesis_finds_no_5xx_and_no_undocumented_answer(make_client, pool, dsn, admin_headers):
    # a stand-in 'brief' stage, so POST /campaigns is served and no run ever fetches
    # the made-up sites it is given
    stages = [Recorder("brief").stage, Recorder("record").stage]
    client = await make_client(make_settings(dsn, idempotency_wait_seconds=0.5), stages=stages, via="uvicorn")
    campaign = await f.campaign(pool)
    await f.jobs(pool, "record", 3, campaign_id=campaign)
    await f.run(pool)
    document = (await client.get("/openapi.json")).json()
    failures, sent = await asyncio.to_thread(fuzz, document, str(client.base_url).rstrip("/"),
                                           str(campaign), admin_headers)
    assert sent > 100, sent
    print(f"schemathesis: {sent} requests")
    assert not failures, "\n\n".join(failures)


async def test_the_document_describes_every_route_and_error(make_client):
    client = await make_client(make_settings(None), stages=[Recorder("record").stage])
    document = (await client.get("/openapi.json")).json()
    assert "HTTPValidationError" not in document["components"]["schemas"]
    operations = [(path, method, op) for path, item in document["paths"].items() for method, op in item.items()]
    assert {("/jobs", "get"), ("/jobs", "post"), ("/jobs/{job_id}", "get"), ("/jobs/{job_id}/retry", "post"),
            ("/jobs/{job_id}/cancel", "post"), ("/runs", "get"), ("/runs/{run_id}", "get")} \
        <= {(p, m) for p, m, _ in operations}
    for path, method, op in operations:
        responses = op["responses"]
        assert {"400", "500"} <= set(responses), (path, method)
        for status, response in responses.items():
            if status[0] in "45":
                assert response["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Error"}
                assert response["description"]
        headers = {p["name"] for p in op.get("parameters", []) if p["in"] == "header"}
        side_effect = method in ("post", "put", "patch", "delete") or path == "/cron/pipeline"
        assert ("Idempotency-Key" in headers) == side_effect, (path, method)
        if not path.startswith("/health/"):
            assert "429" in responses
    jobs_list = {p["name"]: p for p in document["paths"]["/jobs"]["get"]["parameters"]}
    assert set(jobs_list) == {"status", "type", "campaign_id", "batch_id", "limit", "cursor"}
    assert jobs_list["limit"]["schema"]["maximum"] == 200
    assert "record" in jobs_list["type"]["schema"]["enum"]
    assert document["components"]["schemas"]["JobIn"]["properties"]["type"]["enum"] == ["record"]
    assert document["paths"]["/cron/pipeline"]["post"]["security"] == [{"cronSecret": []}]
