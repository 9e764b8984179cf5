"""Imports the installed bitfold package (the wheel), not python/bitfold:
conftest.py puts python/ first on sys.path for bitfold_torch.py, which would
shadow the wheel. Where no wheel is installed, python/bitfold is used (with
$BITFOLD_LIB)."""
import os
import sys

_PY = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "python"))


def import_bitfold_torch():
    saved = list(sys.path)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _PY]
    try:
        import bitfold.torch as bt
    except ImportError:
        sys.path[:] = saved
        import bitfold.torch as bt
    finally:
        sys.path[:] = saved
    return bt
