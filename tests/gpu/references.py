"""Reference implementations the GPU suite compares bitfold against.

Everything here is PyTorch eager on the GPU (the oracle), except the
flashinfer RMSNorm order: flashinfer is not installed on a GPU host, so
`rmsnorm_flashinfer_stats` is an independent numpy float32 transcription of
the order in docs/numerics.md section 5 (thread tx owns columns
8*tpr*b + 8*tx + v; acc = acc + x*x, each op rounded; butterfly xor 1..16;
warp0 + warp1), written without looking at the bitfold template. Its rsqrt
is torch.rsqrt on the GPU, which is rsqrt.approx.f32 (identical to the
.ftz form for the normal inputs s/D + eps >= eps).
"""
import numpy as np
import torch
import torch.nn.functional as F


def ln_modulate(x, scale, shift, eps):
    d = x.shape[-1]
    y = F.layer_norm(x, (d,), eps=eps)
    return y * (1 + scale[:, None]) + shift[:, None]


def qk_layernorm(q, k, eps):
    d = q.shape[-1]
    return F.layer_norm(q, (d,), eps=eps), F.layer_norm(k, (d,), eps=eps)


def conv_bias(x, bias, h=None):
    c = x.shape[1]
    view = [1, c] + [1] * (x.dim() - 2)
    y = x.clone().add_(bias.to(x.dtype).view(*view))
    if h is not None:
        y = y + h
    return y


def residual_gate(residual, update, gate):
    return residual + update * gate


def rmsnorm_flashinfer_stats(x2d):
    """Sum of squares per row in flashinfer's order; x2d float32 numpy (R, D)."""
    rows, d = x2d.shape
    tpr = d // 64
    assert d == 64 * tpr and tpr in (32, 64)
    lanes = np.zeros((tpr, rows), dtype=np.float32)
    for tx in range(tpr):
        acc = np.zeros(rows, dtype=np.float32)
        for b in range(8):
            for v in range(8):
                col = 8 * tpr * b + 8 * tx + v
                sq = (x2d[:, col] * x2d[:, col]).astype(np.float32)
                acc = (acc + sq).astype(np.float32)
        lanes[tx] = acc
    for off in (1, 2, 4, 8, 16):  # butterfly inside each warp: self + other
        new = lanes.copy()
        for i in range(tpr):
            new[i] = (lanes[i] + lanes[i ^ off]).astype(np.float32)
        lanes = new
    s = lanes[0]
    if tpr == 64:
        s = (lanes[0] + lanes[32]).astype(np.float32)  # warp0 + warp1
    return s


def rmsnorm_modulate(x, weight, scale, shift, eps):
    """x (B, S, D); weight (D,); scale, shift (B, D)."""
    b, s_len, d = x.shape
    xf = x.float().reshape(-1, d)
    ss = rmsnorm_flashinfer_stats(xf.cpu().numpy())
    mean_sq = (ss / np.float32(d)).astype(np.float32)
    arg = torch.from_numpy((mean_sq + np.float32(eps)).astype(np.float32)).to(x.device)
    rstd = torch.rsqrt(arg)
    y = ((xf * rstd[:, None]) * (weight.float() + 0.0)).to(x.dtype).reshape(b, s_len, d)
    return y * (1 + scale[:, None]) + shift[:, None]
