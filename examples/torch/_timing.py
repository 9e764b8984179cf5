"""Wall-clock time per call on the GPU, for the examples."""
import time

import torch


def time_ms(fn, reps=5, warm=3):
    """Mean milliseconds per call of fn over `reps` calls, after `warm`."""
    for _ in range(warm):
        fn()
    # bitfold.torch compiles new shapes in the background while eager
    # serves them: time the kernels, not that.
    import bitfold.torch
    bitfold.torch.wait_for_compiles()
    fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(reps):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / reps * 1e3
