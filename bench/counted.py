"""python -m bench.counted ARGS: `python -m app ARGS` with what its client sends counted.

Every message asyncpg sends goes out in one socket write per exchange (Bind, Execute
and Sync of a prepared statement together), and the client then waits for the answer:
so the writes are the round trips. The connections are the sockets written to. Both
go, as JSON, to the file named by BENCH_COUNTS when the process exits."""

from __future__ import annotations

import atexit
import json
import os
import sys
from asyncio import selector_events

COUNTS = {"writes": 0, "connections": 0}
_seen: set[int] = set()
_Transport = selector_events._SelectorSocketTransport
_write = _Transport.write


def _counted_write(self, data) -> None:
    COUNTS["writes"] += 1
    if id(self) not in _seen:
        _seen.add(id(self))
        COUNTS["connections"] += 1
    _write(self, data)


def _report() -> None:
    path = os.environ.get("BENCH_COUNTS")
    if path:
        with open(path, "w") as out:
            json.dump(COUNTS, out)


def main() -> int:
    _Transport.write = _counted_write
    if "writelines" in _Transport.__dict__:  # Python 3.12+: its own, not through write()
        _Transport.writelines = lambda self, data: _counted_write(self, b"".join(data))
    atexit.register(_report)
    from app.cli import main as app_main
    return app_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
