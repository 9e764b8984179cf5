"""GPU oracle suite: bitfold vs PyTorch eager, compared bit for bit.

Runs only where torch sees a CUDA device and libbitfold.so is found
($BITFOLD_LIB); elsewhere every test is skipped with the reason shown.
A summary of cases per template (and the first mismatch, if any) is written
to $BITFOLD_GPU_SUMMARY when set.
"""
import collections
import json
import os
import pytest

# The oracle compares kernels: bitfold.torch's first calls wait for their
# compile here instead of serving the eager chain (test_async_compile.py
# turns the background mode on where it tests it).
os.environ.setdefault("BITFOLD_ASYNC_COMPILE", "0")

try:
    import torch
    HAVE_CUDA = torch.cuda.is_available()
except Exception:  # torch missing: the suite skips
    torch = None
    HAVE_CUDA = False

SUMMARY = collections.defaultdict(lambda: {"cases": 0, "equal": 0, "first_mismatch": None})


def record(template, equal, detail):
    s = SUMMARY[template]
    s["cases"] += 1
    s["equal"] += int(equal)
    if not equal and s["first_mismatch"] is None:
        s["first_mismatch"] = detail


@pytest.fixture(scope="session")
def rt():
    if not HAVE_CUDA:
        pytest.skip("no CUDA device visible to torch: GPU oracle tests skipped")
    try:
        import bitfold.torch
        r = bitfold.torch.Runtime()
    except ImportError as e:
        pytest.skip(f"the bitfold package is not importable ({e}): install the wheel or "
                    "set PYTHONPATH=python")
    except OSError as e:
        pytest.skip(f"libbitfold.so not found ({e}); set BITFOLD_LIB")
    yield r
    r.close()


def pytest_sessionfinish(session, exitstatus):
    path = os.environ.get("BITFOLD_GPU_SUMMARY")
    if not path or not SUMMARY:
        return
    info = {
        "torch": torch.__version__ if torch else None,
        "gpu": torch.cuda.get_device_name(0) if HAVE_CUDA else None,
        "templates": SUMMARY,
    }
    with open(path, "w") as f:
        json.dump(info, f, indent=1, default=dict)
