"""Where a bench part keeps a sitting's results: bench/results/<part>-<date>.json, and
<part>-<date>b.json, c, ... for a later sitting of the same day, which keeps the first's."""

from __future__ import annotations

from pathlib import Path


def sitting_path(results_dir: Path, part: str, date: str) -> Path:
    path = results_dir / f"{part}-{date}.json"
    for suffix in "bcdefghijklmnopqrstuvwxyz":
        if not path.exists():
            break
        path = results_dir / f"{part}-{date}{suffix}.json"
    return path
