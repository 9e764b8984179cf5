"""python -m bitfold.fleet {run,shards}: see bitfold.fleet's docstring."""
import argparse
import json
import sys

from . import (LocalExecutor, LockedError, Options, PlanError, RayExecutor, make_plan, run,
               shard_commands)


def _list(text):
    return [p for p in (text or "").split(",") if p]


def _env(pairs):
    env = {}
    for p in pairs or []:
        k, sep, v = p.partition("=")
        if not sep or not k:
            raise argparse.ArgumentTypeError(f"--env {p!r}: expected NAME=VALUE")
        env[k] = v
    return env


def _parser():
    ap = argparse.ArgumentParser(prog="python -m bitfold.fleet",
                                 description="Tune and prebuild bitfold kernels across a fleet.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--shapes", action="append", required=True, metavar="FILE",
                        help="shapes file (repeatable): JSON list of {template|program, shape, params}")
    common.add_argument("--gpu-types", default="", metavar="A,B",
                        help="GPU types to tune on (Ray accelerator types, e.g. H100,H200)")
    common.add_argument("--archs", default="", metavar="sm_XY,...", help="archs to prebuild for")
    common.add_argument("--out", required=True, metavar="DIR", help="output directory")
    r = sub.add_parser("run", parents=[common], help="run the plan on Ray (or --local)")
    r.add_argument("--address", default=None,
                   help="Ray address (ray://host:10001, host:6379, auto); default: a new local cluster")
    r.add_argument("--local", type=int, default=0, metavar="N",
                   help="no Ray: N local processes (tune only with --local-gpu-types)")
    r.add_argument("--local-gpu-types", default="", metavar="A,B")
    r.add_argument("--num-cpus", type=int, default=None, help="CPUs of a new local Ray cluster")
    r.add_argument("--retries", type=int, default=2, help="retries per failed task (default 2)")
    r.add_argument("--task-timeout-s", type=float, default=1800, help="per task (default 1800)")
    r.add_argument("--tune-db", default=None, help="an existing tune DB to merge with")
    r.add_argument("--tune-budget-s", type=float, default=None, help="bitfold tune --budget-s")
    r.add_argument("--tune-resources", default=None, metavar="JSON",
                   help='Ray resources of a tune task instead of one GPU of its type, e.g. {"num_gpus": 1}')
    r.add_argument("--prebuild-jobs", type=int, default=1, help="compile threads per prebuild task")
    r.add_argument("--cli", default=None, help="the bitfold tool on the workers (default: PATH)")
    r.add_argument("--env", action="append", metavar="NAME=VALUE", help="environment for the tool")
    s = sub.add_parser("shards", parents=[common], help="print the plan as shard commands")
    s.add_argument("--shards", type=int, default=1)
    s.add_argument("--scheduler", choices=["slurm", "k8s", "plain"], default="slurm")
    s.add_argument("--jobs", type=int, default=8, help="prebuild -j")
    return ap


def _run(a):
    opts = Options(cli=a.cli, env=_env(a.env), retries=a.retries, task_timeout_s=a.task_timeout_s,
                   tune_options=(["--budget-s", str(a.tune_budget_s)] if a.tune_budget_s else []),
                   tune_resources=json.loads(a.tune_resources) if a.tune_resources else None,
                   prebuild_jobs=a.prebuild_jobs, tune_db=a.tune_db)
    plan = make_plan(a.shapes, _list(a.gpu_types), _list(a.archs))
    for p in plan.problems:
        print(f"[fleet] invalid shapes entry (skipped): {p}", file=sys.stderr)
    ex = (LocalExecutor(a.local, _list(a.local_gpu_types)) if a.local
          else RayExecutor(a.address, a.num_cpus))
    try:
        res = run(plan, a.out, ex, opts)
    finally:
        ex.close()
    print(res.table())
    for n in res.notes:
        print(f"note: {n}")
    for phase, target, label, why in res.failures:
        print(f"FAILED {phase} {target} {label}: {why}")
    for arch, d in res.caches.items():
        print(f"cache {arch}: {d}")
    if res.db:
        print(f"tune DB: {res.db}")
    return 0 if res.ok and not plan.problems else 1


def main(argv=None):
    a = _parser().parse_args(argv)
    try:
        if a.cmd == "shards":
            plan = make_plan(a.shapes, _list(a.gpu_types), _list(a.archs))
            for p in plan.problems:
                print(f"# invalid shapes entry (left out): {p}", file=sys.stderr)
            sys.stdout.write(shard_commands(plan, a.out, a.shards, a.scheduler, a.jobs))
            return 0
        return _run(a)
    except (PlanError, LockedError, ConnectionError, RuntimeError, ValueError, OSError) as e:
        print(f"bitfold.fleet: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
