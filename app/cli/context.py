"""What every `skiplock` command gets (the settings, the plug-ins, the database URL, the
stages), and its two ways to stop: bad input (exit 2) and a failure (exit 1), each said
in one line on stderr."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from app.pipeline.stage import Stage
from app.plugin import CommandError, CommandFailed, Plugin
from app.runtime import configured_stages
from app.settings import Settings

BAD_INPUT = CommandError.exit_code
FAILURE = CommandFailed.exit_code


@dataclass
class Cli:
    settings: Settings
    plugins: list[Plugin]
    dsn: str

    @cached_property
    def stages(self) -> list[Stage]:
        return configured_stages(self.settings, self.plugins)

    def bad_input(self, message: str) -> CommandError:
        return CommandError(message)

    def failure(self, message: str) -> CommandFailed:
        return CommandFailed(message)
