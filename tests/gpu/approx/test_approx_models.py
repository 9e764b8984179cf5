"""The interpreter's sm_90 approximation models vs the GPU, every input.

Builds tests/gpu/approx/check.cu with nvcc and runs it: rcp/rsqrt/ex2.approx
.ftz.f32 and nvcc's expf on all 2^32 inputs each, the GPU's bits against
dsl/ApproxTables.cpp over the committed tables (about 20 s on an H200).
Skipped without nvcc or an sm_90 GPU (the tables are sm_90's).
"""
import os
import shutil
import subprocess

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def sm90_gpu():
    try:
        import torch
    except ImportError:
        return False, "torch missing: cannot see the GPU"
    if not torch.cuda.is_available():
        return False, "no CUDA device"
    cap = torch.cuda.get_device_capability()
    return cap == (9, 0), f"GPU is sm_{cap[0]}{cap[1]}; the committed tables are sm_90's"


def test_sm90_models_equal_the_gpu_on_every_input(tmp_path):
    ok, why = sm90_gpu()
    if not ok:
        pytest.skip(why)
    nvcc = shutil.which("nvcc") or "/usr/local/cuda/bin/nvcc"
    if not os.path.exists(nvcc):
        pytest.skip("nvcc not found: cannot build the check program")
    exe = str(tmp_path / "check")
    here = os.path.dirname(__file__)
    subprocess.run([nvcc, "-O2", "-std=c++20", "-arch=sm_90", "-I", ROOT,
                    os.path.join(here, "check.cu"),
                    os.path.join(ROOT, "dsl", "ApproxTables.cpp"),
                    "-o", exe, "-l:libzstd.so.1"], check=True)
    r = subprocess.run([exe, os.path.join(ROOT, "dsl", "approx", "sm90")],
                       capture_output=True, text=True, timeout=900)
    print(r.stdout, r.stderr)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "PASS" in r.stdout
