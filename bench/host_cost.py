"""Host time per call of bitfold.torch ops at a warm shape, beside the
custom-op path, eager PyTorch and the pieces a call is made of.

    python3 bench/host_cost.py [--out DIR]     (GPU machine; writes DIR/host_cost.md/.json)

Method: shapes small enough that the GPU keeps up with the host (each
kernel takes a few microseconds), so the wall time of N back-to-back calls
divided by N is host time; min of 7 repetitions of N = 2000 calls after 200
warm calls; torch.cuda.synchronize() before and after each repetition.
"""
import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "gpu"))
from _bitfold_import import import_bitfold_torch  # noqa: E402

bt = import_bitfold_torch()
import bitfold  # noqa: E402
import references as ref  # noqa: E402

BF = torch.bfloat16
N, REPS = 2000, 7


def per_call_us(fn):
    for _ in range(200):
        fn()
    best = float("inf")
    for _ in range(REPS):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(N):
            fn()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - t0) / N * 1e6)
    return best


def cases():
    g = torch.Generator(device="cuda").manual_seed(0)

    def r(*shape, fmt=None):
        t = torch.randn(*shape, generator=g, device="cuda").to(BF)
        return t.contiguous(memory_format=fmt) if fmt else t
    x, proj = r(1, 16, 1024), r(1, 4096)
    sc, sh = proj[:, :1024], proj[:, 1024:2048]
    q, k = r(1, 16, 8, 128), r(1, 16, 8, 128)
    c, bias = r(1, 96, 1, 8, 8, fmt=torch.channels_last_3d), r(96)
    gate = proj[:, 2048:3072].unsqueeze(1)
    xw, w = r(1, 16, 2048), r(2048)
    scw, shw = r(1, 2048), r(1, 2048)
    return [
        ("ln_modulate (1,16,1024)", lambda: bt.ln_modulate(x, sc, sh, 1e-6),
         lambda: torch.ops.bitfold.ln_modulate(x, sc, sh, 1e-6),
         lambda: ref.ln_modulate(x, sc, sh, 1e-6)),
        ("qk_layernorm (1,16,8,128) x2", lambda: bt.qk_layernorm(q, k, 1e-6),
         lambda: torch.ops.bitfold.qk_layernorm(q, k, 1e-6),
         lambda: ref.qk_layernorm(q, k, 1e-6)),
        ("conv_bias (1,96,1,8,8)", lambda: bt.conv_bias(c, bias),
         lambda: torch.ops.bitfold.conv_bias(c, bias), lambda: ref.conv_bias(c, bias)),
        ("residual_gate (1,16,1024) per batch", lambda: bt.residual_gate(x, x, gate),
         lambda: torch.ops.bitfold.residual_gate(x, x, gate),
         lambda: ref.residual_gate(x, x, gate)),
        ("rmsnorm_modulate (1,16,2048)", lambda: bt.rmsnorm_modulate(xw, w, scw, shw, 1e-6),
         lambda: torch.ops.bitfold.rmsnorm_modulate(xw, w, scw, shw, 1e-6),
         lambda: bt._eager.rmsnorm_modulate(xw, w, scw, shw, 1e-6)),
    ], (x, sc, sh)


def pieces(x, sc, sh):
    """What one direct ln_modulate call is made of."""
    from bitfold.torch import _ops
    k = bitfold.default_runtime().kernel("ln_modulate", "dtype=bf16")
    y = torch.empty_like(x)
    ins, ts = (x, sc, sh), (x, sc, sh, y)
    eps = _ops._f32.pack(1e-6)
    _ops._launch(k, ins, ts, eps, 0)
    key = (k.address, 0, _ops._layout(ins))
    meta = _ops._meta[key]
    data = _ops._ptr_structs[4].pack(*[t.data_ptr() for t in ts])
    stream = torch.cuda.current_stream().cuda_stream
    out = {
        "guards (_ready)": per_call_us(lambda: _ops._ready("ln_modulate", ins, None)),
        "torch.empty_like": per_call_us(lambda: torch.empty_like(x)),
        "_launch (layout key, metadata lookup, addresses, stream, ctypes, C)": per_call_us(
            lambda: _ops._launch(k, ins, ts, eps, 0)),
        "kernel.launch_raw, packed arguments (ctypes + C launch)": per_call_us(
            lambda: k.launch_raw(data, meta[0], meta[1], 4, eps, stream)),
        "current raw stream": per_call_us(lambda: _ops._raw_stream(0)),
    }
    try:  # the previous Python binding, for comparison
        sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
        import bitfold_torch
        old = bitfold_torch.Runtime(lib_path=bitfold.default_runtime().lib.bitfold_path)
        ko = old.kernel("ln_modulate")
        out["python/bitfold_torch.py Kernel.launch (preallocated y)"] = per_call_us(
            lambda: ko.launch([x, sc, sh, y], [1e-6]))
    except Exception as e:  # reported, not fatal
        out["python/bitfold_torch.py Kernel.launch"] = f"n/a: {e}"
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    a = ap.parse_args()
    rows = []
    table, ln_args = cases()
    x, sc, sh = ln_args
    buf = torch.empty_like(x)
    table.insert(1, ("ln_modulate (1,16,1024), out= preallocated",
                     lambda: bt.ln_modulate(x, sc, sh, 1e-6, out=buf),
                     lambda: torch.ops.bitfold.ln_modulate(x, sc, sh, 1e-6),
                     lambda: ref.ln_modulate(x, sc, sh, 1e-6)))
    for name, direct, op, eager in table:
        rows.append({"case": name, "direct_us": per_call_us(direct),
                     "custom_op_us": per_call_us(op), "eager_us": per_call_us(eager)})
    parts = pieces(*ln_args)
    info = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0),
            "python": sys.version.split()[0],
            "bitfold_lib": bitfold.default_runtime().lib.bitfold_path,
            "method": __doc__.strip(), "rows": rows, "pieces_us": parts, "stats": bt.stats()}
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "host_cost.json"), "w") as f:
        json.dump(info, f, indent=1, default=str)
    lines = [f"# Host time per call ({info['gpu']}, torch {info['torch']}, "
             f"python {info['python']})", "", "| op, shape | direct | torch.ops.bitfold | eager |",
             "|---|---|---|---|"]
    lines += [f"| {r['case']} | {r['direct_us']:.1f} us | {r['custom_op_us']:.1f} us | "
              f"{r['eager_us']:.1f} us |" for r in rows]
    lines += ["", "| piece of a direct ln_modulate call | host time |", "|---|---|"]
    lines += [f"| {k} | {v:.2f} us |" if isinstance(v, float) else f"| {k} | {v} |"
              for k, v in parts.items()]
    text = "\n".join(lines) + "\n"
    with open(os.path.join(a.out, "host_cost.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
