"""Host time per call of bitfold.torch ops at a warm shape, beside the
custom-op path, eager PyTorch and the pieces a direct call is made of; and
what the copy of strided (fused-QKV) q/k views costs qk_layernorm.

    python3 bench/host_cost.py [--out DIR]     (GPU host; writes DIR/host_cost.md/.json)
    python3 bench/host_cost.py --fake-lib L --fake-cuda C [--out DIR]
        (CPU: host tensors launched over the fake driver (tests/runtime/
        FakeCuda.cpp) through libbitfold-fakecodegen.so: the Python side and
        bitfold's own C share, without cuLaunchKernel or a CUDA allocator)

The refused row is a layout the kernel refuses (columns 2 apart): its
direct call should cost eager plus about 2 us (the refusal is remembered
per layout after the first call), never the checked path again.

Method: shapes small enough that the GPU keeps up with the host (each
kernel takes a few microseconds), so the wall time of N back-to-back calls
divided by N is host time; min of 7 repetitions of N = 2000 calls after 200
warm calls, the main table's repetitions interleaved across its cells;
torch.cuda.synchronize() before and after each repetition. On
the fake driver the clock is this thread's CPU time (the CPU machine is
shared). The copy table times the GPU with CUDA events (mean of 50 calls).
"""
import argparse
import json
import os
import sys
import time
import warnings

os.environ.setdefault("BITFOLD_ASYNC_COMPILE", "0")  # time kernels, not eager while compiling
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "gpu"))

N, REPS = 2000, 7
BF = torch.bfloat16
ARGS = None


def setup():
    """bitfold.torch, bitfold and the eager references, for the GPU or the
    fake driver."""
    if ARGS.fake_lib:
        os.environ["BITFOLD_LIBCUDA"] = ARGS.fake_cuda
        import bitfold
        bitfold._default = bitfold.Runtime(lib_path=ARGS.fake_lib, disk_cache=False)
        import bitfold.torch as bt
        bt._ops._ALLOW_HOST = True
        return bt, bitfold, bt._eager
    import bitfold.torch as bt
    import bitfold
    import references
    return bt, bitfold, references


def sync():
    if not ARGS.fake_lib:
        torch.cuda.synchronize()


def one_rep_us(fn):
    """Host time per call of fn over one repetition of N calls."""
    clock = time.thread_time if ARGS.fake_lib else time.perf_counter
    sync()
    t0 = clock()
    for _ in range(ARGS.calls):
        fn()
    sync()
    return (clock() - t0) / ARGS.calls * 1e6


def warm(fn, calls=200):
    for _ in range(calls):
        fn()


def per_call_us(fn):
    warm(fn)
    return min(one_rep_us(fn) for _ in range(REPS))


def tensors():
    dev = "cpu" if ARGS.fake_lib else "cuda"
    g = torch.Generator(device=dev).manual_seed(0)

    def r(*shape, fmt=None):
        t = torch.randn(*shape, generator=g, device=dev).to(BF)
        return t.contiguous(memory_format=fmt) if fmt else t
    t = {"x": r(1, 16, 1024), "proj": r(1, 4096), "q": r(1, 16, 8, 128), "k": r(1, 16, 8, 128),
         "c": r(1, 96, 1, 8, 8, fmt=torch.channels_last_3d), "bias": r(96),
         "xw": r(1, 16, 2048), "w": r(2048), "scw": r(1, 2048), "shw": r(1, 2048),
         "qkv": r(1, 16, 3 * 8 * 128), "w4": r(1024)}
    t["sc"], t["sh"] = t["proj"][:, :1024], t["proj"][:, 1024:2048]
    t["gate"] = t["proj"][:, 2048:3072].unsqueeze(1)
    t["qv"] = t["qkv"][..., :1024].unflatten(-1, (8, 128))
    t["kv"] = t["qkv"][..., 1024:2048].unflatten(-1, (8, 128))
    t["c16"] = r(1, 96, 1, 4, 4, fmt=torch.channels_last_3d)
    t["x_refused"] = r(1, 16, 2048)[..., ::2]  # columns 2 apart: the kernel refuses it
    t["y"] = torch.empty_like(t["x"])
    return t


def has_template(bitfold, name, params):
    try:
        bitfold.default_runtime().kernel(name, params)
        return True
    except bitfold.BitfoldError:
        return False


