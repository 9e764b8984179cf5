"""Where tasks run: a Ray cluster, or local processes (one host, no Ray).

An executor submits a call with the resources it needs, says whether any
worker could ever offer those resources (so a task for a missing GPU type is
reported at once instead of waiting forever), waits for finished calls and
cancels a call that outlived its time.
"""
import concurrent.futures as cf
import os
import time


class UnschedulableError(RuntimeError):
    pass


def _call(fn, args, kwargs):
    return fn(*args, **kwargs)


class LocalExecutor:
    """Runs tasks in local processes; `slots` at once. Knows no GPU types:
    a task that asks for one runs here only when `gpu_types` lists it."""

    name = "local"

    def __init__(self, slots=None, gpu_types=()):
        self.slots = slots or os.cpu_count() or 1
        self.gpu_types = set(gpu_types)
        self._pool = cf.ProcessPoolExecutor(max_workers=self.slots)

    def check(self, need):
        g = need.get("accelerator_type")
        if g and g not in self.gpu_types:
            raise UnschedulableError(f"no local GPU of type {g!r} (local GPU types: "
                                     f"{sorted(self.gpu_types) or 'none'})")

    def submit(self, fn, args, kwargs, need):
        return self._pool.submit(_call, fn, args, kwargs)

    def wait(self, handles, timeout):
        done, _ = cf.wait(handles, timeout=timeout, return_when=cf.FIRST_COMPLETED)
        return list(done)

    def result(self, handle):
        return handle.result()

    def cancel(self, handle):
        handle.cancel()  # a running process is left to its own (subprocess) timeout

    def close(self):
        self._pool.shutdown(wait=True, cancel_futures=True)


def _probe(address, timeout):
    """Ray retries an unreachable head for minutes; a TCP connect says at once."""
    import socket
    hostport = address.split("://", 1)[-1].rsplit("/", 1)[0]
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise ConnectionError(f"Ray address {address!r}: expected HOST:PORT or ray://HOST:PORT")
    try:
        socket.create_connection((host, int(port)), timeout=min(timeout, 10)).close()
    except OSError as e:
        raise ConnectionError(f"cannot reach the Ray cluster at {address}: {e}") from None


class RayExecutor:
    """Runs tasks as Ray tasks on the cluster at `address` (None: a local
    cluster started here with `num_cpus`)."""

    name = "ray"

    def __init__(self, address=None, num_cpus=None, connect_timeout_s=30):
        try:
            import ray
        except ImportError:
            raise RuntimeError("bitfold.fleet needs Ray for this: pip install 'bitfold[fleet]' "
                               "(or plain `pip install ray`), or use --local / shard commands")
        self.ray = ray
        if address and address != "auto":
            _probe(address, connect_timeout_s)
        if not ray.is_initialized():
            os.environ.setdefault("RAY_gcs_rpc_server_reconnect_timeout_s", str(connect_timeout_s))
            kwargs = {"logging_level": "ERROR", "log_to_driver": False,
                      "include_dashboard": False}
            if address:
                kwargs["address"] = address
            elif num_cpus:
                kwargs["num_cpus"] = num_cpus
            try:
                ray.init(**kwargs)
            except Exception as e:  # ConnectionError, RuntimeError, TimeoutError by version
                raise ConnectionError(f"cannot reach the Ray cluster at {address or 'a new local cluster'}: "
                                      f"{type(e).__name__}: {e}") from None
        self._remote = ray.remote(_call)

    def _resources(self):
        return self.ray.cluster_resources()

    def check(self, need):
        have = self._resources()
        g = need.get("accelerator_type")
        if g and have.get(f"accelerator_type:{g}", 0) <= 0:
            types = sorted(k.split(":", 1)[1] for k in have if k.startswith("accelerator_type:"))
            raise UnschedulableError(f"no Ray worker has a GPU of type {g!r} "
                                     f"(the cluster has: {types or 'no typed GPUs'})")
        if need.get("num_gpus", 0) > have.get("GPU", 0):
            raise UnschedulableError(f"the Ray cluster has {have.get('GPU', 0):g} GPUs; "
                                     f"a task needs {need['num_gpus']}")
        for k, v in (need.get("resources") or {}).items():
            if have.get(k, 0) < v:
                raise UnschedulableError(f"no Ray worker offers resource {k!r} >= {v}")

    def submit(self, fn, args, kwargs, need):
        opts = {"max_retries": 0, "num_cpus": need.get("num_cpus", 1)}
        for k in ("num_gpus", "accelerator_type", "resources"):
            if need.get(k):
                opts[k] = need[k]
        return self._remote.options(**opts).remote(fn, args, kwargs)

    def wait(self, handles, timeout):
        done, _ = self.ray.wait(list(handles), num_returns=1, timeout=timeout)
        return done

    def result(self, handle):
        return self.ray.get(handle)

    def cancel(self, handle):
        try:
            self.ray.cancel(handle, force=True)
        except Exception:
            pass

    def close(self):
        pass


class Clock:
    def __init__(self):
        self.start = time.monotonic()

    def elapsed(self):
        return time.monotonic() - self.start
