"""GET /audit: who changed what, newest first (admin keys only).

The rows are written by database triggers from the actor the transaction named; the
API can read them and nothing else."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Literal

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, Field

from app.api.auth import require_admin
from app.api.deps import pool_of
from app.api.pagination import ListQuery, word_param
from app.engine.audit import audit_page

router = APIRouter(tags=["audit"])

# Which tables are audited is the schema's word (an `audit` trigger: the queue's users,
# api_keys and jobs, and whatever a plug-in's migrations add), so the filter takes any
# table name: one without audited changes has none to show.
AUDIT_LIST = ListQuery("audit", [word_param(
    "table", "only changes to this table (users, api_keys, jobs, or a plug-in's audited table)", 63)])


class AuditOut(BaseModel):
    id: int
    at: datetime
    actorKind: Literal["user", "admin", "system", "pipeline"]
    actorId: str | None
    table: str
    op: Literal["INSERT", "UPDATE", "DELETE"]
    rowId: str | None
    old: dict[str, Any] | None = Field(description="the row before (secrets left out)")
    new: dict[str, Any] | None = Field(description="the row after (secrets left out)")


class AuditPage(BaseModel):
    data: list[AuditOut] = Field(description="newest first")
    nextCursor: str | None


def _json(r) -> dict[str, Any]:
    return {"id": r["id"], "at": r["at"].isoformat(), "actorKind": r["actor_kind"], "actorId": r["actor_id"],
            "table": r["table_name"], "op": r["op"], "rowId": r["row_id"],
            "old": r["old_row"], "new": r["new_row"]}


@router.get("/audit", response_model=AuditPage, summary="The audit log, newest first",
            dependencies=[Depends(require_admin)],
            openapi_extra={"parameters": AUDIT_LIST.openapi()},
            responses={403: {"description": "not an admin key"}})
async def list_audit(request: Request) -> dict[str, Any]:
    """Every change to users and API keys (and to the plug-ins' audited tables), and the
    jobs people enqueued, retried or cancelled through the API: who (actor kind and id), what, before and after."""
    page = AUDIT_LIST.parse(request)
    # the cursor carries a uuid; audit ids are integers, carried inside one
    after = (page.after[0], page.after[1].int) if page.after else None
    rows = await audit_page(await pool_of(request), table=page.filters["table"], after=after,
                            limit=page.limit + 1)
    return page.answer(rows, _json, lambda r: (r["at"], uuid.UUID(int=r["id"])))
