"""Task bodies: what one Ray task (or one shard command) runs on a worker.

Each runs the `bitfold` command-line tool in a private temp directory and
returns plain data (bytes of the files it produced, the exit status and the
end of its log), so a worker needs no shared filesystem with the driver.
"""
import os
import shutil
import signal
import subprocess
import tempfile

# Exit statuses of the bitfold CLI (README): 2 = the input is wrong, 3 =
# configs disagree. Neither gets better by retrying.
USAGE, BITS_DIFFER = 2, 3
LOG_TAIL = 4000


def find_cli(cli=None):
    path = cli or os.environ.get("BITFOLD_CLI") or shutil.which("bitfold")
    if not path:
        raise FileNotFoundError("the bitfold command-line tool was not found: put it on PATH, "
                                "set BITFOLD_CLI, or pass cli=/path/to/bitfold")
    return path


def _run(argv, cwd, env, timeout):
    """Runs the tool in its own process group, so a timeout kills it and
    everything it started."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    p = subprocess.Popen(argv, cwd=cwd, env=full_env, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        out, _ = p.communicate(timeout=timeout)
        return p.returncode, out[-LOG_TAIL:]
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        return 124, (out or "")[-LOG_TAIL:] + f"\n(timed out after {timeout} s)"


def _write_entry(tmp, entry):
    shapes = os.path.join(tmp, "shapes.json")
    with open(shapes, "w", encoding="utf-8") as f:
        f.write(entry.shapes_file())
    if entry.program_text is not None:
        with open(os.path.join(tmp, "program.bfk"), "w", encoding="utf-8") as f:
            f.write(entry.program_text)
    return shapes


def run_tune(entry, cli=None, env=None, options=(), timeout=None):
    """Tunes one entry on this worker's GPU: {'rc', 'log', 'db': bytes|None}."""
    with tempfile.TemporaryDirectory(prefix="bitfold-fleet-") as tmp:
        shapes = _write_entry(tmp, entry)
        out = os.path.join(tmp, "out")
        rc, log = _run([find_cli(cli), "tune", "--shapes", shapes, "--out", out, *options],
                       tmp, env, timeout)
        db = None
        path = os.path.join(out, "tune-db.json")
        if rc == 0 and os.path.isfile(path):
            with open(path, "rb") as f:
                db = f.read()
        return {"rc": rc, "log": log, "db": db}


def run_prebuild(entry, arch, db_bytes=None, cli=None, env=None, jobs=1, timeout=None):
    """Compiles one entry for `arch`: {'rc', 'log', 'files': {relpath: bytes}}."""
    with tempfile.TemporaryDirectory(prefix="bitfold-fleet-") as tmp:
        shapes = _write_entry(tmp, entry)
        cache = os.path.join(tmp, "cache")
        argv = [find_cli(cli), "prebuild", "--shapes", shapes, "--arch", arch,
                "--cache-dir", cache, "--jobs", str(jobs)]
        if db_bytes:
            db = os.path.join(tmp, "tune-db.json")
            with open(db, "wb") as f:
                f.write(db_bytes)
            argv += ["--tune-db", db]
        rc, log = _run(argv, tmp, env, timeout)
        files = {}
        if rc == 0:
            for d, _, names in os.walk(cache):
                for n in names:
                    if n.startswith(".") or n.endswith(".lock"):
                        continue  # temp and lock files are the cache's own
                    p = os.path.join(d, n)
                    with open(p, "rb") as f:
                        files[os.path.relpath(p, cache)] = f.read()
        return {"rc": rc, "log": log, "files": files}
