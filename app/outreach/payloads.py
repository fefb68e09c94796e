"""What each stage of the example pipeline reads from its job's payload, declared
(`Stage(payload=...)` in app/outreach/__init__.py), so that the API and the CLI refuse a
payload the stage could not use before it is queued.

    brief    {}                          the campaign is the job's campaign
    crawl    {"page_id"?, "url"?, "depth"?}   a known page, or a URL to discover (one of them)
    extract  {"page_id"}
    draft    {"contact_id"}
    digest   {"period"}                  the instant the day it covers ended

A crawl URL is an http(s) URL whose host is not a local name or a non-public literal
address (unless FETCH_ALLOW_PRIVATE lists its host:port): the fetch refuses those
anyway, this says so at once with a 422."""

from __future__ import annotations

import re
import uuid
from typing import Any

from pydantic import (AwareDatetime, BaseModel, ConfigDict, Field, StrictInt, ValidationInfo, field_validator,
                      model_validator)

from app.egress import literal_refusal, parse_allow_list
from app.outreach.urls import BadUrl, normalize_url

# The schema says exactly which URLs are accepted (so a client, or a fuzzer, can tell a
# valid request from the schema alone): http(s), a host name, an optional port, then
# anything printable. app.outreach.urls checks the same again where the crawl reads it.
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
_PORT = r"(?:6553[0-5]|655[0-2][0-9]|65[0-4][0-9]{2}|6[0-4][0-9]{3}|[1-5][0-9]{4}|[0-9]{1,4})"
URL_PATTERN = rf"^[Hh][Tt][Tt][Pp][Ss]?://{_LABEL}(?:\.{_LABEL})*\.?(?::{_PORT})?(?:[/?#][^\s\x00-\x1f\x7f]*)?$"
MAX_URL_LENGTH = 2000
MAX_CRAWL_DEPTH = 100
URL_SHAPE = "must be an http(s) URL with a host name, like https://example.com"


def url_shape_problem(value: str) -> str | None:
    try:
        value.encode("utf-8")  # a lone surrogate cannot be stored
    except UnicodeEncodeError:
        return URL_SHAPE
    return None if re.fullmatch(URL_PATTERN, value) else URL_SHAPE


def address_problem(url: str, settings: Any) -> str | None:
    """Why the URL's host may not be fetched, as far as it shows without a lookup: as
    written, and as the crawl will fetch it (normalize_url drops a host's trailing dot,
    so `localhost.` is `localhost`)."""
    allow = parse_allow_list(getattr(settings, "fetch_allow_private", "") or "")
    try:
        fetched = normalize_url(url)
    except BadUrl:
        fetched = url
    why = literal_refusal(url, allow) or literal_refusal(fetched, allow)
    return f"{why}: the host must be a public address (FETCH_ALLOW_PRIVATE lists exceptions)" if why else None


class BriefPayload(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{}]})


class CrawlPayload(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"url": "https://example.com/"}]})
    page_id: uuid.UUID | None = Field(None, description="a page the pipeline has recorded")
    url: str | None = Field(None, max_length=MAX_URL_LENGTH, json_schema_extra={"pattern": URL_PATTERN},
                            description="a page to discover (at depth 0) and fetch")
    depth: StrictInt | None = Field(None, ge=0, le=MAX_CRAWL_DEPTH, description="clicks from the home page")

    @field_validator("url")
    @classmethod
    def _public_http_url(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return None
        why = url_shape_problem(value) or address_problem(value, (info.context or {}).get("settings"))
        if why:
            raise ValueError(why)
        return value

    @model_validator(mode="after")
    def _names_a_page(self) -> "CrawlPayload":
        if self.page_id is None and self.url is None:
            raise ValueError("give page_id or url: the page to fetch")
        return self


class ExtractPayload(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={
        "examples": [{"page_id": "3f2b8c4e-1d2a-4b6f-9e0a-7c5d1e2f3a4b"}]})
    page_id: uuid.UUID = Field(description="the fetched page to read contacts from")


class DraftPayload(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={
        "examples": [{"contact_id": "8a1c2d3e-4f5a-4b6c-8d7e-9f0a1b2c3d4e"}]})
    contact_id: uuid.UUID = Field(description="the contact to write to")


class DigestPayload(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={"examples": [{"period": "2027-03-01T00:00:00Z"}]})
    period: AwareDatetime = Field(description="the instant the day the digest covers ended (its period's start)")
