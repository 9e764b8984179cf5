#!/usr/bin/env python3
"""libdevice ops and their compositions on the GPU vs PyTorch, bit for bit.

One f32 user kernel per op (exp/log/tanh/erf_libdevice) and per composition
(sigmoid, SiLU, GELU erf and tanh forms, written as dsl/IR.h's helpers
write them), each built with Runtime.kernel_from_source and run on every
one of the 2^32 f32 bit patterns (16 chunks of 2^28), compared by bit
equality with torch's own f32 op (nvcc-built, the same libdevice):
torch.exp, log, tanh, erf, sigmoid, F.silu, F.gelu(approximate="none" /
"tanh"). Then `bitfold run --program FILE` compares the GPU with the CPU
interpreter (sm_90 model) on seeded data, and the GPU outputs of the four
ops on a fixed sample of 16384 bit patterns (x = k * 262147 mod 2^32) are
written to OUT/libdevice-sm90-<op>.bin (little-endian u32), the capture
tests/dsl/LibdeviceOpsTest.cpp compares the interpreter with.

Standalone (no pytest): on a GPU host, after the package is unpacked
(scripts/gpu-run.sh sets PATH and BITFOLD_LIB):
    bash scripts/gpu-run.sh --out DIR 'python3 tests/gpu/test_libdevice_ops.py --out $OUT'
Writes OUT/libdevice-ops.json and OUT/libdevice-ops.md; exit 0 when every
op equals torch on all inputs and every `bitfold run` matched the
interpreter, 1 otherwise.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import bitfold  # noqa: E402

# One program text per op: tests/gpu/libdevice/<op>.bfk (the compositions
# are dsl/IR.h's helpers, LibdeviceOpsTest checks the hashes).
PROGRAMS = os.path.join(ROOT, "tests", "gpu", "libdevice")
OPS = ["exp", "log", "tanh", "erf", "sigmoid", "silu", "gelu_erf", "gelu_tanh"]

TORCH = {
    "exp": torch.exp,
    "log": torch.log,
    "tanh": torch.tanh,
    "erf": torch.erf,
    "sigmoid": torch.sigmoid,
    "silu": F.silu,
    "gelu_erf": lambda x: F.gelu(x, approximate="none"),
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
}

COLS = 4096
CHUNK = 1 << 28
SAMPLE = 16384
SAMPLE_STEP = 262147


def program_file(op):
    return os.path.join(PROGRAMS, op + ".bfk")


def program(op):
    with open(program_file(op)) as f:
        return f.read()


def raw(t):
    return bitfold.RawTensor(t.data_ptr(), "f32", tuple(t.shape), tuple(t.stride()),
                             t.device.index)


def launch(k, x):
    y = torch.empty_like(x)
    y.view(torch.int32).fill_(-1)  # poison: a NaN the kernel must overwrite
    k.launch([raw(x), raw(y)], [], torch.cuda.current_stream().cuda_stream)
    return y


def chunk_inputs(c):
    """Bit patterns c * 2^28 .. (c + 1) * 2^28 - 1 as int32 order from
    INT32_MIN: all chunks together are every f32."""
    start = -(1 << 31) + c * CHUNK
    bits = torch.arange(start, start + CHUNK, dtype=torch.int32, device="cuda")
    return bits.view(torch.float32).view(CHUNK // COLS, COLS)


def sample_inputs():
    k = torch.arange(SAMPLE, dtype=torch.int64, device="cuda")
    b = (k * SAMPLE_STEP) % (1 << 32)
    b = torch.where(b >= (1 << 31), b - (1 << 32), b).to(torch.int32)
    return b.view(torch.float32).view(1, SAMPLE)


def check_all_inputs(rt, op):
    k = rt.kernel_from_source(program(op))
    row = {"op": op, "inputs": 0, "differ": 0, "first": None}
    t0 = time.time()
    for c in range((1 << 32) // CHUNK):
        x = chunk_inputs(c)
        ours = launch(k, x)
        ref = TORCH[op](x)
        diff = ours.view(torch.int32) != ref.view(torch.int32)
        n = int(diff.sum())
        row["inputs"] += x.numel()
        row["differ"] += n
        if n and row["first"] is None:
            i = int(diff.flatten().nonzero()[0])
            xb = int(x.flatten().view(torch.int32)[i]) & 0xFFFFFFFF
            row["first"] = {"x_bits": f"{xb:08x}",
                            "x": float(x.flatten()[i]),
                            "bitfold_bits": f"{int(ours.flatten().view(torch.int32)[i]) & 0xFFFFFFFF:08x}",
                            "torch_bits": f"{int(ref.flatten().view(torch.int32)[i]) & 0xFFFFFFFF:08x}"}
        del x, ours, ref, diff
    torch.cuda.synchronize()
    row["seconds"] = round(time.time() - t0, 2)
    row["equal"] = row["differ"] == 0
    return k, row


def write_sample(k, op, out):
    y = launch(k, sample_inputs())
    torch.cuda.synchronize()
    path = os.path.join(out, f"libdevice-sm90-{op}.bin")
    y.view(torch.int32).flatten().cpu().numpy().astype("<u4").tofile(path)
    return path


def run_cli(bitfold_bin, op):
    cmd = [bitfold_bin, "run", "--program", program_file(op), "--shape", "256,4096", "--iters", "0"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    return {"op": op, "command": " ".join(cmd), "exit": p.returncode,
            "bit_exact_vs_interpreter": p.returncode == 0,
            "tail": (p.stdout + p.stderr).strip().splitlines()[-4:]}


def markdown(rows, cli_rows, device):
    out = [f"# libdevice ops on {device}", "",
           "Each op as a one-op f32 user kernel (kernel_from_source) on all 2^32 "
           "f32 bit patterns vs torch's f32 op, bit for bit.", "",
           "| op | torch reference | inputs | differ | first difference | seconds |",
           "|---|---|---|---|---|---|"]
    names = {"exp": "torch.exp", "log": "torch.log", "tanh": "torch.tanh",
             "erf": "torch.erf", "sigmoid": "torch.sigmoid", "silu": "F.silu",
             "gelu_erf": "F.gelu(approximate='none')",
             "gelu_tanh": "F.gelu(approximate='tanh')"}
    for r in rows:
        if "error" in r:
            out.append(f"| {r['op']} | {names[r['op']]} | ERROR: {r['error']} ||||")
            continue
        first = json.dumps(r["first"]) if r["first"] else ""
        out.append(f"| {r['op']} | {names[r['op']]} | {r['inputs']} | {r['differ']} | "
                   f"{first} | {r['seconds']} |")
    out += ["", "`bitfold run --program` (GPU vs the CPU interpreter, sm_90 model, "
            "seeded normal data, 256 x 4096):", "",
            "| op | exit | bit-exact vs interpreter |", "|---|---|---|"]
    for c in cli_rows:
        out.append(f"| {c['op']} | {c['exit']} | {c['bit_exact_vs_interpreter']} |")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    ap.add_argument("--bitfold", default=shutil.which("bitfold") or
                    os.path.join(ROOT, "build", "tools", "bitfold"))
    ap.add_argument("--ops", default=",".join(OPS))
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device visible to torch: nothing to do")
        return 77
    device = torch.cuda.get_device_name()
    os.makedirs(args.out, exist_ok=True)
    rt = bitfold.Runtime()
    print("bitfold", bitfold.version(), "torch", torch.__version__, "on", device, flush=True)
    rows, cli_rows = [], []
    for op in args.ops.split(","):
        try:
            k, r = check_all_inputs(rt, op)
            if op in ("exp", "log", "tanh", "erf"):
                r["sample"] = write_sample(k, op, args.out)
        except Exception as e:  # report and go on: it runs once, unattended
            r = {"op": op, "error": f"{type(e).__name__}: {e}", "equal": False}
        print(json.dumps(r), flush=True)
        rows.append(r)
    if args.bitfold and os.path.exists(args.bitfold):
        for op in args.ops.split(","):
            c = run_cli(args.bitfold, op)
            print(json.dumps(c), flush=True)
            cli_rows.append(c)
    else:
        print(f"bitfold CLI not found ({args.bitfold!r}): `bitfold run --program` skipped")
    result = {"device": device, "bitfold": bitfold.version(), "torch": torch.__version__,
              "torch_cuda": torch.version.cuda, "ops": rows, "cli": cli_rows}
    with open(os.path.join(args.out, "libdevice-ops.json"), "w") as f:
        json.dump(result, f, indent=1)
    md = markdown(rows, cli_rows, device)
    with open(os.path.join(args.out, "libdevice-ops.md"), "w") as f:
        f.write(md)
    print(md)
    ok = all(r.get("equal") for r in rows) and all(c["bit_exact_vs_interpreter"]
                                                   for c in cli_rows)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
