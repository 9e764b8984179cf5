"""Running a plan: tune on GPUs, merge, prebuild per arch, with retries,
timeouts, progress and a summary."""
import hashlib
import json
import os
import subprocess
import sys
import time

from . import _exec
from ._executors import UnschedulableError
from ._store import Store, atomic_write


class Options:
    def __init__(self, cli=None, env=None, retries=2, task_timeout_s=1800,
                 tune_options=(), tune_resources=None, prebuild_jobs=1,
                 tune_db=None, progress=sys.stderr):
        self.cli, self.env, self.retries = cli, dict(env or {}), retries
        self.task_timeout_s = task_timeout_s
        self.tune_options = list(tune_options)
        self.tune_resources = tune_resources  # None: one GPU of the task's type
        self.prebuild_jobs = prebuild_jobs
        self.tune_db = tune_db                # an existing DB to merge with
        self.progress = progress


class PhaseStats:
    def __init__(self, phase, target):
        self.phase, self.target = phase, target
        self.total = self.skipped = self.done = self.retried = 0
        self.failed = []  # (task label, reason)

    def row(self):
        return (self.phase, self.target, self.total, self.skipped, self.done,
                self.retried, len(self.failed))


class _Progress:
    def __init__(self, out, phase, total):
        self.out, self.phase, self.total = out, phase, total
        self.start, self.last, self.finished = time.monotonic(), 0.0, 0

    def tick(self, running, failed, force=False):
        now = time.monotonic()
        if self.out is None or (not force and now - self.last < 2.0):
            return
        self.last = now
        el = now - self.start
        left = self.total - self.finished
        eta = f", ETA {el / self.finished * left:.0f} s" if self.finished and left else ""
        print(f"[fleet] {self.phase}: {self.finished}/{self.total} finished, {failed} failed, "
              f"{running} submitted, {el:.0f} s{eta}", file=self.out, flush=True)


def _need_for(task, opts):
    if task.kind == "prebuild":
        return {"num_cpus": opts.prebuild_jobs}
    if opts.tune_resources is not None:
        return dict(opts.tune_resources)
    return {"num_cpus": 1, "num_gpus": 1, "accelerator_type": task.target}


def _body(task, opts, db_bytes):
    if task.kind == "tune":
        return _exec.run_tune, (task.entry,), {
            "cli": opts.cli, "env": opts.env, "options": opts.tune_options,
            "timeout": opts.task_timeout_s}
    return _exec.run_prebuild, (task.entry, task.target), {
        "db_bytes": db_bytes, "cli": opts.cli, "env": opts.env,
        "jobs": opts.prebuild_jobs, "timeout": opts.task_timeout_s}


def _why(log):
    """The line of a failed command's log that says why: its first error
    line (bitfold's tools print `...: error: ...`), else its last line."""
    lines = [l for l in log.splitlines() if l.strip()]
    errors = [l for l in lines if "error:" in l or "BIT MISMATCH" in l]
    return (errors or lines[-1:] or [""])[0]


def _accept(store, task, result):
    """Writes a finished task's files and records it; returns None or why
    it failed (and whether a retry may help)."""
    rc = result["rc"]
    if rc != 0:
        retry = rc not in (_exec.USAGE, _exec.BITS_DIFFER)
        kind = {_exec.USAGE: "rejected", _exec.BITS_DIFFER: "configs disagree",
                124: "timed out"}.get(rc, f"exit {rc}")
        return f"{kind}: {_why(result['log'])[:300]}", retry
    if task.kind == "tune":
        if not result["db"]:
            return "tune wrote no DB", True
        outputs = store.write_tune_part(task, result["db"])
    else:
        outputs, _ = store.write_cache_entries(task.target, result["files"])
    store.record(task, outputs)
    return None, False


