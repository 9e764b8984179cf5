"""bitfold.fleet on a local Ray cluster (2 CPU workers) and the fake driver.

Run by CTest (python.FleetOnLocalRay, tests/python/fleet/run.sh) with:
  BITFOLD_CLI        the bitfold tool of this build
  BITFOLD_TEST_FAKE_CUDA   the fake libcuda (tests/runtime/FakeCuda.cpp)
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest

from bitfold import fleet
from bitfold.fleet import _exec

CLI = os.environ["BITFOLD_CLI"]
FAKE_CUDA = os.environ["BITFOLD_TEST_FAKE_CUDA"]
ENTRIES = [
    {"template": "residual_gate", "shape": "1,8,256"},
    {"template": "residual_gate", "shape": "2,4,512", "params": {"dtype": "f16"}},
    {"template": "ln_modulate", "shape": "1,16,1024"},
]
BAD = [{"template": "no_such_kernel", "shape": "1,8,256"}, {"shape": "1,2"},
       {"template": "conv_bias", "shape": "1,x"}]


def write(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f)
    return path


def bfk_names(d):
    out = set()
    for root, _, names in os.walk(d):
        out |= {n for n in names if n.endswith(".bfk")}
    return out


_RAY = None


def ray_executor():
    global _RAY
    if _RAY is None:
        _RAY = fleet.RayExecutor(num_cpus=2)
    return _RAY


class FleetTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="fleet-test-")
        self.dir = self.tmp.name
        self.shapes = write(os.path.join(self.dir, "shapes.json"), ENTRIES + BAD)

    def tearDown(self):
        self.tmp.cleanup()

    def opts(self, **kw):
        kw.setdefault("cli", CLI)
        kw.setdefault("progress", None)
        return fleet.Options(**kw)

    def test_prebuild_fleet_for_two_archs_equals_one_prebuild(self):
        plan = fleet.make_plan([self.shapes], archs=["sm_80", "sm_90"])
        self.assertEqual(len(plan.problems), 2)  # the two malformed entries
        res = fleet.run(plan, os.path.join(self.dir, "out"), ray_executor(), self.opts())
        # The unknown kernel is rejected per entry (not retried); the rest ran.
        self.assertEqual(sorted(f[2] for f in res.failures),
                         ["no_such_kernel 1,8,256"] * 2)
        self.assertTrue(all("rejected" in f[3] for f in res.failures))
        self.assertEqual(sum(s.retried for s in res.stats), 0)
        good = write(os.path.join(self.dir, "good.json"), ENTRIES)
        for arch in ("sm_80", "sm_90"):
            ref = os.path.join(self.dir, "ref-" + arch)
            subprocess.run([CLI, "prebuild", "--shapes", good, "--arch", arch,
                            "--cache-dir", ref, "-j", "2"], check=True, capture_output=True)
            self.assertEqual(bfk_names(res.caches[arch]), bfk_names(ref))
            self.assertEqual(len(bfk_names(ref)), 3)
            v = subprocess.run([CLI, "cache", "verify", "--dir", res.caches[arch]],
                               capture_output=True, text=True)
            self.assertEqual(v.returncode, 0, v.stdout + v.stderr)

    def test_tune_fleet_on_fake_driver_equals_sequential_tune(self):
        good = write(os.path.join(self.dir, "good.json"), ENTRIES[:2])
        env = {"BITFOLD_LIBCUDA": FAKE_CUDA}
        plan = fleet.make_plan([good], gpu_types=["fake"], archs=["sm_90"])
        res = fleet.run(plan, os.path.join(self.dir, "out"), ray_executor(),
                        self.opts(env=env, tune_resources={"num_cpus": 1}))
        self.assertTrue(res.ok, res.failures)
        seq = os.path.join(self.dir, "seq")
        subprocess.run([CLI, "tune", "--shapes", good, "--out", seq], check=True,
                       capture_output=True, env={**os.environ, **env})

        def winners(path):
            with open(path) as f:
                data = json.load(f)
            out = {}
            for e in data["entries"]:
                k = dict(e["key"])
                k.pop("gpu")  # "Fake H200 #0": the worker's device index
                meas = sorted(e["measurements"], key=lambda m: (m["medianUs"], m["config"]))
                out[json.dumps(k, sort_keys=True)] = (len(e["measurements"]), meas[0]["config"])
            return out
        self.assertEqual(winners(res.db), winners(os.path.join(seq, "tune-db.json")))
        # The prebuild after the tune used the merged DB's winners.
        ref = os.path.join(self.dir, "ref")
        subprocess.run([CLI, "prebuild", "--shapes", good, "--arch", "sm_90", "--tune-db", res.db,
                        "--cache-dir", ref], check=True, capture_output=True)
        self.assertEqual(bfk_names(res.caches["sm_90"]), bfk_names(ref))

    def test_killed_run_resumes_without_duplicates(self):
        out = os.path.join(self.dir, "out")
        good = write(os.path.join(self.dir, "good.json"), ENTRIES)
        cmd = [sys.executable, "-m", "bitfold.fleet", "run", "--local", "1", "--shapes", good,
               "--archs", "sm_80,sm_90", "--out", out, "--cli", CLI]
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
        manifest = os.path.join(out, "fleet-manifest.json")
        deadline = time.time() + 120
        while time.time() < deadline and p.poll() is None:
            if os.path.exists(manifest) and _load(manifest)["tasks"]:
                break
            time.sleep(0.05)
        os.killpg(p.pid, signal.SIGKILL)  # the driver and its workers, mid-run
        p.wait()
        first = len(_load(manifest)["tasks"])
        self.assertGreaterEqual(first, 1)
        r = subprocess.run(cmd, capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        tasks = _load(manifest)["tasks"]
        self.assertEqual(len(tasks), 6)
        skipped = sum(int(l.split()[3]) for l in r.stdout.splitlines() if l.startswith("prebuild "))
        self.assertEqual(skipped, first)
        for arch in ("sm_80", "sm_90"):
            self.assertEqual(len(bfk_names(os.path.join(out, "cache", arch))), 3)
        leftovers = [n for _, _, ns in os.walk(out) for n in ns if n.startswith(".tmp-")]
        self.assertEqual(leftovers, [])

    def test_second_run_on_same_output_refuses(self):
        out = os.path.join(self.dir, "out")
        with _store(out):
            r = subprocess.run([sys.executable, "-m", "bitfold.fleet", "run", "--local", "1",
                                "--shapes", self.shapes, "--archs", "sm_90", "--out", out,
                                "--cli", CLI], capture_output=True, text=True)
        self.assertEqual(r.returncode, 2)
        self.assertIn("being written by another fleet run", r.stderr)
        self.assertFalse(os.path.exists(os.path.join(out, "cache")))

    def test_missing_gpu_type_is_reported_not_waited_for(self):
        plan = fleet.make_plan([self.shapes], gpu_types=["H999"], archs=["sm_90"])
        t0 = time.time()
        res = fleet.run(plan, os.path.join(self.dir, "out"), ray_executor(), self.opts())
        self.assertLess(time.time() - t0, 120)
        tune_fail = [f for f in res.failures if f[0] == "tune"]
        self.assertEqual(len(tune_fail), len(ENTRIES) + 1)
        self.assertIn("no Ray worker has a GPU of type 'H999'", tune_fail[0][3])
        # Prebuild still ran (default configs) for the valid entries.
        self.assertEqual(len(bfk_names(res.caches["sm_90"])), 3)

    def test_crashing_and_hanging_tasks_are_retried_then_reported(self):
        crash = os.path.join(self.dir, "crash.sh")
        with open(crash, "w") as f:
            # argv: prebuild --shapes FILE ...; the entry's shape is in FILE.
            f.write('#!/bin/sh\ngrep -q 1,8,256 "$3" && kill -SEGV $$\n'
                    'grep -q 2,4,512 "$3" && sleep 60\n'
                    f'exec {CLI} "$@"\n')
        os.chmod(crash, 0o755)
        plan = fleet.make_plan([write(os.path.join(self.dir, "g.json"), ENTRIES)], archs=["sm_90"])
        res = fleet.run(plan, os.path.join(self.dir, "out"), ray_executor(),
                        self.opts(cli=crash, retries=1, task_timeout_s=3))
        why = {f[2]: f[3] for f in res.failures}
        self.assertEqual(len(why), 2)
        self.assertIn("exit -11", why["residual_gate 1,8,256"])
        self.assertIn("timed out", why["residual_gate 2,4,512 dtype=f16"])
        self.assertEqual(sum(s.retried for s in res.stats), 2)
        self.assertEqual(len(bfk_names(res.caches["sm_90"])), 1)

    def test_failure_names_the_error_line_not_the_summary_line(self):
        fail = os.path.join(self.dir, "fail.sh")
        with open(fail, "w") as f:
            f.write('#!/bin/sh\necho "bitfold prebuild: error: no legal config (x)"\n'
                    'echo "cubins: /somewhere (0 entries)"\nexit 1\n')
        os.chmod(fail, 0o755)
        plan = fleet.make_plan([write(os.path.join(self.dir, "g.json"), ENTRIES[:1])], archs=["sm_90"])
        res = fleet.run(plan, os.path.join(self.dir, "out"), ray_executor(),
                        self.opts(cli=fail, retries=0))
        self.assertEqual(len(res.failures), 1)
        self.assertIn("error: no legal config (x)", res.failures[0][3])

    def test_unreachable_ray_address_is_a_clear_error(self):
        r = subprocess.run([sys.executable, "-m", "bitfold.fleet", "run", "--address",
                            "127.0.0.1:1", "--shapes", self.shapes, "--archs", "sm_90",
                            "--out", os.path.join(self.dir, "out")],
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("cannot reach the Ray cluster at 127.0.0.1:1", r.stderr)

    def test_shard_commands_build_the_same_cache(self):
        good = write(os.path.join(self.dir, "good.json"), ENTRIES)
        plan = fleet.make_plan([good], archs=["sm_90"])
        out = os.path.join(self.dir, "shards")
        text = fleet.shard_commands(plan, out, shards=2, scheduler="plain", jobs=2)
        self.assertIn("bitfold prebuild --shapes", text)
        r = subprocess.run(["bash", "-c", text], capture_output=True, text=True,
                           env={**os.environ, "PATH": os.path.dirname(CLI) + ":" + os.environ["PATH"]})
        self.assertEqual(r.returncode, 0, r.stderr)
        ref = fleet.run(plan, os.path.join(self.dir, "fleet"), ray_executor(), self.opts())
        self.assertEqual(bfk_names(os.path.join(out, "cache", "sm_90")),
                         bfk_names(ref.caches["sm_90"]))
        tune_plan = fleet.make_plan([good], gpu_types=["H200"], archs=["sm_90"])
        text = fleet.shard_commands(tune_plan, out, shards=4, scheduler="slurm")
        self.assertIn("--shard $SLURM_ARRAY_TASK_ID/4", text)
        self.assertIn("bitfold tune merge", text)
        self.assertIn("--tune-db", text)


def _load(path):
    with open(path) as f:
        return json.load(f)


def _store(out):
    from bitfold.fleet._store import Store
    return Store(out)


if __name__ == "__main__":
    unittest.main()
