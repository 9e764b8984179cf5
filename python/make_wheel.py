"""Builds the bitfold wheel from python/bitfold and a prebuilt libbitfold.so,
with the standard library only (no build backend, no network): a wheel is a
zip with a dist-info folder (PEP 427). The package's name, summary, Python
and extras come from pyproject.toml's [project] table and the version from
CMakeLists.txt's project() (the one definition of each; scikit-build-core
reads the same two for `pip wheel .`). Called by scripts/build-wheel.sh,
which says how the library and the platform tag are chosen.

usage: make_wheel.py --lib LIB --plat TAG --out DIR [--header H]
       make_wheel.py --print-version
"""
import argparse
import base64
import hashlib
import os
import re
import stat
import zipfile

try:
    import tomllib
except ImportError:  # Python < 3.11: pip's copy of the same parser
    from pip._vendor import tomli as tomllib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

WHEEL = """Wheel-Version: 1.0
Generator: bitfold make_wheel.py
Root-Is-Purelib: false
Tag: py3-none-{plat}
"""


def version():
    text = open(os.path.join(ROOT, "CMakeLists.txt")).read()
    return re.search(r"project\(bitfold VERSION ([0-9.]+)", text).group(1)


def metadata():
    """PEP 566 METADATA from pyproject.toml's [project] table."""
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)["project"]
    lines = ["Metadata-Version: 2.1", f"Name: {project['name']}",
             f"Version: {version()}", f"Summary: {project['description']}",
             f"Requires-Python: {project['requires-python']}"]
    for extra, reqs in project.get("optional-dependencies", {}).items():
        lines.append(f"Provides-Extra: {extra}")
        lines += [f'Requires-Dist: {r}; extra == "{extra}"' for r in reqs]
    return "\n".join(lines) + "\n"


def record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def package_files():
    root = os.path.join(HERE, "bitfold")
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in ("__pycache__", "lib"))
        for f in sorted(filenames):
            if f.endswith(".py"):
                full = os.path.join(dirpath, f)
                yield full, os.path.relpath(full, HERE)


def write_wheel(path, entries):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data, mode in entries:
            info = zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0))
            info.external_attr = (stat.S_IFREG | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib")
    ap.add_argument("--plat")
    ap.add_argument("--out")
    ap.add_argument("--header")
    ap.add_argument("--fast", help="_bitfold_fast.abi3.so (bitfold.torch's warm call in C)")
    ap.add_argument("--ptxc", help="libbitfold-ptxc.so.0 (the PTX Compiler API; codegen's "
                    "default cubin tool, found next to libbitfold.so)")
    ap.add_argument("--print-version", action="store_true")
    a = ap.parse_args()
    if a.print_version:
        print(version())
        return
    if not (a.lib and a.plat and a.out):
        ap.error("--lib, --plat and --out are required")
    dist = f"bitfold-{version()}.dist-info"
    entries = [(rel, open(full, "rb").read(), 0o644) for full, rel in package_files()]
    entries.append(("bitfold/lib/libbitfold.so", open(a.lib, "rb").read(), 0o755))
    if a.fast:
        entries.append(("bitfold/lib/_bitfold_fast.abi3.so", open(a.fast, "rb").read(), 0o755))
    if a.ptxc:
        entries.append(("bitfold/lib/libbitfold-ptxc.so.0", open(a.ptxc, "rb").read(), 0o755))
    if a.header:
        entries.append(("bitfold/include/bitfold.h", open(a.header, "rb").read(), 0o644))
    entries.append((f"{dist}/METADATA", metadata().encode(), 0o644))
    entries.append((f"{dist}/WHEEL", WHEEL.format(plat=a.plat).encode(), 0o644))
    entries.append((f"{dist}/top_level.txt", b"bitfold\n", 0o644))
    record = [record_line(n, d) for n, d, _ in entries] + [f"{dist}/RECORD,,"]
    entries.append((f"{dist}/RECORD", ("\n".join(record) + "\n").encode(), 0o644))
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, f"bitfold-{version()}-py3-none-{a.plat}.whl")
    write_wheel(path, entries)
    print(path)


if __name__ == "__main__":
    main()
