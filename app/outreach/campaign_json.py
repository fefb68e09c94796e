"""A campaign as the API lists it and the CLI prints it (`--json`): one shape, kept
where both can reach it without importing FastAPI (the CLI and the scheduled Lambda path
load the plug-in, not the web app)."""

from __future__ import annotations

from typing import Any

from app.json_values import iso


def listed_json(row) -> dict[str, Any]:
    """A campaign as GET /campaigns lists it (and the start of its full JSON)."""
    return {
        "id": str(row["id"]), "name": row["name"], "url": row["url"], "status": row["status"],
        "owner": row["owner"], "plan": row["plan"], "createdAt": iso(row["created_at"]),
        "counts": {"pagesFound": row["pages_found"], "pagesFetched": row["pages_fetched"],
                   "pagesQueued": row["pages_queued"], "contacts": row["contacts"], "drafts": row["drafts"]},
    }
