"""python -m bench.counted ARGS: `python -m app ARGS` with what its client sends counted.

Every message asyncpg sends goes out in one socket write per exchange (Bind, Execute
and Sync of a prepared statement together), and the client then waits for the answer:
so the writes are the round trips. The connections are the sockets written to. The
claim statements are the loop's claim-and-settle calls (app.engine.jobs.finish_and_claim:
a batch's endings and the next claim, of any stage, in one statement). All three go, as
JSON, to the file named by BENCH_COUNTS when the process exits."""

from __future__ import annotations

import atexit
import json
import os
import sys
from asyncio import selector_events

COUNTS = {"writes": 0, "connections": 0, "claim_statements": 0}
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
    from app.engine import jobs

    finish_and_claim = jobs.finish_and_claim

    async def counted_claim(*args, **kwargs):
        COUNTS["claim_statements"] += 1
        return await finish_and_claim(*args, **kwargs)

    jobs.finish_and_claim = counted_claim  # app.pipeline.outcomes calls it through the module
    from app.cli import main as app_main
    return app_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
