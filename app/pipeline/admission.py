"""How a job begins, for every way people enqueue: `POST /jobs`, a batch, the CLI's
`enqueue` and a plug-in's own routes. (How one ends is outcomes.py's.)

In order: the type is a stage's; the payload fits the stage's model and the size caps
(what is stored is the model's JSON); the stage names the job's dedupe key, when it has a
rule for it; the stage accepts what the payload names (its `accepts`, on the enqueuer's
own connection, so row-level security applies); then one insert, which the open-dedupe
index may turn into a no-op, in which case the open job holding the key is the answer.
What the pipeline enqueues itself (a handler's follow-up work) goes straight to the
engine: it was admitted when its first job was."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Iterable

import asyncpg

from app.engine import job_admin
from app.engine.jobs import NewJob, enqueue
from app.pipeline.payloads import PayloadRefused, check_payload
from app.pipeline.registry import RESERVED_TYPES
from app.pipeline.stage import DedupeKeyFixed, JobRefused, Stage

# An insert that meets an open job with its key, whose job then finishes before it is
# read, frees the key: the insert is tried again this many times.
TRIES = 5


class NotAdmitted(Exception):
    """Why a job was not enqueued: a code, one sentence, and details, which each adapter
    says in its own way (a 4xx with the one JSON error shape; one line on the CLI).
    `problems`: the payload's, as (place in the payload, message)."""

    def __init__(self, code: str, message: str, details: dict[str, Any] | None = None, *,
                 problems: list[tuple[tuple[str | int, ...], str]] | None = None, status: int = 422,
                 stage: str | None = None) -> None:
        super().__init__(message)
        self.code, self.message, self.details, self.problems, self.status = code, message, details or {}, problems, status
        self.stage = stage  # the stage that refused, for job_refused


@dataclass(frozen=True)
class Admitted:
    created: bool                # False: the open job holding the dedupe key is the answer
    job: asyncpg.Record          # as job_get.sql reads it


def stage_for(stages: Iterable[Stage], type_: str) -> Stage:
    """The stage of `type_`, or NotAdmitted(unknown_job_type) naming the stages there are."""
    stages = list(stages)
    for stage in stages:
        if stage.type == type_:
            return stage
    known = [s.type for s in stages]
    raise NotAdmitted("unknown_job_type", f"unknown job type {type_[:100]!r}; the stages are: "
                      f"{', '.join(known) or 'none'}", {"unknown": [type_], "known": known})


def checked_payload(stage: Stage, payload: Any, settings) -> dict[str, Any]:
    """The payload to store: the stage's model's JSON, within the size caps."""
    try:
        return check_payload(payload, stage.payload, max_bytes=settings.max_payload_bytes,
                             context={"settings": settings})
    except PayloadRefused as refused:
        raise NotAdmitted("invalid_request", str(refused),
                          problems=[(p.location, p.message) for p in refused.problems]) from None


def dedupe_key_of(stage: Stage, lane: uuid.UUID, payload: dict[str, Any], given: str | None) -> str | None:
    try:
        return stage.people_dedupe_key(lane, payload, given)
    except DedupeKeyFixed as exc:
        raise NotAdmitted("dedupe_key_fixed", str(exc), {"dedupeKey": exc.key}) from None


async def accepted(db, stage: Stage, lane: uuid.UUID, payload: dict[str, Any]) -> None:
    """The stage's last word on what the payload names (its `accepts`)."""
    try:
        await stage.people_accept(db, lane, payload)
    except JobRefused as exc:
        raise NotAdmitted("job_refused", str(exc), exc.details, stage=stage.type) from None


async def admit(db, stages: Iterable[Stage], type_: str, payload: Any, *, lane: uuid.UUID,
                settings, dedupe_key: str | None = None, run_after: datetime | None = None) -> Admitted:
    """One job people asked for, through every rule above; the new job, or the open one
    holding its dedupe key."""
    stage = stage_for(stages, type_)
    payload = checked_payload(stage, payload, settings)
    dedupe_key = dedupe_key_of(stage, lane, payload, dedupe_key)
    await accepted(db, stage, lane, payload)
    new = NewJob(type=type_, payload=payload, dedupe_key=dedupe_key, lane=lane, run_after=run_after)
    for _ in range(TRIES):
        try:
            job_id = await enqueue(db, new)
        except asyncpg.DataError as exc:
            raise NotAdmitted("invalid_value", f"the database refused a value: {exc}") from None
        if job_id is not None:
            return Admitted(True, await job_admin.get_job(db, job_id))
        # the key is held by an open job: that one is the answer (if it finished in
        # between, the key is free again and the insert goes through next time)
        row = await job_admin.open_job_by_dedupe_key(db, dedupe_key, lane)
        if row is not None:
            return Admitted(False, row)
    raise NotAdmitted("conflict", "the dedupe key kept changing hands; send the request again", status=409)


async def retry_admitted(db, stages: Iterable[Stage], job_id: uuid.UUID) -> None:
    """A retry of one failed job (the API's, the CLI's) begins it again, so it is asked what
    an enqueue is asked, on the payload as stored: that a loaded stage handles its type (else
    it would wait for ever, unremarked), and that the stage's `accepts` still takes it (jobs
    queued before a stage refused what they name would otherwise be retried again and again,
    each claimed only to fail). Says nothing of a job that is gone or not failed: the retry
    answers that."""
    row = await job_admin.get_job(db, job_id)
    if row is None or row["status"] != "failed" or row["type"] in RESERVED_TYPES:
        return
    stages = list(stages)
    stage = next((s for s in stages if s.type == row["type"]), None)
    if stage is None:
        known = [s.type for s in stages]
        raise NotAdmitted("unknown_job_type", f"no stage loaded here handles type {row['type'][:100]!r}, so the "
                          f"job would wait for ever; load it (PIPELINE_STAGES, PIPELINE_PLUGINS) first. The "
                          f"stages are: {', '.join(known) or 'none'}", {"unknown": [row["type"]], "known": known})
    if stage.accepts is None:
        return
    if not isinstance(row["payload"], dict):  # stored by SQL of someone's own: no hook reads it
        raise NotAdmitted("job_refused", f"the job's payload is not a JSON object; its stage {stage.type!r} "
                                         "cannot take it", stage=stage.type)
    try:
        await stage.accepts(db, row["lane"], row["payload"])
    except JobRefused as exc:
        raise NotAdmitted("job_refused", str(exc), exc.details, stage=stage.type) from None