def cases(bt, bitfold, ref, t):
    """(name, direct, custom op or None, eager) per row."""
    x, sc, sh, q, k = t["x"], t["sc"], t["sh"], t["q"], t["k"]
    ops = torch.ops.bitfold
    rows = [
        ("ln_modulate (1,16,1024)", lambda: bt.ln_modulate(x, sc, sh, 1e-6),
         lambda: ops.ln_modulate(x, sc, sh, 1e-6), lambda: ref.ln_modulate(x, sc, sh, 1e-6)),
        ("ln_modulate (1,16,1024), out= preallocated",
         lambda: bt.ln_modulate(x, sc, sh, 1e-6, out=t["y"]), None, None),
        ("ln_modulate (1,16,1024) under torch.inference_mode()", "inference", None, None),
        ("ln_modulate (1,16,1024) at a refused layout (remembered: eager + the site lookup)",
         lambda: bt.ln_modulate(t["x_refused"], sc, sh, 1e-6),
         lambda: ops.ln_modulate(t["x_refused"], sc, sh, 1e-6),
         lambda: ref.ln_modulate(t["x_refused"], sc, sh, 1e-6)),
        ("qk_layernorm (1,16,8,128) x2", lambda: bt.qk_layernorm(q, k, 1e-6),
         lambda: ops.qk_layernorm(q, k, 1e-6), lambda: ref.qk_layernorm(q, k, 1e-6)),
        ("qk_layernorm fused-QKV views (copied)", lambda: bt.qk_layernorm(t["qv"], t["kv"], 1e-6),
         lambda: ops.qk_layernorm(t["qv"], t["kv"], 1e-6),
         lambda: ref.qk_layernorm(t["qv"], t["kv"], 1e-6)),
        ("conv_bias (1,96,1,8,8)", lambda: bt.conv_bias(t["c"], t["bias"]),
         lambda: ops.conv_bias(t["c"], t["bias"]), lambda: ref.conv_bias(t["c"], t["bias"])),
        ("residual_gate (1,16,1024) per batch", lambda: bt.residual_gate(x, x, t["gate"]),
         lambda: ops.residual_gate(x, x, t["gate"]), lambda: ref.residual_gate(x, x, t["gate"])),
        ("rmsnorm_modulate (1,16,2048)",
         lambda: bt.rmsnorm_modulate(t["xw"], t["w"], t["scw"], t["shw"], 1e-6),
         lambda: ops.rmsnorm_modulate(t["xw"], t["w"], t["scw"], t["shw"], 1e-6),
         lambda: bt._eager.rmsnorm_modulate(t["xw"], t["w"], t["scw"], t["shw"], 1e-6)),
    ]
    user = user_op(bt)
    ug, uu = t["proj"][:, :1024], t["proj"][:, 1024:2048]
    rows.append(("user op silu_and_mul (1,1024) (op_from_source, docs/torch-tutorial.md)",
                 lambda: user(ug, uu), lambda: torch.ops.host_cost.silu_and_mul(ug, uu),
                 lambda: torch.nn.functional.silu(ug) * uu))
    if has_template(bitfold, "hf_rmsnorm", "dtype=bf16,weight=bf16,residual=0,modulate=0"):
        rows.append(("hf_rmsnorm (1,16,1024)", lambda: bt.hf_rmsnorm(x, t["w4"], 1e-6),
                     lambda: ops.hf_rmsnorm(x, t["w4"], 1e-6),
                     lambda: bt._eager.hf_rmsnorm(x, t["w4"], 1e-6)))
    if has_template(bitfold, "wan_rmsnorm_silu",
                    "dtype=bf16,form=f32,gamma=bf16,bias=0,conv_bias=0"):
        c, g = t["c16"], t["bias"]
        rows.append(("wan_rmsnorm_silu (1,96,1,4,4) form f32",
                     lambda: bt.wan_rmsnorm_silu(c, g, None, None, "f32"),
                     lambda: ops.wan_rmsnorm_silu(c, g, None, None, "f32"),
                     lambda: bt._eager.wan_rmsnorm_silu(c, g, None, None, "f32")))
    return rows


