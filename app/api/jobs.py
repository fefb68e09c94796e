"""Jobs over HTTP: list (keyset pages), look up, enqueue, retry and cancel.

Thin over app.engine.jobs (enqueue) and app.engine.job_admin (the rest)."""

from __future__ import annotations

import uuid
from datetime import datetime, timezone
from typing import Any, Literal

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, StrictBool, field_validator

from app.api.cache import CACHED, cached_json, forget
from app.api.deps import JOB_TYPES_MARK, enqueueable_types, listed_types, pool_of
from app.api.errors import ApiError
from app.api.json_numbers import JsonInt
from app.api.pagination import ListQuery, Param, enum_param, text_param, time_param, uuid_param
from app.api.payloads import not_admitted
from app.api.params import only_params
from app.engine import job_admin
from app.engine.jobs import DEFAULT_LANE, MAX_DEDUPE_KEY_CHARS, PRIORITY_MAX, PRIORITY_MIN, holder_of_key
from app.json_values import iso
from app.runtime import job_json
from app.pipeline import admission, outcomes

router = APIRouter(tags=["jobs"])

CANCELLED = "cancelled"  # a status of its own: the job was cancelled (docs/queue.md#words)
STATUSES = ("pending", "running", "done", "failed", CANCELLED, "waiting")
EARLIEST = datetime(1970, 1, 1, tzinfo=timezone.utc)
LATEST = datetime(9999, 1, 1, tzinfo=timezone.utc)


def _type_param() -> Param:
    def parse(raw: str, request: Request) -> str:
        known = listed_types(request)
        if raw not in known:
            raise ValueError(f"unknown job type {raw[:40]!r}; the types are: {', '.join(known)}")
        return raw
    return Param("type", "only jobs of this type (a stage's type, or maintenance / notify)",
                 {"type": "string", "minLength": 1, "maxLength": 100, JOB_TYPES_MARK: "listed"}, parse)


JOB_LIST = ListQuery("jobs", [
    enum_param("status", "only jobs in this status", STATUSES),
    _type_param(),
    uuid_param("lane", "only jobs of this lane"),
    uuid_param("batch_id", "only jobs of this batch"),
    time_param("since", "only jobs created at or after this time (no time zone: UTC)"),
    time_param("until", "only jobs created before this time (no time zone: UTC)"),
    # three characters or more: what a trigram index can look up (migration 0066)
    text_param("error", "only jobs whose last_error contains this text, in any case", min_length=3),
])


class AttemptError(BaseModel):
    attempt: int = Field(description="which attempt failed (1 is the first)")
    error: str
    runId: uuid.UUID | None = Field(description="the run that held it")
    at: datetime


class JobOut(BaseModel):
    id: uuid.UUID
    type: str
    status: Literal["pending", "running", "done", "failed", "cancelled", "waiting"]
    payload: dict[str, Any]
    dedupeKey: str | None
    attempts: int = Field(description="attempts started (grows at claim time)")
    runAfter: datetime = Field(description="not claimed before this time")
    lockedAt: datetime | None = Field(description="when the current (or last) holder claimed it")
    lastError: str | None = Field(description="why the last attempt failed")
    runId: uuid.UUID | None = Field(description="the run that holds, or last held, the job")
    batchId: uuid.UUID | None
    lane: uuid.UUID = Field(description="the fairness lane (all zeros: the default lane, work nobody owns)")
    priority: int = Field(description="its rank within its lane: higher is claimed first, then oldest (0 unless "
                                      "the enqueue said)")
    total: int | None = Field(description="expected units of work, when the job said")
    progress: int | None = Field(description="units done so far, when the job said")
    createdAt: datetime
    finishedAt: datetime | None
    errors: list[AttemptError] | None = Field(None, description="every failed attempt's error, newest "
                                              "first, the last 20 (GET /jobs/{id} only; lists leave it out)")
    cancelRequestedAt: datetime | None = Field(None, description="when a cancel was asked for (GET /jobs/{id} "
                                               "and a cancel's answer only; absent when none was): a running "
                                               "job with one is stopped by the run that holds it, within "
                                               "about 2 s")
    after: list[uuid.UUID] | None = Field(None, description="the jobs it waits for: it is waiting until all "
                                          "of them are done (GET /jobs/{id} only; null: none)")
    runAnyway: bool | None = Field(None, description="whether it runs also once a job it waits for failed or was "
                                   "cancelled (GET /jobs/{id} only)")
    result: Any = Field(None, description="what its handler returned, any JSON value up to 64 KiB (null: "
                        "nothing, or not done; GET /jobs/{id} only)")


class JobPage(BaseModel):
    data: list[JobOut] = Field(description="newest first")
    nextCursor: str | None = Field(description="pass as ?cursor= for the next (older) page; null on the last")


