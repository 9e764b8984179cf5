#!/usr/bin/env python3
"""Fetches NVIDIA's PTX Compiler API (libnvptxcompiler_static.a and
nvPTXCompiler.h) from PyPI's nvidia-nvptxcompiler wheel into DEST/lib and
DEST/include, for CMake (cmake/PtxCompiler.cmake calls this when the CUDA
toolkit lacks the library). The wheel's SHA-256 is pinned; DEST appears
whole or not at all (extracted beside it, then renamed), so concurrent
configures never see half a library.

    fetch-ptx-compiler.py --version 13.0.88 --sha256 HEX --dest DIR
"""
import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

MEMBERS = {
    "nvidia/cu13/lib/libnvptxcompiler_static.a": "lib/libnvptxcompiler_static.a",
    "nvidia/cu13/include/nvPTXCompiler.h": "include/nvPTXCompiler.h",
    "nvidia_nvptxcompiler-{v}.dist-info/licenses/License.txt": "License.txt",
}


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--version", required=True)
    ap.add_argument("--sha256", required=True)
    ap.add_argument("--dest", required=True)
    args = ap.parse_args()
    if os.path.exists(os.path.join(args.dest, MEMBERS["nvidia/cu13/lib/libnvptxcompiler_static.a"])):
        return 0
    parent = os.path.dirname(os.path.abspath(args.dest))
    os.makedirs(parent, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=parent) as tmp:
        print(f"fetch-ptx-compiler: pip download nvidia-nvptxcompiler=={args.version} (about 20 MB)",
              file=sys.stderr)
        rc = subprocess.call([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                              "--only-binary=:all:", "--platform", "manylinux_2_17_x86_64",
                              f"nvidia-nvptxcompiler=={args.version}", "-d", tmp])
        wheels = [f for f in os.listdir(tmp) if f.endswith(".whl")]
        if rc != 0 or len(wheels) != 1:
            print("fetch-ptx-compiler: download failed", file=sys.stderr)
            return 1
        wheel = os.path.join(tmp, wheels[0])
        got = sha256(wheel)
        if got != args.sha256:
            print(f"fetch-ptx-compiler: {wheels[0]} has SHA-256 {got}, expected {args.sha256}",
                  file=sys.stderr)
            return 1
        stage = os.path.join(tmp, "stage")
        with zipfile.ZipFile(wheel) as z:
            for src, dst in MEMBERS.items():
                out = os.path.join(stage, dst)
                os.makedirs(os.path.dirname(out), exist_ok=True)
                with z.open(src.format(v=args.version)) as fin, open(out, "wb") as fout:
                    shutil.copyfileobj(fin, fout)
        try:
            os.rename(stage, args.dest)
        except OSError:
            # Another configure won the race; its copy is the same wheel's.
            if not os.path.isdir(args.dest):
                raise
    print(f"fetch-ptx-compiler: {args.dest}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
