"""Launch every case of tests/dsl/golden-sm90 on the GPU; write its outputs.

    python3 tests/gpu/approx/capture_golden.py tests/dsl/golden-sm90 OUTDIR

For each CASE.json (written with CASE.in by sm90_golden_gen): the inputs
from CASE.in go to the GPU with the manifest's shapes and strides, outputs
are poisoned (0xFF), the template runs through libbitfold.so's C API
(the bitfold package's bitfold.torch.Runtime; $BITFOLD_LIB), and the output operands' bytes,
in order, become CASE.out. All of them are packed in one file,
OUTDIR/golden-sm90-out.tar, so they travel back from the GPU host together;
unpack it into
tests/dsl/golden-sm90/ and commit. Run on an sm_90 GPU only: the CPU test
compares them with the interpreter's sm_90 models.
"""
import glob
import io
import json
import os
import sys
import tarfile

import torch

import bitfold.torch  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "f32": torch.float32}


def run_case(rt, manifest, raw):
    flats, tensors, offset = [], [], 0
    for op in manifest["operands"]:
        n = op["bytes"]
        if op["output"]:
            host = torch.full((n,), 0xFF, dtype=torch.uint8)
        else:
            host = torch.frombuffer(bytearray(raw[offset:offset + n]), dtype=torch.uint8)
            offset += n
        flat = host.cuda()
        flats.append((op, flat))
        tensors.append(flat.view(DTYPES[op["dtype"]]).as_strided(op["shape"], op["strides"]))
    if offset != len(raw):
        raise SystemExit(f"{manifest['case']}: {len(raw)} input bytes, manifest says {offset}")
    rt.kernel(manifest["template"], manifest["params"]).launch(tensors, manifest["scalars"])
    torch.cuda.synchronize()
    return b"".join(flat.cpu().numpy().tobytes() for op, flat in flats if op["output"])


def main():
    src, out = sys.argv[1], sys.argv[2]
    major, minor = torch.cuda.get_device_capability()
    if (major, minor) != (9, 0):
        raise SystemExit(f"sm_{major}{minor}: the golden outputs are sm_90's")
    rt = bitfold.torch.Runtime()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for path in sorted(glob.glob(os.path.join(src, "*.json"))):
            manifest = json.load(open(path))
            raw = open(path[:-5] + ".in", "rb").read()
            data = run_case(rt, manifest, raw)
            info = tarfile.TarInfo(manifest["case"] + ".out")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
            print(f"{manifest['case']}: {len(data)} output bytes")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "golden-sm90-out.tar"), "wb") as f:
        f.write(buf.getvalue())
    print(f"{torch.cuda.get_device_name()}: wrote {out}/golden-sm90-out.tar")


if __name__ == "__main__":
    main()
