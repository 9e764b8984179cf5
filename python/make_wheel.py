"""Builds the bitfold wheel from python/bitfold and a libbitfold.so, with the
standard library only (no setuptools or network): a wheel is a zip with a
dist-info folder (PEP 427). Called by scripts/build-wheel.sh, which says how
the library and the platform tag are chosen.

usage: make_wheel.py --lib LIB --version V --plat TAG --out DIR [--header H]
"""
import argparse
import base64
import hashlib
import os
import stat
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))

METADATA = """Metadata-Version: 2.1
Name: bitfold
Version: {version}
Summary: JIT-compiled fused GPU kernels, bit-exact with PyTorch eager
Requires-Python: >=3.9
Provides-Extra: torch
Requires-Dist: torch>=2.4; extra == "torch"
Provides-Extra: fleet
Requires-Dist: ray>=2.9; extra == "fleet"

bitfold's kernels through its C API (ctypes, no compiled extension), with
libbitfold.so inside the package. `bitfold.torch` needs PyTorch.
"""

WHEEL = """Wheel-Version: 1.0
Generator: bitfold make_wheel.py
Root-Is-Purelib: false
Tag: py3-none-{plat}
"""


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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--version", required=True)
    ap.add_argument("--plat", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--header")
    a = ap.parse_args()
    dist = f"bitfold-{a.version}.dist-info"
    entries = [(rel, open(full, "rb").read(), 0o644) for full, rel in package_files()]
    entries.append(("bitfold/lib/libbitfold.so", open(a.lib, "rb").read(), 0o755))
    if a.header:
        entries.append(("bitfold/include/bitfold.h", open(a.header, "rb").read(), 0o644))
    entries.append((f"{dist}/METADATA", METADATA.format(version=a.version).encode(), 0o644))
    entries.append((f"{dist}/WHEEL", WHEEL.format(plat=a.plat).encode(), 0o644))
    entries.append((f"{dist}/top_level.txt", b"bitfold\n", 0o644))
    record = [record_line(n, d) for n, d, _ in entries] + [f"{dist}/RECORD,,"]
    entries.append((f"{dist}/RECORD", ("\n".join(record) + "\n").encode(), 0o644))
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, f"bitfold-{a.version}-py3-none-{a.plat}.whl")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data, mode in entries:
            info = zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0))
            info.external_attr = (stat.S_IFREG | mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, data)
    print(path)


if __name__ == "__main__":
    main()
