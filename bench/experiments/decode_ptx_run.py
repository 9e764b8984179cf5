"""Load bitfold's hf_rmsnorm PTX through the driver, launch it on torch
tensors, compare with the eager chain bit for bit, time graph replays.

Needs only torch on the GPU host (no bitfold build there). Make the PTX
where bitfold is built, one file per shape (and config), named
d<D>_r<R>.ptx or cfg_d<D>_r<R>_<config>.ptx:

    bitfold compile hf_rmsnorm --shape 1,R,D [--config C] --ptx-only \
        --dump-dir DIR && cp DIR/11-kernel.ptx ptx/d<D>_r<R>.ptx

then, on the GPU host, next to ptx/: OUT=DIR python3 decode_ptx_run.py.
The kernel arguments are hf_rmsnorm's ABI (x, its row stride, weight, its
row stride, y, its row stride, rows, eps), bf16 x and weight.
"""
import ctypes, glob, json, os, re, sys, time
import torch

cu = ctypes.CDLL("libcuda.so.1")
torch.cuda.init(); torch.zeros(1, device="cuda")
def ck(r, what):
    if r != 0:
        raise RuntimeError(f"{what}: CUresult {r}")

def load(path):
    src = open(path, "rb").read() + b"\0"
    name = re.search(rb"\.entry (\w+)\(", src).group(1)
    mod = ctypes.c_void_p()
    ck(cu.cuModuleLoadData(ctypes.byref(mod), src), "load " + path)
    fn = ctypes.c_void_p()
    ck(cu.cuModuleGetFunction(ctypes.byref(fn), mod, name), "getfn")
    m = re.search(rb"_r(\d+)_t(\d+)_v(\d+)_p(\d)$", name)
    return fn, int(m.group(1)), int(m.group(1)) * int(m.group(2)), name.decode()

def launcher(fn, rpc, threads, x, w, y, eps):
    R, D = x.numel() // x.shape[-1], x.shape[-1]
    vals = [ctypes.c_uint64(x.data_ptr()), ctypes.c_uint64(D), ctypes.c_uint64(w.data_ptr()),
            ctypes.c_uint64(D), ctypes.c_uint64(y.data_ptr()), ctypes.c_uint64(D),
            ctypes.c_uint64(R), ctypes.c_float(eps)]
    arr = (ctypes.c_void_p * len(vals))(*[ctypes.cast(ctypes.byref(v), ctypes.c_void_p) for v in vals])
    grid = (R + rpc - 1) // rpc
    def go():
        s = torch.cuda.current_stream().cuda_stream
        ck(cu.cuLaunchKernel(fn, grid, 1, 1, threads, 1, 1, 0, ctypes.c_void_p(s), arr, None), "launch")
    go.keep = (vals, arr)
    return go

def eager(x, w, eps):
    h = x.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return w * h.to(x.dtype)

def graph_us(fn, n=200):
    fn(); torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        with torch.cuda.graph(g):
            for _ in range(n):
                fn()
    for _ in range(3):
        g.replay()
    torch.cuda.synchronize()
    ts = []
    for _ in range(15):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record(); g.replay(); e1.record(); torch.cuda.synchronize()
        ts.append(e0.elapsed_time(e1) * 1000 / n)
    ts.sort()
    return ts[len(ts) // 2]

out = {"bits": [], "times": []}
bad = 0
for path in sorted(glob.glob("ptx/*.ptx")):
    tag = os.path.basename(path)[:-4]
    m = re.search(r"d(\d+)_r(\d+)", tag)
    D, R = int(m.group(1)), int(m.group(2))
    fn, rpc, threads, name = load(path)
    ok_all = True
    for seed in (0, 1):
        g = torch.Generator(device="cuda").manual_seed(seed * 1000 + R)
        x = (torch.randn((1, R, D), device="cuda", generator=g) * 2.0 ** torch.randint(-8, 8, (1, R, D), device="cuda", generator=g)).to(torch.bfloat16)
        w = torch.randn((D,), device="cuda", generator=g).to(torch.bfloat16)
        y = torch.full_like(x, float("nan"))
        launcher(fn, rpc, threads, x, w, y, 1e-6)()
        torch.cuda.synchronize()
        e = eager(x, w, 1e-6)
        ok = torch.equal(y, e)
        ok_all &= ok
    bad += not ok_all
    out["bits"].append(dict(tag=tag, name=name, equal=bool(ok_all)))
    if tag.startswith("d4096_r") or tag.startswith("cfg_") or tag in ("d8192_r1", "d2048_r1", "d5120_r1"):
        x = torch.randn((1, R, D), device="cuda").to(torch.bfloat16)
        w = torch.randn((D,), device="cuda").to(torch.bfloat16)
        y = torch.empty_like(x)
        t_bf = graph_us(launcher(fn, rpc, threads, x, w, y, 1e-6))
        t_eg = graph_us(lambda: eager(x, w, 1e-6), n=50)
        out["times"].append(dict(tag=tag, config=name.split("_", 3)[-1], bitfold_us=round(t_bf, 2), eager_us=round(t_eg, 2)))
        print(f"{tag:40s} bitfold {t_bf:6.2f} us  eager {t_eg:6.2f} us  equal {ok_all}", flush=True)
print("cases", len(out["bits"]), "not equal", bad)
print([b["tag"] for b in out["bits"] if not b["equal"]][:20])
json.dump(out, open(os.path.join(os.environ.get("OUT", "."), "ptx_run.json"), "w"), indent=1)
