"""How a job begins, for every way people enqueue: `POST /jobs`, a batch, the CLI's
`enqueue` and a plug-in's own routes. (How one ends is outcomes.py's.)

In order: the type is a stage's; the payload fits the stage's model and the size caps
(what is stored is the model's JSON); the stage names the job's dedupe key, when it has a
rule for it; the stage accepts what the payload names (its `accepts`, on the enqueuer's
own connection, so row-level security applies); then one insert, which the dedupe index
may turn into a no-op, in which case the job holding the key is the answer: an open one, or
one that ended less than its unique_for ago (the enqueue's, else the stage's). To replace
instead (a debounce), the insert gives a pending job holding the key the new payload and
due time; a running one is left to finish and is the answer, as a duplicate.
What the pipeline enqueues itself (a handler's follow-up work) goes straight to the
engine: it was admitted when its first job was."""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Iterable, Sequence

import asyncpg

from app.engine import job_admin
from app.engine.dependencies import ParentRefused, enqueue_after
from app.engine.jobs import PRIORITY_MAX, PRIORITY_MIN, NewJob, enqueue, enqueue_replacing, holder_of_key
from app.pipeline.payloads import PayloadRefused, check_payload
from app.pipeline.registry import RESERVED_TYPES
from app.pipeline.stage import DedupeKeyFixed, JobRefused, Stage

# An insert that meets a job holding its key, which lets the key go before it is read,
# frees the key: the insert is tried again this many times.
TRIES = 5
MAX_UNIQUE_FOR_SECONDS = 10 * 366 * 24 * 3600  # a longer window is a mistake (or an overflow)
MAX_PARENTS = 100  # jobs one job may wait for: each is locked and counted at its enqueue


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
    created: bool                # False: the job holding the dedupe key is the answer
    job: asyncpg.Record          # as job_get.sql reads it
    replaced: bool = False       # the pending job holding the key took the new payload and due time


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


def unique_for_of(stage: Stage, dedupe_key: str | None, given: float | None, replace: bool) -> float | None:
    """Seconds the job's key stays taken after it ends: the enqueue's (0: none), else the
    stage's. A window or a replace asked for without a key is refused: the key is what
    either works on."""
    if given is not None and not 0 <= given <= MAX_UNIQUE_FOR_SECONDS:  # NaN fails both
        raise NotAdmitted("invalid_value", f"unique_for must be 0 to {MAX_UNIQUE_FOR_SECONDS} seconds (ten "
                                           f"years), not {given}", {"uniqueFor": None if math.isnan(given) else given})
    if dedupe_key is None:
        if replace:
            raise NotAdmitted("dedupe_key_needed", "replacing finds the job to replace by its dedupe key: give one")
        if given:
            raise NotAdmitted("dedupe_key_needed", "a unique_for window keeps a dedupe key taken: give one")
        return None
    window = given if given is not None else stage.unique_for
    return window or None


def priority_of(given: int) -> int:
    """The job's priority within its lane, when the column can hold it."""
    if isinstance(given, bool) or not isinstance(given, int) or not PRIORITY_MIN <= given <= PRIORITY_MAX:
        raise NotAdmitted("invalid_value", f"priority must be a whole number from {PRIORITY_MIN} to "
                                           f"{PRIORITY_MAX}, not {given!r}", {"priority": given})
    return given


async def accepted(db, stage: Stage, lane: uuid.UUID, payload: dict[str, Any]) -> None:
    """The stage's last word on what the payload names (its `accepts`)."""
    try:
        await stage.people_accept(db, lane, payload)
    except JobRefused as exc:
        raise NotAdmitted("job_refused", str(exc), exc.details, stage=stage.type) from None


def parents_of(after: Sequence[uuid.UUID] | None, run_anyway: bool, replace: bool) -> list[uuid.UUID]:
    """The jobs a job waits for (none: an empty list), as far as can be told before the insert."""
    after = list(dict.fromkeys(after or ()))
    if len(after) > MAX_PARENTS:
        raise NotAdmitted("invalid_value", f"a job may wait for at most {MAX_PARENTS} jobs, not {len(after)}",
                          {"after": len(after)})
    if run_anyway and not after:
        raise NotAdmitted("invalid_value", "run_anyway says what to do when a job in after does not succeed: "
                                           "give after")
    if after and replace:
        raise NotAdmitted("invalid_value", "on_conflict replace and after do not go together: the pending "
                                           "job holding the key keeps what it waits for")
    return after


async def _insert(db, new: NewJob, parents: list[uuid.UUID], run_anyway: bool) -> uuid.UUID | None:
    if not parents:
        return await enqueue(db, new)
    try:
        return await enqueue_after(db, new, parents, run_anyway=run_anyway)
    except ParentRefused as refused:
        if refused.why == "unknown":
            raise NotAdmitted("unknown_parent", str(refused), {"unknown": refused.ids}) from None
        raise NotAdmitted("parent_cycle", str(refused), {"after": [str(p) for p in parents]}) from None


async def admit(db, stages: Iterable[Stage], type_: str, payload: Any, *, lane: uuid.UUID,
                settings, dedupe_key: str | None = None, run_after: datetime | None = None,
                unique_for: float | None = None, replace: bool = False,
                after: Sequence[uuid.UUID] | None = None, run_anyway: bool = False,
                priority: int = 0) -> Admitted:
    """One job people asked for, through every rule above; the new job, or the one holding
    its dedupe key (replaced: a pending one that took this one's payload and due time).
    `after`: the jobs it waits for (it runs once all of them are done; run_anyway: also
    once any of them failed or was cancelled), each one the enqueuer's to see. `priority`:
    its rank within the lane (higher first, then oldest)."""
    stage = stage_for(stages, type_)
    parents = parents_of(after, run_anyway, replace)
    payload = checked_payload(stage, payload, settings)
    dedupe_key = dedupe_key_of(stage, lane, payload, dedupe_key)
    window = unique_for_of(stage, dedupe_key, unique_for, replace)
    priority = priority_of(priority)
    await accepted(db, stage, lane, payload)
    new = NewJob(type=type_, payload=payload, dedupe_key=dedupe_key, lane=lane, run_after=run_after,
                 unique_for=window, priority=priority)
    for _ in range(TRIES):
        try:
            if replace:
                written = await enqueue_replacing(db, new)
            else:
                job_id = await _insert(db, new, parents, run_anyway)
                written = (job_id, True) if job_id is not None else None
        except asyncpg.DataError as exc:
            raise NotAdmitted("invalid_value", f"the database refused a value: {exc}") from None
        if written is not None:
            job_id, created = written
            return Admitted(created, await job_admin.get_job(db, job_id), replaced=not created)
        # another job holds the key: that one is the answer (if it let the key go in
        # between, the insert goes through next time)
        holder = await holder_of_key(db, dedupe_key, lane)
        row = await job_admin.get_job(db, holder) if holder is not None else None
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