class JobCreated(BaseModel):
    created: bool = Field(description="true: a new job (201); false: the job holding this dedupe_key (200): "
                                      "an open one, or one that ended within its unique_for")
    replaced: bool = Field(description="on_conflict replace: the pending job holding the key took this "
                                       "payload and run_after (200, created false)")
    job: JobOut


class JobIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: str = Field(min_length=1, max_length=100, description="a stage's type")
    payload: dict[str, Any] = Field(
        default_factory=dict,
        description="a JSON object: what the stage declares for its type, "
                    "at most MAX_PAYLOAD_BYTES of JSON, no NUL character anywhere")
    dedupe_key: str | None = Field(
        None, min_length=1, max_length=MAX_DEDUPE_KEY_CHARS,
        description="while a job with this key is pending or running in the lane, enqueueing another is "
                    "a no-op that answers 200 with that job. A stage may name its jobs' key from their "
                    "payload (the example's extract, draft, brief): then any other key is 422 "
                    "dedupe_key_fixed")
    run_after: datetime | None = Field(
        None, description="not before this time (default now; no time zone: UTC; a time before 1970 "
                          "means now, one after 9999-01-01 is kept as 9999-01-01)")
    unique_for: float | None = Field(
        None, ge=0, le=admission.MAX_UNIQUE_FOR_SECONDS, allow_inf_nan=False, strict=True,
        description="seconds the dedupe_key stays taken after the job ends (done, failed or cancelled): "
                    "an enqueue of the key within them answers 200 with that job, as for an open one. "
                    "Default: the stage's (Stage(unique_for=)), else none; 0: none. Needs a dedupe_key")
    on_conflict: Literal["keep", "replace"] = Field(
        "keep", description="keep: a job holding the dedupe_key stays as it is and is the answer. replace (a "
                            "debounce): a pending one of the same type takes this payload and run_after "
                            "(200, replaced true); a running one is left to finish and is the answer, as "
                            "for keep. Replace needs a dedupe_key")
    lane: uuid.UUID | None = Field(
        None, description="the lane the work is for: what the fair claim ranks (priority, paused). A tenant "
                          "names one of its own lanes (422 unknown_lane otherwise); an admin any lane, a new "
                          "one made ownerless. Default: the all-zero lane of work nobody owns (admin keys "
                          "only)")
    after: list[uuid.UUID] | None = Field(
        None, max_length=admission.MAX_PARENTS,
        description="ids of jobs this one waits for: it is waiting (never claimed) until all of them are done. "
                    "One that fails for good or is cancelled cancels this one too, unless run_anyway. Each "
                    "must be a job the key can see (422 unknown_parent otherwise)")
    run_anyway: StrictBool = Field(False, description="with after: run also when a job it waits for failed or was "
                                                "cancelled, instead of being cancelled with it")
    priority: JsonInt = Field(
        0, ge=PRIORITY_MIN, le=PRIORITY_MAX, strict=True,
        description="its rank within its lane: of the lane's ready jobs of its type, higher is claimed first, "
                    "then oldest. Between lanes nothing changes (the lane's priority, then the lane served "
                    "least). A replace keeps the pending job's own")

    @field_validator("type", "dedupe_key")
    @classmethod
    def _no_nul(cls, value: str | None) -> str | None:
        if value is not None and "\x00" in value:
            raise ValueError("must not contain the NUL character")
        return value

    @field_validator("run_after", mode="before")
    @classmethod
    def _a_time_is_text(cls, value: Any) -> Any:
        if value is not None and not isinstance(value, (str, datetime)):  # not a number of seconds
            raise ValueError("must be a date-time like 2030-01-02T03:04:05Z")
        return value

    @field_validator("run_after")
    @classmethod
    def _utc(cls, value: datetime | None) -> datetime | None:
        """UTC when no zone is given; clamped to [EARLIEST, LATEST] (earlier means now
        anyway, and the clamp keeps every stored time readable back into Python)."""
        if value is None:
            return None
        if value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc)
        if value < EARLIEST:
            return EARLIEST
        if value > LATEST:
            return LATEST
        return value.astimezone(timezone.utc)


def _str(value: Any) -> str | None:
    return str(value) if value is not None else None


_NOT_FOUND = {404: {"description": "no such job"}}

LOCATION = {"description": "the job's URL, /jobs/{id}", "schema": {"type": "string"}}


@router.get("/jobs", response_model=JobPage, summary="List jobs, newest first", responses={200: CACHED},
            openapi_extra={"parameters": JOB_LIST.openapi()})
