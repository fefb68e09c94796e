"""The CLI tests' `cli` fixture: `skiplock` run in-process, as the installed script would."""

from __future__ import annotations

import asyncio
import contextlib
import io
import subprocess

import pytest

from app.cli import main
from app.settings import get_settings


@pytest.fixture
def cli(dsn, monkeypatch):
    """cli(*args) -> CompletedProcess-like, through app.cli.main in a thread."""
    monkeypatch.setenv("DATABASE_URL", dsn)
    monkeypatch.setenv("PIPELINE_PLUGINS", "")
    monkeypatch.setenv("PIPELINE_STAGES", "tests.sample_stages:STAGES")
    get_settings.cache_clear()

    def call(args) -> subprocess.CompletedProcess:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as exc:  # argparse's own exits
                code = exc.code
        return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())

    async def run(*args) -> subprocess.CompletedProcess:
        return await asyncio.to_thread(call, args)

    yield run
    get_settings.cache_clear()
