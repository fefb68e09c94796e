"""Finding jobs (GET /jobs's time and error filters), reading one job's story (GET
/jobs/{id}/timeline) and acting on many (POST /jobs/bulk/retry, POST /jobs/bulk/cancel), against
the real queue; a tenant trying another tenant's ids and filters gets nothing of theirs."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from serving_kit import Recorder, assert_error

from app.api.job_bulk import BULK_MAX
from tests import factories as f


async def _setup(make_client, pool):
    client = await make_client(stages=[Recorder("record").stage, Recorder("export").stage], api_key=False)
    a = await f.tenant(pool, "a@a.example")
    b = await f.tenant(pool, "b@b.example")
    admin = await f.tenant(pool, "root@a.example", admin=True)
    return client, a, b, admin


async def _fail(pool, ids, error="RuntimeError: boom"):
    await pool.execute("UPDATE jobs SET status = 'failed', attempts = 1, last_error = $2, finished_at = now() "
                       "WHERE id = ANY ($1::uuid[])", ids, error)


async def test_time_and_error_filters_find_the_jobs_and_only_the_callers(make_client, pool):
    client, a, b, admin = await _setup(make_client, pool)
    hour_ago = datetime.now(timezone.utc) - timedelta(hours=1)
    old = await f.jobs(pool, "record", 3, lane=a.lane, start=hour_ago - timedelta(days=1))
    new = await f.jobs(pool, "record", 3, lane=a.lane, start=hour_ago)
    theirs = await f.jobs(pool, "record", 2, lane=b.lane, start=hour_ago)
    await _fail(pool, [new[0], theirs[0]], "ValueError: The Upstream said 503")
    await _fail(pool, [new[1]], "KeyError: 'name'")
    await _fail(pool, [new[2]], "OSError: disk 100%_full at C:\\tmp")

    since = (hour_ago - timedelta(minutes=1)).isoformat()
    listed = await client.get("/jobs", params={"since": since}, headers=a.headers)
    assert listed.status_code == 200, listed.text
    assert [j["id"] for j in listed.json()["data"]] == [str(i) for i in reversed(new)]
    until = await client.get("/jobs", params={"until": since}, headers=a.headers)
    assert [j["id"] for j in until.json()["data"]] == [str(i) for i in reversed(old)]
    # the error's text, in any case; b's job with the same error is not a's to see
    found = await client.get("/jobs", params={"error": "upstream SAID"}, headers=a.headers)
    assert [j["id"] for j in found.json()["data"]] == [str(new[0])]
    everyone = await client.get("/jobs", params={"error": "upstream said"}, headers=admin.headers)
    assert {j["id"] for j in everyone.json()["data"]} == {str(new[0]), str(theirs[0])}
    # '%', '_' and '\\' are text, not patterns
    for text in ("%%%", "u_s", "up%", "\\ps"):
        assert (await client.get("/jobs", params={"error": text}, headers=admin.headers)).json()["data"] == [], text
    for text in ("0%_f", ":\\tm"):  # ...and found where the error holds them
        found = await client.get("/jobs", params={"error": text}, headers=admin.headers)
        assert [j["id"] for j in found.json()["data"]] == [str(new[2])], text

    # keyset paging keeps the filters: the cursor goes on from where the page stopped
    first = (await client.get("/jobs", params={"since": since, "limit": 2}, headers=a.headers)).json()
    rest = (await client.get("/jobs", params={"since": since, "limit": 2, "cursor": first["nextCursor"]},
                             headers=a.headers)).json()
    assert [j["id"] for j in first["data"] + rest["data"]] == [str(i) for i in reversed(new)]
    assert_error(await client.get("/jobs", params={"since": until.url.params.get("until") or since,
                                                   "error": "xyz", "cursor": first["nextCursor"]},
                                  headers=a.headers), 400, "invalid_cursor")

    for params in ({"since": "yesterday"}, {"until": "2030-13-01T00:00:00Z"}, {"error": ""}, {"error": "up"},
                   {"error": "x" * 201}, {"text": "boom"}):
        answer = await client.get("/jobs", params=params, headers=a.headers)
        assert_error(answer, 400, "unknown_parameter" if "text" in params else "invalid_parameter")


async def test_a_jobs_timeline_tells_its_story_and_hides_other_tenants_jobs(make_client, pool):
    client, a, b, admin = await _setup(make_client, pool)
    [job] = await f.jobs(pool, "record", 1, lane=a.lane)
    run = await f.run(pool)
    await pool.execute("UPDATE jobs SET errors = job_errors_with(job_errors_with(errors, 1, 'first <b>', $2), "
                       "2, 'second', $2), attempts = 2, status = 'failed', last_error = 'second', "
                       "locked_at = now(), run_id = $2, finished_at = now() WHERE id = $1", job, run)
    retried = await client.post(f"/jobs/{job}/retry", headers=a.headers)
    assert retried.status_code == 200, retried.text

    mine = await client.get(f"/jobs/{job}/timeline", headers=a.headers)
    assert mine.status_code == 200, mine.text
    story = mine.json()
    assert story["job"]["id"] == str(job) and story["job"]["status"] == "pending"
    kinds = [m["kind"] for m in story["timeline"]]
    assert kinds[0] == "enqueued" and kinds.count("attempt_failed") == 2 and kinds[-1] == "due"
    failed = [m for m in story["timeline"] if m["kind"] == "attempt_failed"]
    assert [(m["attempt"], m["text"], m["runId"]) for m in failed] == [(1, "first <b>", str(run)),
                                                                     (2, "second", str(run))]
    assert not any(m["kind"] == "changed" for m in story["timeline"])  # the audit log is the operator's

    told = (await client.get(f"/jobs/{job}/timeline", headers=admin.headers)).json()
    [change] = [m for m in told["timeline"] if m["kind"] == "changed"]
    assert change["text"] == "failed → pending" and change["actor"] == f"user {a.user_id}"

    assert_error(await client.get(f"/jobs/{job}/timeline", headers=b.headers), 404, "not_found")
    assert_error(await client.get(f"/jobs/{job}/timeline?x=1", headers=a.headers), 400, "unknown_parameter")
    assert_error(await client.get("/jobs/not-a-uuid/timeline", headers=a.headers), 422, "invalid_request")


async def test_retry_many_by_id_audits_each_and_skips_what_it_cannot(make_client, pool):
    client, a, b, admin = await _setup(make_client, pool)
    mine = await f.jobs(pool, "record", 4, lane=a.lane)
    theirs = await f.jobs(pool, "record", 1, lane=b.lane)
    await _fail(pool, mine[:3] + theirs)

    answer = await client.post("/jobs/bulk/retry", json={"ids": [str(i) for i in [*mine, *theirs]]}, headers=a.headers)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["changed"] == [str(i) for i in mine[:3]] and body["matched"] == 5 and body["limit"] == BULK_MAX
    assert {s["id"]: s["code"] for s in body["skipped"]} == {str(mine[3]): "job_not_failed",
                                                            str(theirs[0]): "not_found"}
    # b's job is untouched, and a's retries are audited one by one, as a's own
    assert await pool.fetchval("SELECT status FROM jobs WHERE id = $1", theirs[0]) == "failed"
    audited = await pool.fetch("SELECT row_id, actor_kind, actor_id, old_row ->> 'status' AS was, "
                               "new_row ->> 'status' AS now FROM audit_log WHERE table_name = 'jobs' ORDER BY id")
    assert sorted(r["row_id"] for r in audited) == sorted(str(i) for i in mine[:3])
    assert {(r["actor_kind"], r["actor_id"], r["was"], r["now"]) for r in audited} == {
        ("user", str(a.user_id), "failed", "pending")}


async def test_cancel_all_that_match_a_filter_stays_in_the_tenants_lanes(make_client, pool):
    client, a, b, admin = await _setup(make_client, pool)
    mine = await f.jobs(pool, "export", 3, lane=a.lane)
    other_type = await f.jobs(pool, "record", 1, lane=a.lane)
    theirs = await f.jobs(pool, "export", 3, lane=b.lane)

    # a filter naming b's lane finds nothing for a
    across = await client.post("/jobs/bulk/cancel", json={"filter": {"lane": str(b.lane)}}, headers=a.headers)
    assert across.status_code == 200 and across.json()["matched"] == 0, across.text
    preview = await client.post("/jobs/bulk/cancel", json={"filter": {"type": "export"}, "dry_run": True},
                                headers=a.headers)
    assert preview.json()["matched"] == 3 and preview.json()["more"] is False
    assert await pool.fetchval("SELECT count(*) FROM jobs WHERE status = 'pending'") == 7  # a dry run
    done = await client.post("/jobs/bulk/cancel", json={"filter": {"type": "export"}}, headers=a.headers)
    assert sorted(done.json()["changed"]) == sorted(str(i) for i in mine)
    statuses = dict(await pool.fetch("SELECT id, status FROM jobs"))
    assert all(statuses[i] != "pending" for i in mine)
    assert all(statuses[i] == "pending" for i in [*other_type, *theirs])
    # a status this action does not change matches nothing
    assert (await client.post("/jobs/bulk/cancel", json={"filter": {"status": "done"}},
                              headers=admin.headers)).json()["matched"] == 0


async def test_a_filter_acts_on_at_most_the_bound_and_says_more_remain(make_client, pool):
    client, a, _, _ = await _setup(make_client, pool)
    await f.jobs(pool, "record", BULK_MAX + 2, lane=a.lane)
    answer = await client.post("/jobs/bulk/cancel", json={"filter": {}, "dry_run": True}, headers=a.headers)
    assert answer.json()["matched"] == BULK_MAX and answer.json()["more"] is True


async def test_bad_bulk_bodies_get_the_one_error_shape(make_client, pool):
    client, a, _, _ = await _setup(make_client, pool)
    for body in ({}, {"ids": []}, {"ids": ["x"]}, {"ids": [], "filter": {}},
                 {"ids": [str(a.lane)] * (BULK_MAX + 1)}, {"filter": {"status": "failed"}, "more": 1},
                 {"filter": {"colour": "red"}}, {"filter": {"type": None}}):
        assert_error(await client.post("/jobs/bulk/retry", json=body, headers=a.headers), 422, "invalid_request")
    for flt in ({"type": "nope"}, {"since": "soon"}, {"lane": "1"}, {"status": "lost"}):
        assert_error(await client.post("/jobs/bulk/cancel", json={"filter": flt}, headers=a.headers), 422,
                     "invalid_filter")
    assert_error(await client.post("/jobs/bulk/retry?all=1", json={"ids": [str(a.lane)]}, headers=a.headers), 400,
                 "unknown_parameter")
    assert_error(await client.post("/jobs/bulk/retry", json={"ids": [str(a.lane)]}), 401, "unauthorized")


async def test_a_bulk_retry_keeps_to_the_waiting_limit_and_the_dedupe_key(make_client, pool, dsn):
    """As one retry does: a tenant's key makes at most TENANT_WAITING_JOBS_MAX jobs wait, and a
    job whose dedupe key an open job holds stays failed; each is named in `skipped`."""
    from serving_kit import make_settings
    client = await make_client(make_settings(dsn, tenant_waiting_jobs_max=3, pipeline_plugins=""),
                               stages=[Recorder("record").stage], api_key=False)
    a = await f.tenant(pool, "a@a.example")
    await f.jobs(pool, "record", 1, lane=a.lane)                       # one waits already
    await f.jobs(pool, "record", 1, lane=a.lane, dedupe_key="k")       # open, holding "k"
    failed = await f.jobs(pool, "record", 4, lane=a.lane)
    await _fail(pool, failed)
    await pool.execute("UPDATE jobs SET dedupe_key = 'k' WHERE id = $1", failed[3])  # the newest: tried first

    answer = await client.post("/jobs/bulk/retry", json={"filter": {}}, headers=a.headers)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    codes = {s["id"]: s["code"] for s in body["skipped"]}
    assert codes == {str(failed[3]): "dedupe_key_taken", str(failed[1]): "waiting_jobs_limit",
                     str(failed[0]): "waiting_jobs_limit"}
    assert body["changed"] == [str(failed[2])]  # 2 waited, 3 may
    assert await pool.fetchval("SELECT count(*) FROM jobs WHERE status = 'pending'") == 3