def user_op(bt):
    """The tutorial's silu_and_mul, a user op: its host path is the stock ops'."""
    from bitfold import dsl
    p = dsl.Program("silu_and_mul")
    gate, up = p.input("gate", "bf16"), p.input("up", "bf16")
    g = dsl.extend(gate.load())
    silu = dsl.round(g / (1.0 + dsl.exp_libdevice(-g)), "bf16")
    p.output("y", "bf16", dsl.round(silu * up.load(), "bf16"))
    return bt.op_from_source(p, "host_cost::silu_and_mul")


def warm_up(fn, seconds=1.0):
    """Calls fn for a while first: the GPU starts a process at its idle
    clock, and the first row timed was 2-3 us slower than the same call
    timed later (bench/results/2026-12-03-s12-gpu-session.md, call 5)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        fn()
    sync()


def measure_rows(bt, rows, t):
    """The table's cells, their repetitions interleaved (each cell's first,
    then each cell's second, ...; min of REPS): a drift of the host's speed
    during the run (sessions 22 and 28 saw rows move by 1-3 us) then reaches
    every row alike instead of the rows timed first."""
    warm_up(rows[0][1])
    x, sc, sh = t["x"], t["sc"], t["sh"]

    def inference_rep():
        with torch.inference_mode():
            return one_rep_us(lambda: bt.ln_modulate(x, sc, sh))
    cells = []  # (row, column, one repetition's time)
    for i, (name, direct, op, eager) in enumerate(rows):
        if direct == "inference":
            with torch.inference_mode():
                warm(lambda: bt.ln_modulate(x, sc, sh))
            cells.append((i, "direct_us", inference_rep))
            continue
        for col, fn in (("direct_us", direct), ("custom_op_us", op),
                        ("eager_us", None if ARGS.no_eager else eager)):
            if fn is not None:
                warm(fn)
                cells.append((i, col, lambda fn=fn: one_rep_us(fn)))
    out = [{"case": name} for name, *_ in rows]
    for _ in range(REPS):
        for i, col, rep in cells:
            out[i][col] = min(out[i].get(col, float("inf")), rep())
    return out


def pieces(bt, bitfold, t):
    """What one warm direct ln_modulate call is made of."""
    from bitfold.torch import _ops, _table
    sites = _table.LN_MODULATE.sites
    x, sc, sh, y = t["x"], t["sc"], t["sh"], t["y"]
    bt.ln_modulate(x, sc, sh, 1e-6)
    key = _ops._key((x, sc, sh), 1e-6)
    ent = sites.get(key)
    out = {
        "layout key (_key: dtype, shape, strides, device of 3 tensors)": per_call_us(
            lambda: _ops._key((x, sc, sh), 1e-6)),
        "site lookup (dict get)": per_call_us(lambda: sites.get(key)),
        "torch.empty_like": per_call_us(lambda: torch.empty_like(x)),
        "checked-path guards (_ready; not on the warm path)": per_call_us(
            lambda: _ops._ready((x, sc, sh))),
    }
    if ent is None:
        out["prepared launcher"] = "n/a: no site (library without bitfold_prepare_raw?)"
        return out
    launch = ent[0]
    prep = launch.prepared
    lib = bitfold.default_runtime().lib
    data = _ops._packers[4]((x, sc, sh, y))
    fn = lib["bitfold_launch_prepared"]
    out["prepared launcher (grad check, stream, addresses, C launch)"] = per_call_us(
        lambda: launch((x, sc, sh, y)))
    out["addresses packed (4 data_ptr + struct.pack)"] = per_call_us(
        lambda: _ops._packers[4]((x, sc, sh, y)))
    out["bitfold_launch_prepared alone (3 untyped ctypes args + C + driver)"] = per_call_us(
        lambda: fn(prep.handle, data, None))
    k = bitfold.default_runtime().kernel("ln_modulate", "dtype=bf16")
    meta, nmeta = _ops._meta_words((x, sc, sh, y), max(x.get_device(), 0))
    eps = _ops._f32.pack(1e-6)
    raw, h = k._raw_untyped, k.handle
    out["bitfold_launch_raw alone (8 untyped ctypes args + C + driver)"] = per_call_us(
        lambda: raw(h, 4, data, meta, nmeta, eps, 1, None))
    if not ARGS.fake_lib:
        out["current raw stream"] = per_call_us(lambda: _ops._raw_stream(0))
        out["capture check (the checked path only)"] = per_call_us(lambda: _ops._capturing())
    return out


def interleaved_us(fns, rounds=15):
    """Per-call host time of each of fns, timed in turns (each round runs
    every fn ARGS.calls times), min over rounds: a drift of the host over
    the run falls on all alike, so their differences are meaningful."""
    for fn in fns.values():
        warm(fn)
    best = {k: float("inf") for k in fns}
    for _ in range(rounds):
        for k, fn in fns.items():
            best[k] = min(best[k], one_rep_us(fn))
    return best


def refusal_pieces(bt, t, ref):
    """What a remembered refusal adds to its eager chain, timed in turns
    with that chain (interleaved_us): the refused call, the chain it falls
    back to (_eager's), the references' chain (the eager column), and the
    floor of any site lookup (the layout key, a dict get, the chain)."""
    from bitfold.torch import _ops, _table
    op = _table.LN_MODULATE
    xr, sc, sh = t["x_refused"], t["sc"], t["sh"]
    bt.ln_modulate(xr, sc, sh, 1e-6)
    key = _ops._key((xr, sc, sh), 1e-6)
    ent = op.sites.get(key)
    if ent is None or ent[0] is not None:
        return {"refused call": "n/a: the refused layout was not remembered"}
    sites, chain = op.sites, bt._eager.ln_modulate

    def floor():
        sites.get(_ops._key((xr, sc, sh), 1e-6))
        return chain(xr, sc, sh, 1e-6)
    times = interleaved_us({
        "refused call: the direct call": lambda: bt.ln_modulate(xr, sc, sh, 1e-6),
        "refused call: the fallback's chain alone (_eager.ln_modulate)":
            lambda: chain(xr, sc, sh, 1e-6),
        "refused call: the references' chain (the eager column)":
            lambda: ref.ln_modulate(xr, sc, sh, 1e-6),
        "refused call: the floor (layout key + dict get + the chain)": floor,
        "refused call: layout key": lambda: _ops._key((xr, sc, sh), 1e-6),
    })
    times["refused call: over its own chain"] = (
        times["refused call: the direct call"]
        - times["refused call: the fallback's chain alone (_eager.ln_modulate)"])
    times.update(null_chain_overhead(bt, xr, sc, sh))
    return times


def null_chain_overhead(bt, xr, sc, sh):
    """The refused call's own host time without the chain's: the chain
    replaced by one returning x (the ops call _eager's chain of the moment),
    so the ~50 us chain's run-to-run noise does not hide it."""
    saved = bt._eager.ln_modulate
    bt._eager.ln_modulate = lambda *a: a[0]
    try:
        t = interleaved_us({
            "direct": lambda: bt.ln_modulate(xr, sc, sh, 1e-6),
            "torch.ops": lambda: torch.ops.bitfold.ln_modulate(xr, sc, sh, 1e-6),
            "chain": lambda: bt._eager.ln_modulate(xr, sc, sh, 1e-6)})
    finally:
        bt._eager.ln_modulate = saved
    return {"refused call over a null chain: direct": t["direct"] - t["chain"],
            "refused call over a null chain: torch.ops": t["torch.ops"] - t["chain"]}


def gpu_us(fn, n=50):
    for _ in range(5):
        fn()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    a.record()
    for _ in range(n):
        fn()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) / n * 1e3


def copy_cost(bt):
    """qk_layernorm on a fused QKV projection's q/k views (read in place:
    two-level rows) against the same views copied to contiguous first (what
    the op did before, and still does for views of more than two row
    strides) and against contiguous q/k, GPU time per call."""
    rows = []
    for b, s, h, d in [(1, 4096, 32, 128), (1, 1024, 32, 128), (2, 256, 24, 64)]:
        g = torch.Generator(device="cuda").manual_seed(1)
        qkv = torch.randn(b, s, 3 * h * d, generator=g, device="cuda").to(BF)
        qv = qkv[..., :h * d].unflatten(-1, (h, d))
        kv = qkv[..., h * d:2 * h * d].unflatten(-1, (h, d))
        qc, kc = qv.contiguous(), kv.contiguous()
        views = gpu_us(lambda: bt.qk_layernorm(qv, kv, 1e-6))
        copied = gpu_us(lambda: bt.qk_layernorm(qv.contiguous(), kv.contiguous(), 1e-6))
        contig = gpu_us(lambda: bt.qk_layernorm(qc, kc, 1e-6))
        copies = gpu_us(lambda: (qv.contiguous(), kv.contiguous()))
        eager = gpu_us(lambda: (torch.nn.functional.layer_norm(qv, (d,), eps=1e-6),
                                torch.nn.functional.layer_norm(kv, (d,), eps=1e-6)))
        rows.append({"shape": (b, s, h, d), "views_us": views, "copied_us": copied,
                     "contiguous_us": contig,
                     "copies_us": copies, "eager_views_us": eager})
    return rows


def fmt(v):
    return f"{v:.2f} us" if isinstance(v, float) else (v or "")


def report(info):
    where = "fake driver, CPU" if ARGS.fake_lib else info["gpu"]
    lines = [f"# Host time per call ({where}, torch {info['torch']}, python {info['python']})",
             "", f"Warm call in C: {info['c_warm_call']}; its fresh outputs: "
             f"{info.get('c_outputs', 'torch factories')}.",
             "", "| op, shape | direct | torch.ops.bitfold | eager |", "|---|---|---|---|"]
    lines += [f"| {r['case']} | {fmt(r['direct_us'])} | {fmt(r.get('custom_op_us'))} | "
              f"{fmt(r.get('eager_us'))} |" for r in info["rows"]]
    lines += ["", "| piece of a warm direct ln_modulate call | host time |", "|---|---|"]
    lines += [f"| {k} | {fmt(v)} |" for k, v in info["pieces_us"].items()]
    if info.get("copy"):
        lines += ["", "qk_layernorm on fused-QKV views: GPU time per call (CUDA events)", "",
                  "| (B, S, H, D) | views in place (one launch) | views copied first, "
                  "then one launch | contiguous q, k | "
                  "the two copies alone | eager F.layer_norm x2 on the views |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {r['shape']} | {fmt(r['views_us'])} | {fmt(r.get('copied_us'))} | "
                  f"{fmt(r['contiguous_us'])} | "
                  f"{fmt(r['copies_us'])} | {fmt(r['eager_views_us'])} |" for r in info["copy"]]
    return "\n".join(lines) + "\n"


def main():
    global ARGS
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    ap.add_argument("--fake-lib", help="libbitfold-fakecodegen.so (CPU run)")
    ap.add_argument("--fake-cuda", help="libbitfold_fake_cuda.so (CPU run)")
    ap.add_argument("--calls", type=int, default=N, help="calls per repetition")
    ap.add_argument("--no-eager", action="store_true", help="skip the eager column")
    ap.add_argument("--refusal-only", action="store_true",
                    help="print only a remembered refusal's pieces")
    ARGS = ap.parse_args()
    bt, bitfold, ref = setup()
    warnings.simplefilter("ignore")  # the refused row's fallback warning
    t = tensors()
    if ARGS.refusal_only:
        pieces_us = refusal_pieces(bt, t, ref)
        print("\n".join(f"| {k} | {fmt(v)} |" for k, v in pieces_us.items()))
        return
    rows = measure_rows(bt, cases(bt, bitfold, ref, t), t)
    info = {"torch": torch.__version__, "python": sys.version.split()[0],
            "gpu": None if ARGS.fake_lib else torch.cuda.get_device_name(0),
            "bitfold_lib": bitfold.default_runtime().lib.bitfold_path,
            "c_warm_call": bt._fast.why_not or "on",  # BITFOLD_FAST (python/README.md)
            "c_outputs": bt._fast.empty_via,  # BITFOLD_FAST_EMPTY (python/README.md)
            "method": __doc__.strip(), "rows": rows,
            "pieces_us": {**pieces(bt, bitfold, t), **refusal_pieces(bt, t, ref)},
            "copy": None if ARGS.fake_lib else copy_cost(bt), "stats": bt.stats()}
    os.makedirs(ARGS.out, exist_ok=True)
    with open(os.path.join(ARGS.out, "host_cost.json"), "w") as f:
        json.dump(info, f, indent=1, default=str)
    text = report(info)
    with open(os.path.join(ARGS.out, "host_cost.md"), "w") as f:
        f.write(text)
    print(text)


if __name__ == "__main__":
    main()
