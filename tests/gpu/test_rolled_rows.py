"""Rolled rows (codegen/EmitRolledRows.cpp) vs the live eager chains, bit
for bit: every config with BITFOLD_ROLLED_ROWS=1, and wide rows, which
roll by default (past 64 vector accesses per thread).

With the variable set, every two-pass config of a norm kernel runs its row
as loops (the sum folds' vectors and the output chunks) instead of a full
unroll, and a one-pass row config whose output loop would run three times
or more folds the same way, then loops over its output chunks reading the
row again (codegen/README.md, "Rolled rows"). The cases are test_kernels.py's
every-config cases at the seed shapes and hf_rmsnorm's every-config check,
on a runtime of their own created with the variable set (it enters the
cache key, so no kernel compiled without it is reused).
"""
import os

import pytest

from conftest import HAVE_CUDA
from test_aten_norms import check_hf_every_config
from test_kernels import seed_config_cases, test_every_config_at_seed_shape


@pytest.fixture(scope="module")
def rolled_rt():
    """A runtime whose compiles see BITFOLD_ROLLED_ROWS=1."""
    if not HAVE_CUDA:
        pytest.skip("no CUDA device visible to torch: GPU oracle tests skipped")
    old = os.environ.get("BITFOLD_ROLLED_ROWS")
    os.environ["BITFOLD_ROLLED_ROWS"] = "1"
    try:
        import bitfold.torch
        r = bitfold.torch.Runtime()
    except ImportError as e:
        pytest.skip(f"the bitfold package is not importable ({e})")
    except OSError as e:
        pytest.skip(f"libbitfold.so not found ({e}); set BITFOLD_LIB")
    try:
        yield r
    finally:
        r.close()
        if old is None:
            os.environ.pop("BITFOLD_ROLLED_ROWS", None)
        else:
            os.environ["BITFOLD_ROLLED_ROWS"] = old


NORMS = [c for c in seed_config_cases()
         if c[0] in ("ln_modulate", "qk_layernorm", "rmsnorm_modulate")]


@pytest.mark.parametrize("template,shape,params,cli_args", NORMS)
def test_rolled_rows_every_config_matches_eager(rolled_rt, template, shape, params, cli_args):
    test_every_config_at_seed_shape(rolled_rt, template, shape, params, cli_args)


@pytest.mark.parametrize("shape", [(1, 4096, 4096), (8, 1024, 5120), (1, 256, 8192)])
def test_rolled_rows_hf_rmsnorm_every_config_matches_eager(rolled_rt, shape):
    check_hf_every_config(rolled_rt, shape)


def test_rolled_rows_hf_rmsnorm_with_a_residual_matches_eager(rolled_rt):
    check_hf_every_config(rolled_rt, (1, 64, 4096), "f32", residual=True)


# Wide rows on the default runtime: the configs whose share of a row passes
# 64 vectors per thread roll by default (elementwise rows, sum folds at two
# passes), the rest stay unrolled; every config must give eager's bits.
WIDE = [("ln_modulate", (1, 16, 32768), "", []),
        ("residual_gate", (1, 4, 65536), "gate=full", []),
        ("residual_gate", (2, 8, 16384), "gate=per_batch", ["--params", "gate=per_batch"])]


@pytest.mark.parametrize("template,shape,params,cli_args", WIDE)
def test_wide_rows_every_config_matches_eager(rt, template, shape, params, cli_args):
    test_every_config_at_seed_shape(rt, template, shape, params, cli_args)


@pytest.mark.parametrize("shape", [(1, 8, 65536), (2, 3, 32768)])
def test_wide_rows_hf_rmsnorm_every_config_matches_eager(rt, shape):
    check_hf_every_config(rt, shape)
