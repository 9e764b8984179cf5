"""The fleet's output directory: one writer at a time, nothing half-written.

    OUT/.fleet.lock            held (flock) by the run writing OUT
    OUT/fleet-manifest.json    finished tasks and the files each wrote
    OUT/tune/parts/ID.json     one tune task's DB
    OUT/tune-db.json           the merged DB (`bitfold tune merge`)
    OUT/cache/ARCH/...         the cubin entries, ready for BITFOLD_CACHE_DIR

Every file is written to a temp file beside its target, fsynced and renamed,
so a killed run leaves whole files only; the manifest is rewritten the same
way after a task's files are in place, so a task is either recorded with all
its files or not recorded (and runs again).
"""
import errno
import fcntl
import json
import os
import tempfile

MANIFEST = "fleet-manifest.json"


class LockedError(RuntimeError):
    """Another fleet run is writing the same output directory."""


def atomic_write(path, data):
    """Writes bytes to `path` through a temp file in the same directory."""
    d = os.path.dirname(path) or "."
    os.makedirs(d, exist_ok=True)
    if os.path.lexists(path) and not os.path.isfile(path):
        raise OSError(errno.EEXIST, f"{path}: exists and is not a regular file; not replaced")
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=d)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


class Store:
    def __init__(self, out):
        self.out = os.path.abspath(out)
        self._lock_fd = None
        self.manifest = {"version": 1, "tasks": {}}

    # -- one writer ---------------------------------------------------------
    def acquire(self):
        os.makedirs(self.out, exist_ok=True)
        path = os.path.join(self.out, ".fleet.lock")
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip()
            os.close(fd)
            raise LockedError(f"{self.out} is being written by another fleet run"
                              f" ({holder or 'unknown process'}); refusing to write it too")
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {os.uname().nodename}\n".encode(), 0)
        self._lock_fd = fd
        self._remove_stale_temps()
        self._load_manifest()

    def _remove_stale_temps(self):
        """Temp files of a killed run (we hold the lock: none is live)."""
        for d, _, names in os.walk(self.out):
            for n in names:
                if n.startswith(".tmp-"):
                    try:
                        os.unlink(os.path.join(d, n))
                    except OSError:
                        pass

    def release(self):
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, *exc):
        self.release()

    # -- the manifest --------------------------------------------------------
    def _load_manifest(self):
        path = os.path.join(self.out, MANIFEST)
        if not os.path.exists(path):
            return
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        if not isinstance(data, dict) or not isinstance(data.get("tasks"), dict):
            raise ValueError(f"{path}: not a fleet manifest")
        self.manifest = data

    def done(self, task):
        """True when `task` finished in an earlier run and its files exist."""
        rec = self.manifest["tasks"].get(task.id)
        return bool(rec) and all(os.path.isfile(os.path.join(self.out, p))
                                 for p in rec.get("outputs", []))

    def record(self, task, outputs):
        self.manifest["tasks"][task.id] = {
            "kind": task.kind, "target": task.target,
            "entry": task.entry.label, "outputs": sorted(outputs)}
        atomic_write(os.path.join(self.out, MANIFEST),
                     (json.dumps(self.manifest, indent=1, sort_keys=True) + "\n").encode())

    # -- task outputs --------------------------------------------------------
    def write_tune_part(self, task, db_bytes):
        rel = os.path.join("tune", "parts", task.id + ".json")
        atomic_write(os.path.join(self.out, rel), db_bytes)
        return [rel]

    def tune_parts(self):
        rels = [r["outputs"][0] for r in self.manifest["tasks"].values()
                if r["kind"] == "tune" and r.get("outputs")]
        return [os.path.join(self.out, r) for r in sorted(rels)
                if os.path.isfile(os.path.join(self.out, r))]

    def cache_dir(self, arch):
        return os.path.join(self.out, "cache", arch)

    def write_cache_entries(self, arch, files):
        """Adds a prebuild task's entries (relative path -> bytes). Entries
        are content-addressed by their key: a name already present is the
        same key and is kept, never overwritten."""
        written, kept = [], 0
        base = self.cache_dir(arch)
        for rel, data in sorted(files.items()):
            norm = os.path.normpath(rel)
            if norm.startswith("..") or os.path.isabs(norm):
                raise ValueError(f"cache entry path {rel!r} leaves the cache directory")
            path = os.path.join(base, norm)
            if os.path.isfile(path):
                kept += 1
            else:
                atomic_write(path, data)
            written.append(os.path.relpath(path, self.out))
        return written, kept