async def list_jobs(request: Request) -> Response:
    """A keyset page of jobs, newest first (job ids grow with creation time; the cursor
    carries the last row's creation time too, as every list's does, and the page goes
    on from its id). No total: follow nextCursor until it is null. Rows added while
    paging never repeat or hide older ones."""
    page = JOB_LIST.parse(request)

    async def build() -> dict[str, Any]:
        f = page.filters
        rows = await job_admin.list_jobs(
            await pool_of(request),
            job_admin.JobFilter(f["status"], f["type"], f["lane"], f["batch_id"], f["since"], f["until"],
                                f["error"]),
            page.after[1] if page.after else None, page.limit + 1,
            own_lanes=not request.state.actor.is_admin)
        return page.answer(rows, job_json, lambda r: (r["created_at"], r["id"]))

    return await cached_json(request, build)


@router.get("/jobs/{job_id}", response_model=JobOut, summary="One job", responses={200: CACHED, **_NOT_FOUND},
            dependencies=[Depends(only_params())])
async def get_job(job_id: uuid.UUID, request: Request) -> Response:
    async def build() -> dict[str, Any]:
        row = await job_admin.get_job(await pool_of(request), job_id)
        if row is None:
            raise ApiError(404, "not_found", f"no job {job_id}")
        return job_json(row)

    return await cached_json(request, build, path=f"/jobs/{job_id}")


@router.post("/jobs", status_code=201, response_model=JobCreated, summary="Enqueue a job",
             dependencies=[Depends(only_params())],
             responses={201: {"headers": {"Location": LOCATION}},
                        200: {"model": JobCreated, "headers": {"Location": LOCATION},
                              "description": "a job already held this dedupe_key (open, or ended within its "
                                             "unique_for): that job, created false; or, on_conflict replace, "
                                             "the pending one that took this payload, replaced true"},
                        409: {"description": "conflict: the open job holding the dedupe_key kept finishing "
                                             "between the insert and the read; send the request again"},
                        429: {"description": "waiting_jobs_limit: TENANT_WAITING_JOBS_MAX jobs already "
                                             "wait in this account's lanes"},
                        422: {"description": "unknown_job_type (the message names the known types), "
                                             "unknown_lane, dedupe_key_needed (unique_for or replace "
                                             "without a dedupe_key), unknown_parent (a job in after the key "
                                             "cannot see, or none), parent_cycle, dedupe_key_fixed (the stage names its jobs' "
                                             "dedupe key: send that one or none), job_refused (the stage "
                                             "will not have what the payload names, the example's a page "
                                             "or contact not of the lane's campaign), or a malformed body"}})
async def create_job(body: JobIn, request: Request) -> JSONResponse:
    """201 with the new job, or 200 with the open job that holds the same dedupe_key
    (the insert is the check: no read comes before it). How a job begins is
    app.pipeline.admission's; what is the API's own is who may enqueue where."""
    known = enqueueable_types(request)
    if body.type not in known:
        raise ApiError(422, "unknown_job_type",
                       f"unknown job type {body.type[:100]!r}; the stages are: {', '.join(known)}",
                       {"unknown": [body.type], "known": known})
    pool = await pool_of(request)
    lane = body.lane or DEFAULT_LANE
    if not request.state.actor.is_admin:
        # not there, or another tenant's (row-level security hides it): the same answer.
        # An admin's job makes its lane, ownerless, as a plain INSERT does. A tenant's job
        # without a lane would be ownerless work: refused here as docs/api.md says, not
        # left to row-level security's 403 (the all-zero lane, named, is no tenant's either).
        if body.lane is None:
            raise ApiError(422, "unknown_lane", "name one of this account's lanes in 'lane': a tenant's job "
                                                "needs one (the default lane is ownerless work, admin keys only)",
                           {"lane": None})
        if lane == DEFAULT_LANE or await job_admin.visible_lane(pool, lane) is None:
            raise ApiError(422, "unknown_lane", f"no lane {lane}", {"lane": str(lane)})
    await _room_to_wait(request, pool)
    runtime = request.app.state.runtime
    try:
        admitted = await admission.admit(pool, runtime.stages, body.type, body.payload, lane=lane,
                                         settings=runtime.settings, dedupe_key=body.dedupe_key,
                                         run_after=body.run_after, unique_for=body.unique_for,
                                         replace=body.on_conflict == "replace", after=body.after,
                                         run_anyway=body.run_anyway, priority=body.priority)
    except admission.NotAdmitted as refused:
        raise not_admitted(refused, ("body", "payload")) from None
    job = job_json(admitted.job)
    if admitted.replaced:
        await forget(request, f"/jobs/{job['id']}")
    return JSONResponse({"created": admitted.created, "replaced": admitted.replaced, "job": job},
                        status_code=201 if admitted.created else 200, headers={"Location": f"/jobs/{job['id']}"})


