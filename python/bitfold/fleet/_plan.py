"""The fleet plan: which tune and prebuild tasks a set of shapes files needs.

A task is one shapes-file entry on one target: a tune task runs on a GPU of
one type, a prebuild task compiles for one arch on any CPU. Its id hashes
everything that decides its output (the entry, a user kernel's text, the
target, and for prebuild the tune DB it reads), so a rerun recognises the
tasks it already finished.
"""
import hashlib
import json
import os

_ENTRY_KEYS = {"template", "program", "shape", "params"}


class PlanError(ValueError):
    """A plan that cannot run at all (no shapes, no targets)."""


class Entry:
    """One valid shapes-file entry, self-contained (a program's text inline)."""

    def __init__(self, source, index, data, program_text=None):
        self.source = source        # "FILE#INDEX", for messages
        self.index = index
        self.data = data            # the entry's JSON object
        self.program_text = program_text

    @property
    def label(self):
        name = self.data.get("template") or os.path.basename(self.data.get("program", "?"))
        params = ",".join(f"{k}={v}" for k, v in sorted(self.data.get("params", {}).items()))
        return f"{name} {self.data['shape']}" + (f" {params}" if params else "")

    def digest(self):
        h = hashlib.sha256(json.dumps(self.data, sort_keys=True).encode())
        if self.program_text is not None:
            h.update(self.program_text.encode())
        return h.hexdigest()

    def shapes_file(self, program_name="program.bfk"):
        """The entry as a one-entry shapes file; a program is referenced as
        `program_name` beside it."""
        data = dict(self.data)
        if self.program_text is not None:
            data["program"] = program_name
        return json.dumps([data], indent=1) + "\n"


def _check_entry(obj):
    if not isinstance(obj, dict):
        return "not a JSON object"
    unknown = set(obj) - _ENTRY_KEYS
    if unknown:
        return f"unknown key(s) {sorted(unknown)} (allowed: {sorted(_ENTRY_KEYS)})"
    if ("template" in obj) == ("program" in obj):
        return 'needs exactly one of "template" and "program"'
    name = obj.get("template", obj.get("program"))
    if not isinstance(name, str) or not name:
        return '"template"/"program" must be a non-empty string'
    shape = obj.get("shape")
    if not isinstance(shape, str) or not shape or \
            not all(p.strip().isdigit() for p in shape.split(",")):
        return '"shape" must be a string of comma-separated sizes, e.g. "1,4096,4096"'
    params = obj.get("params", {})
    if not isinstance(params, dict) or \
            not all(isinstance(v, (str, int, bool)) for v in params.values()):
        return '"params" must be an object of strings, integers or booleans'
    return None


MAX_SHAPES_FILE_BYTES = 16 << 20
MAX_PROGRAM_BYTES = 1 << 20


def _read_regular(path, cap, what):
    """Reads a regular file of at most `cap` bytes (no FIFOs, devices)."""
    st = os.stat(path)
    import stat as _stat
    if not _stat.S_ISREG(st.st_mode):
        raise ValueError(f"{what} {path}: not a regular file")
    if st.st_size > cap:
        raise ValueError(f"{what} {path}: {st.st_size} bytes, over the {cap}-byte limit")
    with open(path, "rb") as f:
        data = f.read(cap + 1)
    if len(data) > cap:
        raise ValueError(f"{what} {path}: over the {cap}-byte limit")
    return data.decode("utf-8")


def load_shapes(paths):
    """Reads shapes files entry by entry. Returns (entries, problems): a bad
    entry is a problem naming FILE#INDEX and why; the others still run. A
    file that cannot be read or is not a JSON list is one problem."""
    entries, problems = [], []
    for path in paths:
        try:
            items = json.loads(_read_regular(path, MAX_SHAPES_FILE_BYTES, "shapes file"))
        except (OSError, ValueError) as e:
            problems.append(f"{path}: {e}")
            continue
        if not isinstance(items, list):
            problems.append(f"{path}: not a JSON list of entries")
            continue
        for i, obj in enumerate(items):
            where = f"{path}#{i}"
            why = _check_entry(obj)
            if why:
                problems.append(f"{where}: {why}")
                continue
            text = None
            if "program" in obj:
                prog = os.path.join(os.path.dirname(os.path.abspath(path)), obj["program"])
                try:
                    text = _read_regular(prog, MAX_PROGRAM_BYTES, "program")
                except (OSError, ValueError) as e:
                    problems.append(f"{where}: {e}")
                    continue
            entries.append(Entry(where, i, obj, text))
    return entries, problems


class Task:
    """One unit of work: `kind` is "tune" (target = GPU type) or "prebuild"
    (target = arch)."""

    def __init__(self, kind, entry, target, extra=""):
        self.kind, self.entry, self.target = kind, entry, target
        h = hashlib.sha256(f"{kind}\0{target}\0{extra}\0".encode())
        h.update(entry.digest().encode())
        self.id = h.hexdigest()[:24]

    @property
    def label(self):
        return f"{self.kind} {self.target} {self.entry.label}"


class Plan:
    """Entries x targets. `gpu_types`: Ray accelerator types to tune on
    (empty: no tuning); `archs`: archs to prebuild for."""

    def __init__(self, entries, gpu_types=(), archs=(), problems=(), shapes_files=()):
        if not entries:
            raise PlanError("no valid shapes entries" +
                            (": " + "; ".join(problems) if problems else ""))
        if not gpu_types and not archs:
            raise PlanError("nothing to do: give GPU types to tune on and/or archs to prebuild for")
        for a in archs:
            if not (a.startswith("sm_") and a[3:].isdigit()):
                raise PlanError(f"arch {a!r}: expected sm_XY, e.g. sm_90")
        self.entries = list(entries)
        self.gpu_types = list(dict.fromkeys(gpu_types))
        self.archs = list(dict.fromkeys(archs))
        self.problems = list(problems)
        self.shapes_files = list(shapes_files)

    def tune_tasks(self):
        return [Task("tune", e, g) for g in self.gpu_types for e in self.entries]

    def prebuild_tasks(self, db_digest=""):
        return [Task("prebuild", e, a, db_digest) for a in self.archs for e in self.entries]


def make_plan(shapes_files, gpu_types=(), archs=()):
    entries, problems = load_shapes(shapes_files)
    return Plan(entries, gpu_types, archs, problems, shapes_files)
