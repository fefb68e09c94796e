"""The example's own settings, from the environment (or a .env file) like the queue's.

    outreach_settings()              what the example's code reads: the environment's, read once
    using_outreach_settings(s)       inside this block (and the tasks it starts), `s` instead:
                                     how tests run a pipeline with a short fetch timeout, say

Where the queue keeps what every deployment needs (app/settings.py), this class keeps
what only the example uses: fetching pages, the shared quota, the LLM, the default
owner. FETCH_ALLOW_PRIVATE stays the queue's: webhooks go through the same egress guard.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from functools import lru_cache
from typing import Iterator

from pydantic import Field, model_validator

from app.settings import EnvFileSettings, load_settings_class


class OutreachSettings(EnvFileSettings):
    """The outreach example's (app/outreach/), read when PIPELINE_PLUGINS names it (the default)."""

    # Fetching pages: the brief and crawl stages.
    fetch_timeout_seconds: float = Field(
        10.0, gt=0, le=25, description="one page fetch, redirects included, gives up after this long "
                                       "(robots.txt gets as long again: both fit the crawl stage's 60 s)")
    fetch_max_bytes: int = Field(2_000_000, ge=1024, description="pages larger than this are skipped")
    fetch_user_agent: str = Field(
        "SkiplockBot/0.1 (Skiplock example pipeline)",
        description="sent with every fetch; robots.txt rules for SkiplockBot apply")
    crawl_max_depth: int = Field(
        3, ge=0, description="links more than this many clicks from the home page are not followed")

    # The shared quota of third-party units.
    quota_daily_units: int = Field(
        10_000, ge=0, description="shared third-party units per UTC day (a page fetch costs one)")
    quota_reserve_units: int = Field(
        500, ge=0, description="of those, kept for runs a person starts: scheduled runs stop here")

    # Drafts: an LLM when one is configured, else a template.
    llm_base_url: str | None = Field(
        None, description="an OpenAI-compatible API (…/v1); with LLM_MODEL set, drafts are written "
                          "by it, else by a template")
    llm_api_key: str | None = Field(None, repr=False, description="sent as a bearer token, when set")
    llm_model: str | None = Field(None, description="the model drafts ask for")
    llm_timeout_seconds: float = Field(
        30.0, gt=0, le=100, description="one chat completion gives up after this long (the draft stage allows 120 s)")

    # Campaigns.
    default_owner_email: str = Field(
        "owner@localhost", description="owner of campaigns added without one (on the default plan)")

    @model_validator(mode="after")
    def _fits(self) -> "OutreachSettings":
        for name in ("llm_base_url", "llm_api_key", "llm_model"):
            value = getattr(self, name)
            if isinstance(value, str) and not value.strip():
                object.__setattr__(self, name, None)
        if self.quota_reserve_units > self.quota_daily_units:
            raise ValueError("QUOTA_RESERVE_UNITS cannot be larger than QUOTA_DAILY_UNITS")
        if self.llm_base_url and not self.llm_base_url.startswith(("http://", "https://")):
            raise ValueError("LLM_BASE_URL must be an http(s) URL, like http://127.0.0.1:11434/v1")
        return self

    @property
    def llm_enabled(self) -> bool:
        """Drafts go to the LLM only when both its URL and model are set."""
        return bool(self.llm_base_url and self.llm_model)


def load_outreach_settings(**overrides) -> OutreachSettings:
    """The environment's, with `overrides`; SettingsError (one line naming the variable)."""
    return load_settings_class(OutreachSettings, **overrides)


@lru_cache
def _from_environment() -> OutreachSettings:
    return load_outreach_settings()


# A context variable, not a global: each task (and what it starts) sees the settings
# put in place around it, so tests with different settings never see each other's.
_in_use: ContextVar[OutreachSettings | None] = ContextVar("outreach_settings", default=None)


def outreach_settings() -> OutreachSettings:
    return _in_use.get() or _from_environment()


@contextmanager
def using_outreach_settings(settings: OutreachSettings) -> Iterator[OutreachSettings]:
    token = _in_use.set(settings)
    try:
        yield settings
    finally:
        _in_use.reset(token)