def run_phase(executor, store, tasks, opts, phase, db_bytes=None):
    """Runs `tasks` (skipping those already done), with retries and timeouts.
    Returns one PhaseStats per target."""
    stats = {}
    for t in tasks:
        stats.setdefault(t.target, PhaseStats(phase, t.target)).total += 1
    todo = []
    for t in tasks:
        if store.done(t):
            stats[t.target].skipped += 1
        else:
            todo.append(t)
    bad_targets = {}
    for t in todo:
        if t.target in bad_targets:
            continue
        try:
            executor.check(_need_for(t, opts))
        except UnschedulableError as e:
            bad_targets[t.target] = str(e)
    for target, why in bad_targets.items():
        print(f"[fleet] {phase} {target}: {why}", file=opts.progress or sys.stderr)
    queue = []
    for t in todo:
        if t.target in bad_targets:
            stats[t.target].failed.append((t.entry.label, bad_targets[t.target]))
        else:
            queue.append((t, 1))
    progress = _Progress(opts.progress, phase, len(todo))
    progress.finished = len(todo) - len(queue)
    running = {}  # handle -> (task, attempt, submitted at)
    backstop = opts.task_timeout_s * 3 + 60
    while queue or running:
        while queue:
            t, attempt = queue.pop(0)
            fn, args, kwargs = _body(t, opts, db_bytes)
            running[executor.submit(fn, args, kwargs, _need_for(t, opts))] = (t, attempt, time.monotonic())
        for h in executor.wait(list(running), timeout=1.0):
            t, attempt, _ = running.pop(h)
            try:
                why, retry = _accept(store, t, executor.result(h))
            except Exception as e:  # the task or its worker crashed
                why, retry = f"crashed: {type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}", True
            _settle(stats[t.target], queue, progress, t, attempt, why, retry, opts)
        now = time.monotonic()
        for h, (t, attempt, since) in list(running.items()):
            if now - since > backstop:
                executor.cancel(h)
                running.pop(h)
                _settle(stats[t.target], queue, progress, t, attempt,
                        f"no answer after {backstop:.0f} s", True, opts)
        failed = sum(len(s.failed) for s in stats.values())
        progress.tick(len(running), failed)
    progress.tick(0, sum(len(s.failed) for s in stats.values()), force=True)
    return list(stats.values())


def _settle(st, queue, progress, task, attempt, why, retry, opts):
    if why is None:
        st.done += 1
        progress.finished += 1
        return
    if retry and attempt <= opts.retries:
        st.retried += 1
        print(f"[fleet] retrying {task.label} (attempt {attempt + 1}): {why}",
              file=opts.progress or sys.stderr)
        queue.append((task, attempt + 1))
        return
    st.failed.append((task.entry.label, why))
    progress.finished += 1


def overlapping_keys(parts):
    """Tune keys measured by more than one part (the merge keeps one
    measurement per key and config by its fixed rule; the fleet says so)."""
    seen, dup = {}, {}
    for p in parts:
        try:
            with open(p, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, ValueError):
            continue
        entries = data.get("entries", []) if isinstance(data, dict) else []
        for e in entries:
            key = json.dumps(e.get("key"), sort_keys=True) if isinstance(e, dict) else None
            if key is None:
                continue
            if key in seen and seen[key] != p:
                dup.setdefault(key, {seen[key]}).add(p)
            seen.setdefault(key, p)
    return dup


def merge_tune(store, opts):
    """`bitfold tune merge` of every part (and --tune-db) into OUT/tune-db.json.
    Returns (db path or None, message)."""
    parts = store.tune_parts()
    if opts.tune_db:
        parts = [opts.tune_db] + parts
    if not parts:
        return None, "no tune DB (default configs)"
    out = os.path.join(store.out, "tune-db.json")
    if len(parts) == 1 and parts[0] == opts.tune_db:
        with open(opts.tune_db, "rb") as f:
            atomic_write(out, f.read())
        return out, f"tune DB {opts.tune_db}"
    argv = [_exec.find_cli(opts.cli), "tune", "merge", *parts, "--out", out]
    p = subprocess.run(argv, capture_output=True, text=True,
                       env={**os.environ, **opts.env})
    if p.returncode != 0:
        raise RuntimeError(f"tune merge failed (exit {p.returncode}): {(p.stdout + p.stderr).strip()[-800:]}")
    dup = overlapping_keys(parts)
    msg = f"merged {len(parts)} tune DB(s) into {out}"
    if dup:
        msg += (f"; {len(dup)} key(s) were measured by more than one task: per key and config the "
                "merge kept the measurement with more samples, then the lower median")
    return out, msg


def digest(path):
    if not path:
        return ""
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def summary_table(rows):
    head = ("phase", "target", "tasks", "skipped", "done", "retried", "failed")
    cells = [head] + [tuple(str(c) for c in r) for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
