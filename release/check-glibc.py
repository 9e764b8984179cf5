#!/usr/bin/env python3
"""Fails when a shared library would not load on every manylinux_2_<N> system.

usage: check-glibc.py LIB [--max 2.28] [--allow-any-needed]

Checks, with binutils' readelf:
  - no GLIBC_2.x symbol version above --max is needed;
  - no libstdc++/libgcc version (GLIBCXX_, CXXABI_, GCC_) is needed: both
    are linked statically, so the library never meets torch's libstdc++;
  - every NEEDED library is on the manylinux allow-list of this library
    (libc, libm, libpthread, libdl, librt, the loader), unless
    --allow-any-needed (the dev build, which links the system's LLVM);
  - only bitfold_* symbols are exported;
  - functions that lived in libpthread, libdl or librt before glibc 2.34
    come with that library NEEDED (an older glibc looks for them there).
Prints one line per problem and exits 1, or one summary line and exits 0.
"""
import re
import subprocess
import sys

ALLOWED_NEEDED = {"libc.so.6", "libm.so.6", "libpthread.so.0", "libdl.so.2",
                  "librt.so.1", "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1"}


# Symbols that lived outside libc before glibc 2.34: an older glibc finds
# them only when their library is loaded, so it must be NEEDED.
OLD_HOMES = [("pthread_create", "libpthread.so.0"), ("pthread_join", "libpthread.so.0"),
             ("pthread_key_create", "libpthread.so.0"), ("dlopen", "libdl.so.2"),
             ("dlsym", "libdl.so.2"), ("shm_open", "librt.so.1")]


def readelf(*args):
    return subprocess.run(["readelf", "-W", *args], check=True,
                          capture_output=True, text=True).stdout


def version_key(text):
    return tuple(int(p) for p in text.split("."))


def problems(lib, newest, any_needed):
    found = []
    needs = re.findall(r"Name: (\S+)\s+Flags", readelf("-V", lib))
    glibc = [v[6:] for v in needs if v.startswith("GLIBC_2")]
    for v in sorted(set(glibc), key=version_key):
        if version_key(v) > version_key(newest):
            found.append(f"needs GLIBC_{v}, newer than {newest}")
    for v in sorted(set(needs)):
        if v.startswith(("GLIBCXX_", "CXXABI_", "GCC_")):
            found.append(f"needs {v} (libstdc++/libgcc must be static)")
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[(.+?)\]", readelf("-d", lib))
    if not any_needed:
        for n in needed:
            if n not in ALLOWED_NEEDED:
                found.append(f"links {n}, not on the manylinux allow-list")
    symbols = [line.split() for line in readelf("--dyn-syms", lib).splitlines()]
    for f in symbols:
        if len(f) >= 8 and f[6] != "UND" and f[4] in ("GLOBAL", "WEAK") and \
                f[3] in ("FUNC", "OBJECT") and not f[7].startswith("bitfold_"):
            found.append(f"exports {f[7]}")
    imported = {f[7].split("@")[0] for f in symbols if len(f) >= 8 and f[6] == "UND"}
    for prefix, home in OLD_HOMES:
        users = sorted(s for s in imported if s.startswith(prefix))
        if users and home not in needed:
            found.append(f"uses {users[0]} but does not link {home} (its home before glibc 2.34)")
    top = max(glibc, key=version_key, default="none")
    return found, top, needed


def main():
    args = sys.argv[1:]
    newest = "2.28"
    if "--max" in args:
        i = args.index("--max")
        newest = args[i + 1]
        del args[i:i + 2]
    any_needed = "--allow-any-needed" in args
    args = [a for a in args if a != "--allow-any-needed"]
    if len(args) != 1:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    found, top, needed = problems(args[0], newest, any_needed)
    for p in found:
        print(f"check-glibc: {args[0]}: {p}", file=sys.stderr)
    if found:
        return 1
    print(f"check-glibc: {args[0]}: newest GLIBC_{top} <= {newest}; needs {' '.join(needed)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
