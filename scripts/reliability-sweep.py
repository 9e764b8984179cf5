#!/usr/bin/env python3
"""Bad-input sweep over bitfold's file, text and Python surfaces.

Runs the built `bitfold` tool (and the Python package over the built
libbitfold.so) on a catalogue of hostile inputs, each in its own process
with a timeout and a memory limit, and counts per surface: inputs tried,
crashes (killed by a signal), hangs (timeout), data loss (a file that must
survive was replaced or changed) and silent accepts (exit 0 / no exception
where a refusal is the documented answer). Prints a Markdown table.

Usage: scripts/reliability-sweep.py [BUILD_DIR] (default: build)
"""
import os
import resource
import shutil
import socket
import stat
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build"))
TOOL = os.path.join(BUILD, "tools", "bitfold")
LIB = os.path.join(BUILD, "runtime", "libbitfold.so")
TIMEOUT = 20
MEM = 2 << 30
ENV = dict(os.environ, BITFOLD_DISK_CACHE="0", BITFOLD_QUIET="1",
           BITFOLD_LIBCUDA="/nonexistent/libcuda.so.1", BITFOLD_LIB=LIB,
           PYTHONPATH=os.path.join(ROOT, "python"))

results = {}  # surface -> [tried, crashes, hangs, data loss, silent accepts]


def limit():
    resource.setrlimit(resource.RLIMIT_AS, (MEM, MEM))


