"""The horizon soak's plot (bench/horizon.py): one PNG per variant, Skiplock's and
pgqueuer's lines side by side, the pinned interval shaded. Needs matplotlib (the `bench`
extra); drawn with the Agg backend, so no display is needed.

`python -m bench.horizon_plot RESULTS.json [RESULTS.json ...]` draws docs/horizon-*.png
again from sittings' results files, each system's run from the last file that has one (a
Skiplock-only sitting beside pgqueuer's from an earlier one); each line names its sitting."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - after the backend is chosen

COLOURS = {"skiplock": "#1f5fa8", "pgqueuer": "#e07b00"}
LABELS = {"skiplock": "Skiplock (skiplock worker, batch 50, concurrency 10)",
          "pgqueuer": "pgqueuer 1.6.0 (its worker, concurrency 10)"}
TITLES = {"overlapping": "a new 120 s REPEATABLE READ snapshot every 40 s",
          "one-long": "one REPEATABLE READ snapshot held throughout"}


def _symlog_if_wide(ax, values: list[float], target: float, linthresh: float) -> None:
    """A linear axis, unless one line climbs far past the target: then a symmetric log
    axis, so that the other line's figures near the target stay readable."""
    top = max(values, default=0)
    if top > 10 * target:
        ax.set_yscale("symlog", linthresh=linthresh)


def draw(variant: str, runs: dict, horizon: dict, out: dict, path: Path) -> None:
    from bench.horizon import PIN_START_S, TARGET_BACKLOG, TARGET_P95_S, pin_schedule

    pin_s = horizon["pin_minutes"] * 60
    release = PIN_START_S + pin_s
    fig, axes = plt.subplots(3, 1, figsize=(11, 9), sharex=True,
                             gridspec_kw={"height_ratios": [3, 3, 2]})
    panels = [("backlog", "backlog (jobs enqueued, not done)", TARGET_BACKLOG, 100.0),
              ("p95_s", "p95 enqueue \u2192 done (s), by second done", TARGET_P95_S, 0.1),
              ("dead_tuples", "dead tuples, queue tables", None, None)]
    for ax, (key, ylabel, target, linthresh) in zip(axes, panels):
        ax.axvspan(PIN_START_S, release, color="0.88", lw=0, label="snapshot held (horizon pinned)")
        for opened, _ in pin_schedule(variant, pin_s)[1:]:
            ax.axvline(opened, color="0.7", lw=0.6, ls=":")
        values = []
        for name, r in runs.items():
            series = r.get("series")
            if not series:
                continue
            pts = [(row["t"], row[key]) for row in series if row[key] is not None]
            values += [v for _, v in pts]
            label = LABELS.get(name, name) + (f", {r['sitting']}" if r.get("sitting") else "")
            ax.plot([t for t, _ in pts], [v for _, v in pts], color=COLOURS.get(name), lw=1.2,
                    label=label)
        if target is not None:
            ax.axhline(target, color="#b00020", lw=0.9, ls="--", label=f"Skiplock's target ({target:,g})")
            _symlog_if_wide(ax, values, target, linthresh)
        ax.set_ylabel(ylabel)
        ax.set_ylim(bottom=0)
        ax.grid(True, color="0.92", lw=0.6)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=2, fontsize=8.5, frameon=False)
    axes[-1].set_xlabel("seconds from the start of the load (800 jobs/s, plain INSERTs)")
    m, pg = out.get("machine", {}), out.get("postgres", {})
    fig.suptitle(f"Horizon soak, {variant}: {TITLES.get(variant, variant)}, pinned {horizon['pin_minutes']:g} min\n"
                 f"{m.get('date', '?')[:10]}, {m.get('nproc', '?')} CPUs ({m.get('cpu_model', '?')}), "
                 f"PostgreSQL {pg.get('version', '?')}", fontsize=11)
    fig.tight_layout(rect=(0, 0.06, 1, 1))  # room for the legend below the plots
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.horizon_plot", description=__doc__.split("\n\n")[1])
    parser.add_argument("results", nargs="+", type=Path, help="horizon results files, oldest first")
    args = parser.parse_args(argv)
    variants: dict[str, dict] = {}
    for path in args.results:
        out = json.loads(path.read_text())
        last = out
        for variant, runs in out["horizon"]["variants"].items():
            for name, run in runs.items():
                if run.get("series"):
                    variants.setdefault(variant, {})[name] = {**run, "sitting": out["machine"]["date"][:16].replace("T", " ")}
    docs = Path(__file__).resolve().parent.parent / "docs"
    for variant, runs in variants.items():
        png = docs / f"horizon-{variant}.png"
        draw(variant, runs, last["horizon"], last, png)
        drawn = ", ".join(f"{name} {run['sitting']}" for name, run in runs.items())
        print(f"{png}: {drawn}")


if __name__ == "__main__":
    main()
