"""The embedded server's system user, made by several processes at once: what three test
workers do on their first start on a new machine."""

from __future__ import annotations

import os
import pwd
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).parent.parent

# Each process waits for the go file, then asks for the user, and prints the uid it was given.
MAKER = """
import os, sys, time
from pathlib import Path
go = Path(sys.argv[2])
while not go.exists():
    time.sleep(0.001)
from app.devdb import system_user
print(system_user(sys.argv[1]).pw_uid)
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="only root makes the system user")
def test_processes_making_the_user_at_once_all_get_the_uid_it_ends_with(tmp_path):
    name = f"skiplock_t{os.getpid()}"
    go = tmp_path / "go"
    try:
        makers = [subprocess.Popen([sys.executable, "-c", MAKER, name, str(go)], cwd=REPO,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                  for _ in range(4)]
        time.sleep(1.0)  # every process imported and waiting
        go.touch()
        said = [m.communicate(timeout=60) for m in makers]
        assert all(m.returncode == 0 for m in makers), [err for _, err in said]
        uids = {int(out) for out, _ in said}
        # one user, and what each process chowned its files to is that user's uid
        assert uids == {pwd.getpwnam(name).pw_uid}
    finally:
        subprocess.run(["userdel", name], capture_output=True)
