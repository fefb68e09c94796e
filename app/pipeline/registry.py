"""Find the ordered stage list named by PIPELINE_STAGES (package.module:NAME)."""

from __future__ import annotations

import importlib
import os
import sys

from app.pipeline.stage import Stage
from app.settings import SettingsError


class StageConfigError(Exception):
    """The stage list cannot be loaded; the message is one readable line."""


def import_named(spec: str, setting: str):
    """The object a setting names as package.module:NAME; StageConfigError (one line,
    naming the setting) when it cannot be found."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise StageConfigError(f"{setting}={spec!r} must look like package.module:NAME")
    _look_in_the_current_folder()
    try:
        module = importlib.import_module(module_name)
    except SettingsError:
        raise  # the module read a setting of its own that is wrong: that setting is the news
    except Exception as exc:
        raise StageConfigError(f"{setting}: cannot import {module_name!r}: {exc}") from None
    try:
        return getattr(module, attr)
    except AttributeError:
        raise StageConfigError(f"{setting}: {module_name!r} has no {attr!r}") from None


def _look_in_the_current_folder() -> None:
    """A team's module in the folder it runs from is found by every adapter alike: `python
    -m` and uvicorn put that folder on the path, an installed `skiplock` command does not.
    Last on the path, so it never shadows an installed package."""
    here = os.getcwd()
    if "" not in sys.path and here not in sys.path:
        sys.path.append(here)


def load_stages(spec: str) -> list[Stage]:
    named = import_named(spec, "PIPELINE_STAGES")
    try:
        stages = list(named)
    except TypeError:
        raise StageConfigError(f"PIPELINE_STAGES: {spec} is not a list of Stage") from None
    check_stages(stages, spec)
    return stages


RESERVED_TYPES = ("maintenance", "notify")  # the pipeline's own stages


def check_stages(stages: list, where: str = "stages") -> None:
    seen = set(RESERVED_TYPES)
    for stage in stages:
        if not isinstance(stage, Stage):
            raise StageConfigError(f"{where}: {stage!r} is not a Stage")
        if stage.type in RESERVED_TYPES:
            raise StageConfigError(f"{where}: the type {stage.type!r} is the pipeline's own; rename the stage")
        if stage.type in seen:
            raise StageConfigError(f"{where}: two stages have the type {stage.type!r}")
        seen.add(stage.type)
