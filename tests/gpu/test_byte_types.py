#!/usr/bin/env python3
"""float8_e4m3fn, float8_e5m2 and int8 stores and loads on the GPU against
torch, on every f32 bit pattern.

A kernel text per dtype rounds an f32 input to the dtype (`round to T`,
output q) and widens a byte input back (`extend`, output z). Launched
through Python's Runtime.kernel_from_source on all 2^32 f32 patterns (in
chunks of 2^28) and all 256 codes; compared with `x.to(dtype)` and
`q.to(torch.float32)` bit for bit. For int8, C++ (and so torch) leaves
out-of-range and NaN conversions undefined: the in-range inputs
(-129 < x < 128) must be equal, the rest is reported (bitfold saturates,
NaN -> 0; docs/kernel-format.md).

On a GPU host, with the package built (BITFOLD_LIB set):
    python3 tests/gpu/test_byte_types.py --out OUT
Writes OUT/byte-types.json; exit 0 when every compared element is equal.
Under pytest it skips where torch sees no GPU.
"""
import argparse
import json
import os
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))

import pytest  # noqa: E402
import torch  # noqa: E402

CHUNK = 1 << 28
DTYPES = {"f8e4m3fn": torch.float8_e4m3fn, "f8e5m2": torch.float8_e5m2,
          "i8": torch.int8}

TEXT = """bitfold.row_program byte_types_{name} v1
groups 1
guard cols % 1 == 0, 1 <= cols <= 16777216
input x : f32 row_major per_element
input b : {name} row_major per_element
body:
  %x = load x : f32
  %q = round to {name} %x : {name}
  output q : {name} row_major = %q
  %b = load b : {name}
  %z = extend %b : f32
  output z : f32 row_major = %z
"""


def raw(bitfold, t, dtype):
    return bitfold.RawTensor(t.data_ptr(), dtype, tuple(t.shape), tuple(t.stride()),
                             t.device.index)


def check_dtype(rt, bitfold, name):
    dtype = DTYPES[name]
    k = rt.kernel_from_source(TEXT.format(name=name))
    stream = torch.cuda.current_stream().cuda_stream
    rows = CHUNK // 4096
    codes = torch.arange(256, device="cuda", dtype=torch.int32).to(torch.uint8)
    b = codes.repeat(CHUNK // 256).view(rows, 4096)
    result = {"dtype": name, "compared": 0, "differ": 0, "first": None,
              "out_of_range": 0, "out_of_range_differ": 0}
    for start in range(0, 1 << 32, CHUNK):
        bits = torch.arange(start, start + CHUNK, device="cuda", dtype=torch.int64)
        x = bits.to(torch.int32).view(torch.float32).view(rows, 4096)
        q = torch.empty(rows, 4096, device="cuda", dtype=torch.uint8)
        z = torch.empty(rows, 4096, device="cuda", dtype=torch.float32)
        bdt = "i8" if name == "i8" else "u8"
        k.launch([raw(bitfold, x, "f32"), raw(bitfold, b, bdt), raw(bitfold, q, bdt),
                  raw(bitfold, z, "f32")], [], stream)
        want = x.to(dtype).view(torch.uint8)
        differ = q != want
        if name == "i8":
            in_range = (x > -129.0) & (x < 128.0)
            result["out_of_range"] += int((~in_range).sum())
            result["out_of_range_differ"] += int((differ & ~in_range).sum())
            differ = differ & in_range
        n = int(differ.sum())
        if n and result["first"] is None:
            i = int(differ.flatten().nonzero()[0])
            result["first"] = {"f32_bits": hex(start + i), "got": int(q.flatten()[i]),
                               "torch": int(want.flatten()[i])}
        result["differ"] += n
        result["compared"] += CHUNK
        if start == 0:  # every code widened, against torch's .float()
            wz = b.view(dtype).to(torch.float32)  # i8: the codes as signed bytes
            zb, wb = z.view(torch.int32), wz.view(torch.int32)
            nan = torch.isnan(z) & torch.isnan(wz)
            result["extend_differ"] = int(((zb != wb) & ~nan).sum())
    result["ok"] = result["differ"] == 0 and result.get("extend_differ", 0) == 0
    return result


def run_all():
    import bitfold
    rt = bitfold.Runtime()
    return [check_dtype(rt, bitfold, name) for name in DTYPES]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")
def test_every_f32_converts_as_torch():
    for r in run_all():
        assert r["ok"], r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=".")
    a = ap.parse_args()
    rows = run_all()
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "byte-types.json"), "w") as f:
        json.dump({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                   "results": rows}, f, indent=1)
    for r in rows:
        print(json.dumps(r))
    return 0 if all(r["ok"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
