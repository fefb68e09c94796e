"""A plug-in: work that stands above the queue and plugs into it through this one surface.

    PIPELINE_PLUGINS=app.outreach.plugin:PLUGIN        (the default: the example pipeline)
    PIPELINE_PLUGINS=                                  (none: only PIPELINE_STAGES)

A plug-in brings stages, and may bring its own SQL (tables and named queries), tenant
routes and CLI commands.
The queue never imports a plug-in: the adapters receive the loaded plug-ins from the
composition root (the app factory, the CLI, `make run`, the Lambda handler) and mount
what each brings.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from importlib.resources import files
from importlib.resources.abc import Traversable
from typing import Any, Awaitable, Callable, Sequence

from app.pipeline.registry import StageConfigError, import_named
from app.pipeline.stage import Stage

# An installed command: parsed args, settings and the database URL in, text to print out.
CommandHandler = Callable[[argparse.Namespace, Any, str], Awaitable[str]]


@dataclass(frozen=True)
class Gauge:
    """One number a plug-in reports, read from the database when asked: /metrics shows it
    as skiplock_<plug-in>_<name>, `skiplock status` as a line."""
    name: str      # a plain word, like quota_used_units
    help: str
    value: float
    labels: tuple[tuple[str, str], ...] = ()


# The plug-in's gauges now: a connection (as the tables' owner) and the settings in.
MetricsHook = Callable[[Any, Any], Awaitable[Sequence[Gauge]]]

# The plug-in's panels on /dashboard (through GET /stats): the request's tenant connection
# (row-level security; grant the API roles what a shared number needs), the actor and the
# settings in; tables out, {"title", "columns": [...], "rows": [[...]], "note"?} each. The
# request holds its connection meanwhile: a second one from the pool could wait for ever.
DashboardHook = Callable[[Any, Any, Any], Awaitable[Sequence[dict[str, Any]]]]


@dataclass(frozen=True, kw_only=True)
class Plugin:
    """What one plug-in brings.

    name:        a plain word; prefixes its migration versions (<name>/NNNN_name).
    stages:      its stages, earliest first; they run before PIPELINE_STAGES's.
    sql:         the folder of its SQL, as package data: a Traversable
                 (importlib.resources.files("mypkg") / "sql") or the name of the package
                 that is the folder ("mypkg.sql"). migrations/NNNN_name.sql is its schema,
                 applied after the queue's by `skiplock migrate`; queries/<name>.sql are
                 its named statements (app.engine.queries.statements_of(folder)). None: no SQL.
    routers:     FastAPI routers, mounted as tenant routes (an API key, row-level security);
                 or a function returning them, called only when the web app is built, so
                 the scheduled Lambda path and the CLI load the plug-in without FastAPI.
    commands:    called with the CLI's subparsers; each parser it adds sets
                 `handler=<CommandHandler>` with set_defaults.
    dev_settings: `make run` calls it with the settings before building the app; it
                 returns settings to change for local dev (e.g. let the crawler reach a
                 sample site on loopback).
    dev_setup:   `make run` calls it with (app, pool, settings) once the app is built:
                 a sample site, demo data.
    metrics:     called with (connection, settings) at every /metrics scrape and
                 `skiplock status`; returns Gauges (cheap reads only).
    dashboard:   called by GET /stats for the dashboard's plug-in panels (DashboardHook).
    """
    name: str
    stages: Sequence[Stage] = ()
    sql: Traversable | str | None = None
    routers: Sequence[Any] | Callable[[], Sequence[Any]] = ()
    commands: Callable[[Any], None] | None = None
    dev_settings: Callable[[Any], dict[str, Any]] | None = None
    dev_setup: Callable[[Any, Any, Any], Awaitable[Any]] | None = None
    metrics: MetricsHook | None = None
    dashboard: DashboardHook | None = None

    def __post_init__(self) -> None:
        if not self.name.isidentifier():
            raise ValueError(f"plug-in name {self.name!r} must be a plain word")
        object.__setattr__(self, "stages", tuple(self.stages))
        if isinstance(self.sql, str):
            object.__setattr__(self, "sql", files(self.sql))
        if not callable(self.routers):
            object.__setattr__(self, "routers", tuple(self.routers))

    def tenant_routers(self) -> tuple[Any, ...]:
        """Its routers (built now, if it brings them as a function)."""
        return tuple(self.routers() if callable(self.routers) else self.routers)


class CommandError(Exception):
    """A command's one-line answer to bad input: the CLI prints it and exits 2."""
    exit_code = 2


class CommandFailed(CommandError):
    """The input was fine and the thing could not be done (no such campaign, no such job):
    the CLI prints it and exits 1."""
    exit_code = 1


class PluginConfigError(StageConfigError):
    """PIPELINE_PLUGINS names something that is not a plug-in; one readable line."""


def load_plugins(spec: str | None) -> list[Plugin]:
    """The plug-ins named by PIPELINE_PLUGINS (comma-separated module:NAME), in order."""
    plugins: list[Plugin] = []
    for item in (spec or "").split(","):
        item = item.strip()
        if not item:
            continue
        plugin = import_named(item, "PIPELINE_PLUGINS")
        if not isinstance(plugin, Plugin):
            raise PluginConfigError(f"PIPELINE_PLUGINS: {item} is not a Plugin")
        if any(p.name == plugin.name for p in plugins):
            raise PluginConfigError(f"PIPELINE_PLUGINS: two plug-ins are named {plugin.name!r}")
        plugins.append(plugin)
    return plugins


def plugin_stages(plugins: Sequence[Plugin]) -> list[Stage]:
    return [stage for p in plugins for stage in p.stages]
