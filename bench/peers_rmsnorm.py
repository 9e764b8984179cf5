"""hf_rmsnorm beside the peers' RMSNorm kernels that this host can import:
quack's (Tri Dao's CuTe-DSL kernels, `quack.rmsnorm`) and Liger-Kernel's
(`liger_kernel.ops.rms_norm`), at the shapes where quack was measured ahead of hf_rmsnorm, bf16, weight
bf16, eps 1e-6, L2 flushed (do_bench) and in a steady stream (graph replay
over rotating buffers; bench_kernels.py's method), beside a same-size copy
(a memcpy, and in the steady stream also a copy kernel on the SMs).

    python3 bench/peers_rmsnorm.py [--out DIR] [--config CFG]
        (on a GPU host with torch and triton; a peer that does not import
        is listed as absent, not an error; --config runs hf_rmsnorm at that
        tile config, e.g. r1.t32.v4.p1.s1, instead of the default, and
        names the files peers_rmsnorm-CFG.*)

Exactness: bitfold is compared with HF LlamaRMSNorm's eager chain
(torch.equal, its contract). The peers compute another formula (the weight
multiplies in f32 before one rounding, and their own reduction order), so
for them the table gives how many elements differ from that chain and the
largest difference, not a pass/fail. Writes DIR/peers_rmsnorm.md and .json.
"""
import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(__file__))
import bench_kernels as bk  # noqa: E402

SHAPES = [(1, 4096, 4096), (8, 1024, 5120), (4, 4096, 3072), (1, 32768, 2048)]
EPS = 1e-6


def peers():
    """name -> f(x, w) -> y for every peer that imports here."""
    out = {}
    try:
        from quack.rmsnorm import rmsnorm as quack_rmsnorm
        out["quack"] = lambda x, w: quack_rmsnorm(x, w, eps=EPS)
    except Exception as e:  # noqa: BLE001 - any import failure means absent
        print(f"quack: absent ({type(e).__name__}: {e})")
    try:
        from liger_kernel.ops.rms_norm import LigerRMSNormFunction
        out["liger"] = lambda x, w: LigerRMSNormFunction.apply(x, w, EPS)
    except Exception as e:  # noqa: BLE001
        print(f"liger: absent ({type(e).__name__}: {e})")
    return out


def hf_eager(x, w):
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + EPS)
    return w * h.to(x.dtype)


CONFIG = None  # --config: hf_rmsnorm's tile config (None: the default)


def case(rt, shape):
    x, w = bk.rnd(shape), bk.rnd(shape[-1:])
    y = torch.empty_like(x)
    k = rt.kernel("hf_rmsnorm")
    k.set_config(CONFIG)
    return x, w, y, lambda: k.launch([x, w, y], [EPS])


def timings(make, nbytes):
    """Flushed median and steady median (us) of the launch make() builds."""
    first = make()
    flushed = bk.measure(first)[0] * 1e3
    fns = [first] + [make() for _ in range(bk.steady_sets(nbytes) - 1)]
    return flushed, bk.steady_us(fns)[0]


def row(rt, shape, peer_fns):
    nbytes = 2 * 2 * shape[0] * shape[1] * shape[2] + 2 * shape[2]
    x, w, y, launch = case(rt, shape)
    launch()
    ref = hf_eager(x, w)
    r = {"shape": shape, "bytes": nbytes, "bitfold_equal": bool(torch.equal(y, ref))}

    def make_bitfold():
        return case(rt, shape)[3]
    r["bitfold_us"], r["bitfold_steady_us"] = timings(make_bitfold, nbytes)
    for name, f in peer_fns.items():
        got = f(x, w)
        diff = (got.float() - ref.float()).abs()
        r[f"{name}_differ"] = int((got != ref).sum())
        r[f"{name}_max_diff"] = float(diff.max())

        def make_peer(f=f):
            xs, ws = bk.rnd(shape), bk.rnd(shape[-1:])
            return lambda: f(xs, ws)
        r[f"{name}_us"], r[f"{name}_steady_us"] = timings(make_peer, nbytes)
    copy = bk.copy_fn(nbytes)
    r["copy_us"] = bk.measure(copy)[0] * 1e3
    r["copy_steady_us"] = bk.steady_us(
        [bk.copy_fn(nbytes) for _ in range(bk.steady_sets(nbytes))])[0]
    r["sm_copy_steady_us"] = bk.steady_us(
        [bk.sm_copy_fn(nbytes) for _ in range(bk.steady_sets(nbytes))])[0]
    return r


def report(rows, names, gpu):
    head = ["shape", "copy us (steady)", "SM copy steady us", "bitfold hf_rmsnorm us (steady)", "bitfold == HF eager"]
    for n in names:
        head += [f"{n} us (steady)", f"{n} elements != HF eager (max diff)"]
    lines = [f"GPU {gpu}, torch {torch.__version__}; bf16, eps {EPS}", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [str(tuple(r["shape"])), f"{r['copy_us']:.1f} ({r['copy_steady_us']:.1f})",
                 f"{r['sm_copy_steady_us']:.1f}",
                 f"{r['bitfold_us']:.1f} ({r['bitfold_steady_us']:.1f})",
                 "yes" if r["bitfold_equal"] else "NO"]
        for n in names:
            cells += [f"{r[n + '_us']:.1f} ({r[n + '_steady_us']:.1f})",
                      f"{r[n + '_differ']} ({r[n + '_max_diff']:.3g})"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--config", default=None,
                    help="hf_rmsnorm's tile config (default: the heuristic's)")
    args = ap.parse_args()
    global CONFIG
    CONFIG = args.config
    name = "peers_rmsnorm" + (f"-{args.config}" if args.config else "")
    os.makedirs(args.out, exist_ok=True)
    torch.manual_seed(0)
    import bitfold.torch
    rt = bitfold.torch.Runtime()
    peer_fns = peers()
    rows = []
    for shape in SHAPES:
        rows.append(row(rt, shape, peer_fns))
        print(json.dumps(rows[-1]), flush=True)
    gpu = torch.cuda.get_device_name(0)
    with open(os.path.join(args.out, name + ".json"), "w") as f:
        json.dump({"gpu": gpu, "torch": torch.__version__, "config": args.config,
                   "rows": rows}, f, indent=1)
    text = report(rows, list(peer_fns), gpu)
    if args.config:
        text = f"hf_rmsnorm at config {args.config}\n\n" + text
    with open(os.path.join(args.out, name + ".md"), "w") as f:
        f.write(text)
    print(text)
    return 0 if all(r["bitfold_equal"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
