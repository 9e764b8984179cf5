"""Emulator of PyTorch 2.11's generic CUDA reduction (Reduce.cuh) for a
reduction over the innermost, contiguous dimension, in numpy float32 with the
exact order of IEEE operations (docs/aten-reduce.md derives it).

x is a (rows, C) float32 array holding the values the kernel reads (already
widened from bf16/fp16, exactly). Rows are emulated independently; `rows`
(the iterator's output count) and `row_index` (the row's position, for the
vectorized path's address alignment) come from the real tensor.
"""
import numpy as np

F32, F64 = np.float32, np.float64
NUM_SM, MAX_THREADS_PER_SM = 132, 2048  # H200


def last_pow2(n):
    n = int(n)
    for s in (1, 2, 4, 8, 16):
        n |= n >> s
    return max(1, n - (n >> 1))


def block_dims(dim0, dim1, mnt):
    """ReduceConfig::set_block_dimension: (block_width, block_height)."""
    d0 = last_pow2(dim0) if dim0 < mnt else mnt
    d1 = last_pow2(dim1) if dim1 < mnt else mnt
    bw = min(d0, 32)
    bh = min(d1, mnt // bw)
    return min(d0, mnt // bh), bh


def config(C, R, V, es, base_shift=0, num_sm=NUM_SM, mtpsm=MAX_THREADS_PER_SM):
    """setReduceConfig for an inner contiguous reduction of C elements over R
    rows; V = input_vec_size; es = element bytes. Returns a dict."""
    dim0, dim1 = C, R
    vectorized = C >= 128  # num_reduce_dims == 1, stride == sizeof(scalar)
    if vectorized:
        dim0 //= V
    bw, bh = block_dims(dim0, dim1, 512)
    nt = bw * bh
    step_in, step_out = bw, 1
    vpt = -(-C // step_in)
    split_warps = vpt >= min(bh * 16, 256)
    if split_warps:
        step_in *= bh
    else:
        step_out *= bh
    G = 1
    grid = -(-R // step_out)
    target = num_sm * (mtpsm // nt)
    vpt = -(-C // step_in)
    if split_warps and vpt >= 256 and grid <= target:
        c1 = -(-target // grid)
        c2 = -(-vpt // 16)
        c3 = -(-vpt // 256)
        G = max(min(c1, c2), c3)
    return dict(C=C, R=R, V=V, bw=bw, bh=bh if split_warps else 1,
                G=G, vectorized=vectorized, split_warps=split_warps)


def fma32(a, b, c):
    """Correctly rounded float32 fma(a, b, c), vectorised."""
    p = a.astype(F64) * b.astype(F64)  # exact
    cd = c.astype(F64)
    s = p + cd
    bb = s - p
    e = (p - (s - bb)) + (cd - bb)  # TwoSum: s + e == p + c exactly
    with np.errstate(over="ignore", invalid="ignore"):
        r = s.astype(F32)
        rd = r.astype(F64)
        diff = s - rd
        nb = np.nextafter(r, np.where(diff > 0, F32(np.inf), F32(-np.inf)))
        mid = (diff != 0) & np.isfinite(rd) & (2 * s == rd + nb.astype(F64))
        bump = mid & (e != 0) & (np.sign(e) == np.sign(diff))
    return np.where(bump, nb, r).astype(F32)


def make_push(kind, use_fma):
    if kind == "sum":
        return lambda acc, v: (acc + v).astype(F32)
    if use_fma:
        return lambda acc, v: fma32(v, v, acc)
    return lambda acc, v: (acc + (v * v).astype(F32)).astype(F32)


_TREE_IDX = {}


def _tree(v, offsets):
    """v[..., i] += v[..., i + o] for lanes i with bit o clear, per stage."""
    T = v.shape[-1]
    for o in offsets:
        idx = _TREE_IDX.get((T, o))
        if idx is None:
            idx = np.array([i for i in range(T) if not (i & o) and i + o < T],
                           dtype=np.int64)
            _TREE_IDX[(T, o)] = idx
        if len(idx):
            v[..., idx] = (v[..., idx] + v[..., idx + o]).astype(F32)
    return v


ASCENDING_SHUFFLES = False  # the pre-2.6 order (ROCm/fbcode still use it)


def x_offsets(bw):
    offs = [o for o in (256, 128, 64, 32, 16, 8, 4, 2, 1) if o < bw]
    if ASCENDING_SHUFFLES:  # shared-memory stages stay descending
        offs = [o for o in offs if o >= 32] + sorted(o for o in offs if o < 32)
    return offs


def y_offsets(bw, bh):
    return [bw * o for o in (256, 128, 64, 32, 16, 8, 4, 2, 1) if o < bh]


def reduce_rows(x, cfg, kind, vt0, use_fma, row_index, base_shift=0):
    """The fp32 accumulator (before project) of each row of x (n, C)."""
    x = np.ascontiguousarray(x, dtype=F32)
    n, C = x.shape
    V, bw, bh, G = cfg["V"], cfg["bw"], cfg["bh"], cfg["G"]
    T = bw * bh
    L = T * G
    push = make_push(kind, use_fma)
    out = np.empty(n, dtype=F32)
    if cfg["vectorized"]:
        A = V
        shifts = (base_shift + np.asarray(row_index, dtype=np.int64) * C) % V
    else:
        A = vt0
        shifts = np.zeros(n, dtype=np.int64)
    for s in np.unique(shifts):
        rows = np.nonzero(shifts == s)[0]
        xs = x[rows]
        acc = np.zeros((len(rows), L, A), dtype=F32)
        if cfg["vectorized"]:
            h = (V - s) % V
            for e in range(h):  # head: lane V - h + e, accumulator 0
                lane = V - h + e
                acc[:, lane, 0] = push(acc[:, lane, 0], xs[:, e])
            nvec = (C - h) // V
            for k in range(-(-nvec // L)):
                lanes = np.arange(L)
                vec = k * L + lanes
                lanes, vec = lanes[vec < nvec], vec[vec < nvec]
                for i in range(V):
                    acc[:, lanes, i] = push(acc[:, lanes, i], xs[:, h + vec * V + i])
            t0 = h + nvec * V
            for e in range(C - t0):  # tail: lane e, accumulator 0
                acc[:, e, 0] = push(acc[:, e, 0], xs[:, t0 + e])
        else:
            for j in range(-(-C // L)):
                lanes = np.arange(L)
                col = j * L + lanes
                lanes, col = lanes[col < C], col[col < C]
                a = j % A
                acc[:, lanes, a] = push(acc[:, lanes, a], xs[:, col])
        v = acc[:, :, 0].copy()
        for i in range(1, A):
            v = (v + acc[:, :, i]).astype(F32)
        v = v.reshape(len(rows), G, T)
        _tree(v, x_offsets(bw) + y_offsets(bw, bh))
        if G > 1:
            part = v[:, :, 0]
            g = np.zeros((len(rows), T), dtype=F32)
            for c in range(G):
                g[:, c % T] = (g[:, c % T] + part[:, c]).astype(F32)
            _tree(g, y_offsets(bw, bh) + x_offsets(bw))
            res = g[:, 0]
        else:
            res = v[:, 0, 0]
        out[rows] = res
    return out


# ---- The ops: launch parameters (vt0, input_vec_size) as 2.11 compiles them.


def params(op, dtype_bytes, C, variant=0):
    """(vt0, V, fma) candidates for an op; variant 0 is the derived one."""
    if op in ("sum", "mean"):
        if dtype_bytes == 2:
            cands = [(4, 8, False), (4, 4, False)]
        else:
            big = (8, 8, False) if C % 1024 == 0 else (4, 4, False)
            cands = [(4, 4, False), big] if big != (4, 4, False) else [(4, 4, False), (8, 8, False)]
    else:  # norm
        cands = [(4, 4, True), (4, 4, False), (4, 8, True), (4, 8, False)]
    return cands


def round_to(v, dt):
    """float32 -> dt ('bf16', 'f16', 'f32') -> float32, RNE."""
    v = np.asarray(v, dtype=F32)
    if dt == "f32":
        return v
    if dt == "f16":
        return v.astype(np.float16).astype(F32)
    b = v.view(np.uint32).astype(np.uint64)
    r = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) << 16
    out = r.astype(np.uint32).view(F32)
    return np.where(np.isnan(v), v, out).astype(F32)


def project(op, acc, C, R, out_dt):
    if op == "sum":
        return round_to(acc, out_dt)
    if op == "mean":
        factor = F32(F32(R) / F32(R * C))
        return round_to((acc * factor).astype(F32), out_dt)
    with np.errstate(invalid="ignore"):
        return round_to(np.sqrt(acc.astype(F32)).astype(F32), out_dt)


# ---- Reductions over a non-innermost dim (docs/aten-reduce.md section 9) ----


def output_vec_size(S, addr_elems=0, other_strides=()):
    """get_output_vec_size: 4, halved until it divides the input's base
    address (in elements), the output extent S and the input's other
    strides (in elements)."""
    v = 4
    for n in (addr_elems, S) + tuple(other_strides):
        while n % v:
            v //= 2
    return v


def config_outer(C, R, ovs, num_sm=NUM_SM, mtpsm=MAX_THREADS_PER_SM):
    """setReduceConfig when the reduced dim (C elements) is not the fastest:
    block.x along the R outputs (vectorized by ovs), block.y along C. The
    lanes of one output are the block.y threads (when split) times the
    CTAs; returned in the inner emulator's terms (bw = 1)."""
    bw, bh = block_dims(R // ovs, C, 512 // ovs)
    nt = bw * bh
    step_in, step_out = 1, bw  # output_mult[0]: lanes of a warp = outputs
    vpt = C
    split = vpt >= bh * 16 or vpt >= 256
    if split:
        step_in *= bh
    else:
        step_out *= bh
    G = 1
    grid = -(-(R // ovs) // step_out)
    target = num_sm * (mtpsm // nt)
    vpt = -(-C // step_in)
    if split and vpt >= 256 and grid <= target:
        c1 = -(-target // grid)
        c2 = -(-vpt // 16)
        c3 = -(-vpt // 256)
        G = max(min(c1, c2), c3)
    return dict(C=C, R=R, V=1, bw=1, bh=bh if split else 1, G=G,
                vectorized=False, split_warps=split, ovs=ovs,
                block=(bw, bh))