def run(argv, stdin=None):
    """(outcome, returncode): outcome is ok, crash or hang."""
    try:
        p = subprocess.run(argv, env=ENV, capture_output=True, timeout=TIMEOUT,
                           preexec_fn=limit, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return "hang", None
    return ("crash" if p.returncode < 0 else "ok"), p.returncode


def record(surface, outcome, rc, must_refuse=True, lost=False):
    r = results.setdefault(surface, [0, 0, 0, 0, 0])
    r[0] += 1
    r[1] += outcome == "crash"
    r[2] += outcome == "hang"
    r[3] += lost
    r[4] += outcome == "ok" and must_refuse and rc == 0


def program(literal="1.0", groups="groups 1",
            guard="guard cols % 1 == 0, 1 <= cols <= 16777216", body=None):
    body = body or f"  %c = const {literal} : f32\n  %y = mul %x, %c : f32\n"
    return (f"bitfold.row_program sweep v1\n{groups}\n{guard}\n"
            "input x : f32 row_major per_element\nbody:\n  %x = load x : f32\n"
            f"{body}  %r = round to bf16 %y : bf16\n  output y : bf16 row_major = %r\n")


def kernel_texts():
    """(text, must_refuse) for the kernel text surface."""
    out = []
    for n in (1200, 10000, 30000, 100000, 1000000):
        out += [(program("0." + "3" * n), True), (program("1" * n), True),
                (program("1e-" + "9" * n), True), (program("-0." + "7" * n + "e5"), True)]
    for lit in ("1e39", "-1e39", "3.5e38", "1e4000", "340282356779733661637539395458142568448"):
        out.append((program(lit), True))
    for lit in ("3.4028234e38", "1e-50", "0x7f800000", "1.5"):
        out.append((program(lit), False))
    for g in ("groups 0", "groups 5", "groups 1000", "groups 2147483647", "groups 99999999999"):
        out.append((program(groups=g), True))
    for guard in ("guard cols % 8 == 0, 1 <= cols <= 7", "guard cols % 1024 == 0, 1025 <= cols <= 2047",
                  "guard cols % 0 == 0, 1 <= cols <= 8", "guard cols % 1 == 0, 9 <= cols <= 8",
                  "guard cols % 9223372036854775807 == 0, 1 <= cols <= 9223372036854775806"):
        out.append((program(guard=guard), True))
    for depth in (1999, 2100, 50000):
        chain = "".join(f"  %n{i} = neg %{'x' if i == 0 else 'n' + str(i - 1)} : f32\n"
                        for i in range(depth))
        out.append((program(body=chain + f"  %y = neg %n{depth - 1} : f32\n"), depth >= 2000))
    return out


def sweep_kernel_text(tmp):
    for text, refuse in kernel_texts():
        path = os.path.join(tmp, "k.bfk")
        with open(path, "w") as f:
            f.write(text)
        outcome, rc = run([TOOL, "interp", "--program", path, "--shape", "2,64"])
        record("kernel text (interp --program)", outcome, rc, refuse)
    # The guard at run time: shapes outside a satisfiable guard.
    path = os.path.join(tmp, "g.bfk")
    with open(path, "w") as f:
        f.write(program(guard="guard cols % 4 == 0, 4 <= cols <= 64"))
    for cols, refuse in (("6", True), ("2", True), ("128", True), ("8", False)):
        outcome, rc = run([TOOL, "interp", "--program", path, "--shape", "2," + cols])
        record("interp column guard", outcome, rc, refuse)


def hostile_files(tmp, cap):
    """Name -> path of inputs no loader may read."""
    fifo, folder, link, big = (os.path.join(tmp, n) for n in ("fifo", "dir", "link", "big"))
    os.mkfifo(fifo)
    os.mkdir(folder)
    os.symlink("/dev/zero", link)
    with open(big, "wb") as f:
        f.truncate(cap + 1)
    return {"fifo": fifo, "dev-zero": "/dev/zero", "dev-null": "/dev/null",
            "dir": folder, "link-to-dev-zero": link, "oversized": big}


def db_text(measurement='"config":"r1.t128.v8.p1","medianUs":30.0,"spreadUs":1.0,'
                        '"minUs":29.0,"maxUs":31.0,"samples":20,"cut":false'):
    return ('{"format":"bitfold-tune-db","version":1,"entries":[{"key":{"kernel":"k",'
            '"kernelHash":"h","shapeClass":"c","dtypes":"x:bf16","gpu":"g","arch":"sm_90",'
            '"bitfold":"0.1.0","llvm":"22","toolchain":"t"},"defaultConfig":"r1.t128.v8.p1",'
            '"measurements":[{' + measurement + '}]}]}')


def sweep_loaders(tmp):
    files = hostile_files(tmp, 256 << 20)
    out = os.path.join(tmp, "out.json")
    for name, path in files.items():
        outcome, rc = run([TOOL, "tune", "merge", path, "--out", out])
        record("tune DB loader (tune merge IN)", outcome, rc, True, os.path.exists(out))
        outcome, rc = run([TOOL, "prebuild", "--shapes", path, "--arch", "sm_90",
                           "--cache-dir", os.path.join(tmp, "cache")])
        record("shapes file (prebuild --shapes)", outcome, rc)
        outcome, rc = run([TOOL, "interp", "--program", path, "--shape", "2,64"])
        record("program file (interp --program)", outcome, rc)
        code = ("import bitfold,sys; rt=bitfold.Runtime(disk_cache=False, tune_db=sys.argv[1]);"
                "rt.close()")
        outcome, rc = run([sys.executable, "-c", code, path])
        # A refused tune DB is a warning: the runtime is created (not a silent accept).
        record("BITFOLD_TUNE_DB / Runtime(tune_db=)", outcome, rc, must_refuse=False)
    bad = {"median<min": db_text().replace('"medianUs":30.0', '"medianUs":1.0'),
           "min>max": db_text().replace('"minUs":29.0', '"minUs":40.0'),
           "dup key": db_text().replace('"samples":20', '"samples":20,"samples":1'),
           "unknown default config": db_text().replace("r1.t128.v8.p1", "fastest", 1),
           "unknown measured config": db_text().replace('"config":"r1.t128.v8.p1"',
                                                        '"config":"fastest"'),
           "not JSON": "{", "NaN": db_text().replace("30.0", "NaN"),
           "huge int": db_text().replace('"samples":20', '"samples":1e400')}
    for name, text in bad.items():
        path = os.path.join(tmp, "bad.json")
        with open(path, "w") as f:
            f.write(text)
        if os.path.exists(out):
            os.unlink(out)
        outcome, rc = run([TOOL, "tune", "merge", path, "--out", out])
        record("tune DB content (tune merge)", outcome, rc, True, os.path.exists(out))


def sweep_writers(tmp):
    src = os.path.join(tmp, "in.json")
    with open(src, "w") as f:
        f.write(db_text())
    fifo, folder, sock, devlink, dangling = (os.path.join(tmp, n) for n in
                                            ("wfifo", "wdir", "wsock", "wdev", "wdangling"))
    os.mkfifo(fifo)
    os.mkdir(folder)
    s = socket.socket(socket.AF_UNIX)
    s.bind(sock)
    s.close()
    os.symlink("/dev/null", devlink)
    os.symlink(os.path.join(tmp, "no", "such"), dangling)
    for target in (fifo, folder, sock, devlink, dangling, "/dev/stdout"):
        before = os.lstat(target)
        outcome, rc = run([TOOL, "tune", "merge", src, "--out", target])
        after = os.lstat(target)
        lost = (stat.S_IFMT(before.st_mode) != stat.S_IFMT(after.st_mode)
                or before.st_ino != after.st_ino)
        record("tune merge --out (writer)", outcome, rc, True, lost)
    null = os.stat("/dev/null")
    record("tune merge --out (writer)", "ok", 1, True, not stat.S_ISCHR(null.st_mode))


def sweep_cache_cli(tmp):
    f = os.path.join(tmp, "plainfile")
    open(f, "w").close()
    for args in (["ls", "--dir", f], ["verify", "--dir", f], ["stats", "--dir", f],
                 ["ls", "--dir="], ["verify", "--dir="], ["verify", "--dir", "/dev/null"]):
        outcome, rc = run([TOOL, "cache"] + args)
        record("cache ls/verify/stats --dir", outcome, rc)


def sweep_python():
    cases = {
        "kernel after close": "k.set_config('r1.t128.v8.p1')",
        "launch_raw after close": "k.launch_raw(b'', b'', 0, 0)",
        "prewarm after close": "k.prewarm([(1, 8, 64)])",
    }
    pre = ("import bitfold; rt=bitfold.Runtime(disk_cache=False);"
           "k=rt.kernel('ln_modulate', dtype='bf16');")
    for name, call in cases.items():
        outcome, rc = run([sys.executable, "-c", pre + "rt.close();" + call])
        record("Python misuse", outcome, rc)
    for call in ("k.prewarm([(1,8,64)], device=2**40)", "k.prewarm([(1,8,2**64)])",
                 "bitfold.Runtime(cache_max_bytes=2**70)", "bitfold.Runtime(compile_threads=2**40)",
                 "k.set_config('')", "k.set_pdl('no')", "k.set_pdl(2)",
                 "rt.kernel_from_source('bitfold.row_program p v1 groups 1000')"):
        outcome, rc = run([sys.executable, "-c", pre + call])
        record("Python misuse", outcome, rc)


def main():
    for path in (TOOL, LIB):
        if not os.path.exists(path):
            sys.exit(f"reliability-sweep.py: {path} is missing (build first)")
    tmp = tempfile.mkdtemp(prefix="bitfold-sweep-")
    try:
        sweep_kernel_text(tmp)
        sweep_loaders(tmp)
        sweep_writers(tmp)
        sweep_cache_cli(tmp)
        sweep_python()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("| surface | inputs | crashes | hangs | data loss | silent accepts |")
    print("|---|---|---|---|---|---|")
    total = [0] * 5
    for surface, r in results.items():
        print(f"| {surface} | " + " | ".join(map(str, r)) + " |")
        total = [a + b for a, b in zip(total, r)]
    print("| **all** | " + " | ".join(f"**{v}**" for v in total) + " |")
    return 0 if sum(total[1:]) == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
