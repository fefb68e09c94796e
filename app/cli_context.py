"""What every `skiplock` command gets (the settings, the plug-ins, the database URL, the
stages), and its two ways to stop: bad input (exit 2) and a failure (exit 1), each said
in one line on stderr."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from app.pipeline.stage import Stage
from app.plugin import Plugin
from app.runtime import configured_stages
from app.settings import Settings

BAD_INPUT = 2
FAILURE = 1


class CliError(Exception):
    """Bad input or a broken setup: exit 2."""
    exit_code = BAD_INPUT


class CliFailure(CliError):
    """The input was fine and the thing could not be done (no such job, not failed): exit 1."""
    exit_code = FAILURE


@dataclass
class Cli:
    settings: Settings
    plugins: list[Plugin]
    dsn: str

    @cached_property
    def stages(self) -> list[Stage]:
        return configured_stages(self.settings, self.plugins)

    def bad_input(self, message: str) -> CliError:
        return CliError(message)

    def failure(self, message: str) -> CliFailure:
        return CliFailure(message)
