"""The `skiplock` command (`python -m app` is the same program); its modules:

command   the parser, the commands that run the pipeline (migrate, enqueue, run-once,
          worker, serve, psql), the dispatch and the exit codes
context   what a command gets (settings, plug-ins, database URL) and its two ways to stop
output    how it prints: aligned tables for people, JSON for scripts, tenants' text escaped
jobs      jobs, runs and batch: an operator's reads and changes
lanes     lanes: the busiest, pause, resume, priority
status    status: the queue on one screen
accounts  user and key: accounts and API keys"""

from __future__ import annotations


def main(argv: list[str] | None = None) -> int:
    # imported when run, so a module that only needs app.cli.output (app.logs does) does
    # not load the whole command, which imports app.logs back
    from app.cli.command import main as run

    return run(argv)