async def _room_to_wait(request: Request, db) -> None:
    """A tenant's key enqueues while fewer than TENANT_WAITING_JOBS_MAX jobs wait in its
    lanes: one tenant's flood would grow the tables every tenant's claims and lists read.
    Checked before the insert, so requests at once may pass it by a few."""
    most = request.app.state.runtime.settings.tenant_waiting_jobs_max
    if most and not request.state.actor.is_admin:
        waiting = await job_admin.waiting_in_own_lanes(db)
        if waiting >= most:
            raise ApiError(429, "waiting_jobs_limit",
                           f"{waiting} jobs of this account are waiting, and {most} may; enqueue more as "
                           "they run", {"waiting": waiting, "limit": most})


async def _stage_takes_it_again(request: Request, db, job_id: uuid.UUID) -> None:
    """A retry is asked what an enqueue is (admission.retry_admitted: 422 unknown_job_type
    when no loaded stage handles it, job_refused when its stage will not have it). Also, a
    retry's new finished_at kept refused jobs from ever being pruned."""
    try:
        await admission.retry_admitted(db, request.app.state.runtime.stages, job_id)
    except admission.NotAdmitted as refused:
        raise not_admitted(refused, ("job", "payload")) from None


async def _current(pool, job_id: uuid.UUID):
    row = await job_admin.get_job(pool, job_id)
    if row is None:
        raise ApiError(404, "not_found", f"no job {job_id}")
    return row


@router.post("/jobs/{job_id}/retry", response_model=JobOut, summary="Retry a failed job",
             dependencies=[Depends(only_params())],
             responses={**_NOT_FOUND, 409: {"description": "job_not_failed, or dedupe_key_taken: another "
                                                           "open job has its dedupe key"},
                        422: {"description": "unknown_job_type: no stage loaded here handles the job's type "
                                             "(it would wait for ever); job_refused: its stage will not have "
                                             "what the job's payload names (asked as at an enqueue)"},
                        429: {"description": "waiting_jobs_limit: TENANT_WAITING_JOBS_MAX jobs already "
                                             "wait in this account's lanes"}})
async def retry_job(job_id: uuid.UUID, request: Request) -> JSONResponse:
    """A failed job (cancelled ones included) back to pending, due now, with its attempts
    reset to zero. last_error keeps the reason it had failed. A retry makes a job wait
    again, so a tenant's key retries while fewer than TENANT_WAITING_JOBS_MAX wait (429
    waiting_jobs_limit), as it enqueues: cancelling and retrying refilled past the cap. Its
    stage's `accepts` is asked too (422 job_refused), as at an enqueue."""
    pool = await pool_of(request)
    await _room_to_wait(request, pool)
    await _stage_takes_it_again(request, pool, job_id)
    try:
        row = await job_admin.retry_job(pool, job_id)
    except job_admin.DedupeKeyTaken:
        current = await _current(pool, job_id)
        holder = await holder_of_key(pool, current["dedupe_key"], current["lane"])
        raise ApiError(409, "dedupe_key_taken",
                       f"another job ({holder or 'unknown'}) holds this job's dedupe key {current['dedupe_key']!r} "
                       "(it is open, or ended within its unique_for); retry this one when the key is free",
                       {"openJob": _str(holder)}) from None
    if row is None:
        current = await _current(pool, job_id)
        raise ApiError(409, "job_not_failed",
                       f"job {job_id} is {current['status']}; only a failed or cancelled job can be retried",
                       {"status": current["status"]})
    await forget(request, f"/jobs/{job_id}")
    return JSONResponse(job_json(row))


@router.post("/jobs/{job_id}/cancel", response_model=JobOut, summary="Cancel a job",
             dependencies=[Depends(only_params())],
             responses={200: {"description": "the job was pending: it is cancelled now"},
                        202: {"description": "the job is running: the cancel is asked for, and the run "
                                             "that holds it stops its handler and ends it cancelled within "
                                             "about 2 s; the job as it is now (status running, "
                                             "cancelRequestedAt set)",
                              "model": JobOut},
                        **_NOT_FOUND, 409: {"description": "job_finished: it had already ended"}})
async def cancel_job(job_id: uuid.UUID, request: Request) -> JSONResponse:
    """A pending job is cancelled now, and its stage's `cancelled` hook runs with it (a
    refund, say): 200. A running job's cancel is asked for: the run that holds it notices
    within about 2 s, stops its handler (CancelledError, so its `finally` runs) and ends it
    cancelled with the hook: 202 with the job as it is now. Asking again is the same 202."""
    pool = await pool_of(request)
    runtime = request.app.state.runtime
    row = await outcomes.cancel_job(pool, runtime.stages, job_id, runtime.settings)
    if row is None:
        current = await _current(pool, job_id)
        raise ApiError(409, "job_finished",
                       f"job {job_id} has already ended ({current['status']}); nothing to cancel",
                       {"status": current["status"]})
    await forget(request, f"/jobs/{job_id}")
    return JSONResponse(job_json(row), status_code=202 if row["status"] == "running" else 200)
