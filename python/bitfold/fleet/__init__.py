"""bitfold.fleet: the offline tune + prebuild build across many machines.

    python -m bitfold.fleet run --shapes serve.json --gpu-types H100,H200 \\
        --archs sm_90,sm_100 --address ray://head:10001 --out fleet-out

plans one tune task per (shapes entry, GPU type) (each needs one GPU of that
type: a Ray `accelerator_type`) and one prebuild task per (entry, arch)
(CPUs only), runs them as Ray tasks with bounded retries and a timeout per
task, merges the tune DBs with `bitfold tune merge` and gathers the cubins
into fleet-out/cache/ARCH/, each ready to ship as $BITFOLD_CACHE_DIR with
fleet-out/tune-db.json. A rerun skips what is already done; a killed run
leaves only whole files; a second run on the same output refuses.

`python -m bitfold.fleet shards ...` prints the same plan as plain shard
commands (Slurm arrays, Kubernetes indexed jobs). Ray is optional
(`pip install 'bitfold[fleet]'`); nothing else in bitfold needs it.
Workers need the `bitfold` command-line tool (a release package's bin/)
on PATH, in $BITFOLD_CLI, or given as cli=.
"""
import json
import os
import shlex
import sys

from ._executors import LocalExecutor, RayExecutor, UnschedulableError
from ._plan import Plan, PlanError, make_plan, load_shapes
from ._run import Options, merge_tune, run_phase, summary_table, digest
from ._store import LockedError, Store, atomic_write

__all__ = ["Plan", "PlanError", "LockedError", "Options", "FleetResult", "make_plan",
           "run", "shard_commands", "RayExecutor", "LocalExecutor"]


class FleetResult:
    def __init__(self, stats, db, caches, notes):
        self.stats, self.db, self.caches, self.notes = stats, db, caches, notes

    @property
    def failures(self):
        return [(s.phase, s.target, label, why) for s in self.stats for label, why in s.failed]

    @property
    def ok(self):
        return not self.failures

    def table(self):
        return summary_table([s.row() for s in self.stats])


def run(plan, out, executor, options=None):
    """Runs `plan` on `executor`, writing `out`. Raises LockedError when
    another run holds `out`."""
    opts = options or Options()
    notes = [f"invalid shapes entry skipped: {p}" for p in plan.problems]
    stats, caches = [], {}
    with Store(out) as store:
        if plan.gpu_types:
            stats += run_phase(executor, store, plan.tune_tasks(), opts, "tune")
        db, msg = merge_tune(store, opts)
        notes.append(msg)
        if plan.archs:
            db_bytes = open(db, "rb").read() if db else None
            stats += run_phase(executor, store, plan.prebuild_tasks(digest(db)), opts,
                               "prebuild", db_bytes)
            caches = {a: store.cache_dir(a) for a in plan.archs}
    return FleetResult(stats, db, caches, notes)


_INDEX = {"slurm": "$SLURM_ARRAY_TASK_ID", "k8s": "$JOB_COMPLETION_INDEX", "plain": "$I"}


def shard_commands(plan, out, shards=1, scheduler="slurm", jobs=8):
    """Writes the plan's valid entries to OUT/shapes.json (programs beside it)
    and returns the shell text of the same build as shard commands."""
    if scheduler not in _INDEX:
        raise ValueError(f"scheduler {scheduler!r}: expected one of {sorted(_INDEX)}")
    if shards < 1:
        raise ValueError("shards must be >= 1")
    os.makedirs(out, exist_ok=True)
    items = []
    for i, e in enumerate(plan.entries):
        data = dict(e.data)
        if e.program_text is not None:
            name = f"program-{i}.bfk"
            atomic_write(os.path.join(out, name), e.program_text.encode())
            data["program"] = name
        items.append(data)
    shapes = os.path.join(out, "shapes.json")
    atomic_write(shapes, (json.dumps(items, indent=1) + "\n").encode())
    q, idx = shlex.quote, _INDEX[scheduler]
    lines = ["#!/usr/bin/env bash", f"# bitfold fleet plan: {len(items)} entries, "
             f"GPU types {plan.gpu_types or '-'}, archs {plan.archs or '-'}, {shards} shard(s)", "set -euo pipefail"]
    for g in plan.gpu_types:
        lines += ["", f"# 1. tune on GPUs of type {g}: an array of {shards} task(s), index {idx} in 0..{shards - 1},",
                  f"#    each on one host with {g} GPUs (e.g. Slurm --gres=gpu:{g.lower()}:N, a k8s nodeSelector)",
                  f"bitfold tune --shapes {q(shapes)} --devices all --shard {idx}/{shards} "
                  f"--out {q(os.path.join(out, 'tune', g))}/part-{idx}"]
    if plan.gpu_types:
        lines += ["", "# 2. merge, once, after every tune task (strict and order-independent)",
                  f"bitfold tune merge {q(out)}/tune/*/part-*/tune-db.json --out {q(os.path.join(out, 'tune-db.json'))}"]
    db = f" --tune-db {q(os.path.join(out, 'tune-db.json'))}" if plan.gpu_types else ""
    for a in plan.archs:
        lines += ["", f"# 3. prebuild for {a} on any CPU machine",
                  f"bitfold prebuild --shapes {q(shapes)}{db} --arch {a} "
                  f"--cache-dir {q(os.path.join(out, 'cache', a))} -j {jobs}"]
    return "\n".join(lines) + "\n"
