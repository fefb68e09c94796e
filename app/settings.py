"""All configuration, from the environment (or a .env file), in one class."""

from __future__ import annotations

from functools import lru_cache

from pydantic import Field, ValidationError, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class SettingsError(Exception):
    """Configuration that cannot work; the message is one line a person can act on."""


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_file=".env", extra="ignore")

    database_url: str | None = Field(None, description="PostgreSQL DSN; unset: the local embedded server")
    pipeline_stages: str = Field("app.stages:STAGES", description="module:NAME of the ordered stage list")
    pipeline_budget_seconds: float = Field(220.0, gt=0, description="stop claiming after this long")
    platform_limit_seconds: float = Field(300.0, gt=0, description="the host kills the invocation here")
    finish_margin_seconds: float = Field(
        10.0, ge=0, description="kept free before the platform limit for recording the run")
    db_pool_size: int = Field(10, ge=1, le=200)

    @model_validator(mode="after")
    def _budget_fits(self) -> "Settings":
        if self.pipeline_budget_seconds + self.finish_margin_seconds > self.platform_limit_seconds:
            raise ValueError(
                "PIPELINE_BUDGET_SECONDS plus FINISH_MARGIN_SECONDS must fit inside PLATFORM_LIMIT_SECONDS")
        if ":" not in self.pipeline_stages:
            raise ValueError("PIPELINE_STAGES must look like package.module:NAME")
        return self


def load_settings(**overrides) -> Settings:
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        first = exc.errors()[0]
        message = first["msg"].removeprefix("Value error, ")
        where = ".".join(str(p) for p in first.get("loc", ()))
        raise SettingsError(f"bad setting {where.upper()}: {message}" if where
                            else f"bad settings: {message}") from None


@lru_cache
def get_settings() -> Settings:
    return load_settings()
