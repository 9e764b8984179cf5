/*===- python/native/fast.c - bitfold.torch's warm call in C ---------------===*
 *
 * The warm call of a bitfold.torch op (a layout met before) without Python
 * in the loop: the layout key built from the arguments, one dict lookup in
 * the op's site table, the outputs allocated and the prepared launch
 * queued on the current stream. torch's tensors are read through DLPack's
 * C exchange API (torch.Tensor.__dlpack_c_exchange_api__, torch >= 2.11):
 * no torch headers, CPython's limited API (3.10), so one build serves
 * every torch and Python version that has the API. Anything this file does
 * not serve returns None, and the caller takes the Python path, which is
 * the reference: this file only replays what it registered there.
 *
 *===----------------------------------------------------------------------===*/
#define Py_LIMITED_API 0x030A0000
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dlpack/dlpack.h>
#include <stdint.h>
#include <string.h>

/* DLPack >= 1.3's exchange API (Debian's dlpack.h predates it): the
 * layout of the spec's DLPackExchangeAPI and DLManagedTensorVersioned. */
typedef struct {
  uint32_t major, minor;
} BfVersion;

typedef struct BfManaged {
  BfVersion version;
  void *manager_ctx;
  void (*deleter)(struct BfManaged *self);
  uint64_t flags;
  DLTensor dl_tensor;
} BfManaged;

typedef struct BfApiHeader {
  BfVersion version;
  struct BfApiHeader *prev_api;
} BfApiHeader;

typedef void (*BfSetError)(void *ctx, const char *kind, const char *message);

typedef struct {
  BfApiHeader header;
  int (*managed_tensor_allocator)(DLTensor *prototype, BfManaged **out,
                                  void *error_ctx, BfSetError set_error);
  int (*managed_tensor_from_py_object_no_sync)(void *py_object,
                                               BfManaged **out);
  int (*managed_tensor_to_py_object_no_sync)(BfManaged *tensor,
                                             void **out_py_object);
  int (*dltensor_from_py_object_no_sync)(void *py_object, DLTensor *out);
  int (*current_work_stream)(DLDeviceType type, int32_t id, void **stream);
} BfExchangeApi;

/* torch's own C allocation, where this torch exports it (resolved in
 * _fast.py): libtorch's AOTI C shim (aoti_torch_empty_strided,
 * aoti_torch_get_data_ptr, aoti_torch_delete_tensor_object; 0 = success)
 * and libtorch_python's THPVariable_Wrap(const at::TensorBase &), which an
 * AtenTensorHandle (an at::Tensor *) is. The same at::empty_strided through
 * the dispatcher and the caching allocator as torch.empty_strided, without
 * the Python binding's argument parsing. */
typedef int32_t (*BfEmptyStrided)(int64_t ndim, const int64_t *sizes,
                                  const int64_t *strides, int32_t dtype,
                                  int32_t deviceType, int32_t deviceIndex,
                                  void **tensor);
typedef int32_t (*BfDataPtr)(void *tensor, void **data);
typedef int32_t (*BfDelete)(void *tensor);
typedef PyObject *(*BfWrap)(const void *tensor);

/* bitfold_launch_prepared (runtime/bitfold.h): 0 = queued. */
typedef int (*BfLaunch)(const void *prepared, const void *const *data,
                        void *stream);

enum { kMaxArgs = 12, kMaxDims = 8, kMaxSlots = 16, kMaxOuts = 4 };
#define ENTRY_CAPSULE "bitfold.fast.entry"

/* A registered site: what a warm call at its layout launches. */
typedef struct {
  const void *prepared; /* bitfold_prepared*, owned by the site's launcher */
  BfLaunch launch;      /* of the library the handle came from */
  int refusal;          /* 1: a remembered refusal, served by the chain */
  int verified;         /* compared with eager (verify="once" needs it) */
  int numSlots;
  int8_t slot[kMaxSlots]; /* >= 0: argument index; < 0: output -slot-1 */
  int numOuts;
  int8_t outArg[kMaxOuts];  /* the argument whose shape and device it takes */
  int8_t inPlace[kMaxOuts]; /* 1: the output is that argument (out=, an alias) */
  /* A fresh output's allocation, exactly the Python path's shape, strides
   * and dtype (the key fixes every argument's shape and strides, so the op's
   * allocation gives these every time): make(argument) where likeArg
   * (torch.empty_like), else make() (torch.empty_strided bound to them).
   * Through torch's own factories, so the output is a caching-allocator
   * block as any tensor torch makes (record_stream, resize_, memory stats);
   * DLPack's allocator would give a foreign blob, which record_stream
   * silently skips. */
  PyObject *make[kMaxOuts];
  int8_t likeArg[kMaxOuts];
  /* The same output through torch's C allocation where shim is bound:
   * make()'s exact sizes, strides, dtype and device (torch's codes). */
  struct {
    int set, ndim;
    int64_t sizes[kMaxDims], strides[kMaxDims];
    int32_t dtype, deviceType, deviceIndex;
  } shape[kMaxOuts];
} Entry;

static const BfExchangeApi *api;
static struct {
  BfEmptyStrided empty;
  BfDataPtr data;
  BfDelete drop;
  BfWrap wrap;
} shim;
static long long shimMade; /* outputs made through the shim (tests, bench) */
static PyObject *tensorType, *parameterType, *gradEnabled;
static PyObject *sRequiresGrad, *sLaunches, *sIsNeg, *sOne;
static long long served; /* warm calls served here (tests, bench) */

/* The key of one call: every argument's kind and value or layout. */
typedef struct {
  char bytes[2048];
  size_t len;
  DLTensor dl[kMaxArgs];
  int isTensor[kMaxArgs];
  int firstTensor;
} Key;

static int put(Key *k, const void *p, size_t n) {
  if (k->len + n > sizeof k->bytes)
    return 0;
  memcpy(k->bytes + k->len, p, n);
  k->len += n;
  return 1;
}

static int isPlainTensor(PyObject *o) {
  PyObject *t = (PyObject *)Py_TYPE(o);
  return t == tensorType || t == parameterType;
}

/* A tensor's part of the key: dtype, device, shape and strides (elements). */
static int putTensor(Key *k, int i, PyObject *o) {
  PyObject *neg = PyObject_CallMethodObjArgs(o, sIsNeg, NULL);
  int lazyNegation = neg == Py_True;
  Py_XDECREF(neg);
  if (!neg || lazyNegation) {
    PyErr_Clear(); /* its memory holds the values negated: Python's */
    return 0;
  }
  DLTensor *d = &k->dl[i];
  if (api->dltensor_from_py_object_no_sync(o, d) != 0) {
    PyErr_Clear(); /* not DLPack-able (meta, sparse, conj ...): Python's */
    return 0;
  }
  if (d->ndim < 0 || d->ndim > kMaxDims)
    return 0;
  int64_t strides[kMaxDims];
  int64_t step = 1;
  for (int j = d->ndim - 1; j >= 0; --j) {
    strides[j] = d->strides ? d->strides[j] : step;
    step *= d->shape[j];
  }
  char tag = 'T';
  int32_t dev[2] = {(int32_t)d->device.device_type, d->device.device_id};
  uint8_t nd = (uint8_t)d->ndim;
  k->isTensor[i] = 1;
  if (k->firstTensor < 0)
    k->firstTensor = i;
  return put(k, &tag, 1) && put(k, &d->dtype, sizeof d->dtype) &&
         put(k, dev, sizeof dev) && put(k, &nd, 1) &&
         put(k, d->shape, 8 * (size_t)nd) && put(k, strides, 8 * (size_t)nd);
}

/* One argument into the key: 1 done, 0 not a kind this file keys (the
 * Python path serves the call), -1 a Python error. */
static int putArg(Key *k, int i, PyObject *o) {
  if (o == Py_None)
    return put(k, "N", 1);
  if (PyBool_Check(o)) {
    char b[2] = {'B', (char)(o == Py_True)};
    return put(k, b, 2);
  }
  if (PyFloat_CheckExact(o)) {
    double v = PyFloat_AsDouble(o);
    return put(k, "F", 1) && put(k, &v, sizeof v);
  }
  if (PyLong_CheckExact(o)) {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    return !overflow && put(k, "I", 1) && put(k, &v, sizeof v);
  }
  if (PyUnicode_CheckExact(o)) {
    Py_ssize_t n = 0;
    const char *s = PyUnicode_AsUTF8AndSize(o, &n);
    if (!s)
      return -1;
    uint32_t len = (uint32_t)n;
    return n <= 256 && put(k, "S", 1) && put(k, &len, 4) && put(k, s, (size_t)n);
  }
  if (isPlainTensor(o))
    return putTensor(k, i, o);
  return 0;
}

/* The key of the argument tuple a: 1, 0 (not keyed), -1 (error). */
static int buildKey(Key *k, PyObject *a) {
  k->len = 0;
  k->firstTensor = -1;
  Py_ssize_t n = PyTuple_Size(a);
  if (n < 0)
    return -1;
  if (n > kMaxArgs)
    return 0;
  for (Py_ssize_t i = 0; i < n; ++i) {
    k->isTensor[i] = 0;
    int r = putArg(k, (int)i, PyTuple_GetItem(a, i));
    if (r <= 0)
      return r;
  }
  return k->firstTensor >= 0;
}

static PyObject *keyBytes(const Key *k) {
  return PyBytes_FromStringAndSize(k->bytes, (Py_ssize_t)k->len);
}

/* ---- the warm call ------------------------------------------------------ */

/* 1 when a tensor argument needs grad while grad mode is on. */
static int needsGrad(const Key *k, PyObject *a) {
  PyObject *on = PyObject_CallNoArgs(gradEnabled);
  if (!on)
    return -1;
  int enabled = on == Py_True;
  Py_DECREF(on);
  if (!enabled)
    return 0;
  for (Py_ssize_t i = 0; i < PyTuple_Size(a); ++i) {
    if (!k->isTensor[i])
      continue;
    PyObject *rg = PyObject_GetAttr(PyTuple_GetItem(a, i), sRequiresGrad);
    if (!rg)
      return -1;
    int need = rg == Py_True;
    Py_DECREF(rg);
    if (need)
      return 1;
  }
  return 0;
}

/* Output j of e through torch's C allocation: 0, or -1 where the shim
 * failed (the caller's factory call then raises torch's own error, out of
 * memory included). */
static int shimAllocate(const Entry *e, int j, PyObject **out, void **data) {
  void *t = NULL, *p = NULL;
  if (shim.empty(e->shape[j].ndim, e->shape[j].sizes, e->shape[j].strides,
                 e->shape[j].dtype, e->shape[j].deviceType,
                 e->shape[j].deviceIndex, &t) != 0 || !t)
    return -1;
  *out = shim.data(t, &p) == 0 ? shim.wrap(t) : NULL;
  shim.drop(t); /* the Python tensor holds its own reference */
  if (!*out) {
    PyErr_Clear();
    return -1;
  }
  *data = p;
  ++shimMade;
  return 0;
}

/* e's outputs into outs[] (new references) and their addresses: fresh
 * ones from torch's C allocation or its factories, in-place ones the
 * arguments themselves. */
static int allocate(const Entry *e, const Key *k, PyObject *a,
                    PyObject **outs, void **data) {
  for (int j = 0; j < e->numOuts; ++j) {
    const DLTensor *like = &k->dl[e->outArg[j]];
    if (e->inPlace[j]) {
      outs[j] = Py_NewRef(PyTuple_GetItem(a, e->outArg[j]));
      data[j] = (char *)like->data + like->byte_offset;
      continue;
    }
    if (e->shape[j].set && shim.empty &&
        shimAllocate(e, j, &outs[j], &data[j]) == 0)
      continue;
    DLTensor d;
    PyObject *arg = PyTuple_GetItem(a, e->outArg[j]);
    outs[j] = e->likeArg[j] ? PyObject_CallFunctionObjArgs(e->make[j], arg, NULL)
                            : PyObject_CallNoArgs(e->make[j]);
    if (!outs[j])
      return -1;
    if (api->dltensor_from_py_object_no_sync(outs[j], &d) != 0) {
      if (!PyErr_Occurred())
        PyErr_SetString(PyExc_RuntimeError, "bitfold fast path: an output "
                                            "DLPack cannot describe");
      return -1;
    }
    data[j] = (char *)d.data + d.byte_offset;
  }
  return 0;
}

/* The current stream of the launch's device (NULL for host tensors, as the
 * fake driver of the CPU tests takes them). Inside a CUDA graph capture that
 * is the capturing stream: the launch is captured (the runtime relaxes the
 * capture mode around anything a launch loads). */
static int currentStream(const DLTensor *x, void **stream) {
  *stream = NULL;
  if (x->device.device_type != kDLCUDA)
    return 0;
  return api->current_work_stream(kDLCUDA, x->device.device_id, stream);
}

/* counts[name] += 1 (a counter must not fail the call it counts). */
static void bump(PyObject *counts, PyObject *name) {
  PyObject *n = PyDict_GetItemWithError(counts, name);
  PyObject *sum = n ? PyNumber_Add(n, sOne) : Py_NewRef(sOne);
  if (sum) {
    PyDict_SetItem(counts, name, sum);
    Py_DECREF(sum);
  }
  PyErr_Clear();
  ++served;
}

/* Launches e (a launcher site) on the call's tensors; its outputs, or None
 * where the Python path must serve the call. */
static PyObject *launchEntry(const Entry *e, const Key *k, PyObject *a,
                             PyObject *counts) {
  int grad = needsGrad(k, a);
  if (grad != 0)
    return grad < 0 ? NULL : Py_NewRef(Py_None);
  void *stream = NULL;
  if (currentStream(&k->dl[k->firstTensor], &stream) != 0) /* the API's error, */
    return PyErr_Occurred() ? NULL : Py_NewRef(Py_None); /* else Python's call */
  PyObject *outs[kMaxOuts] = {0};
  void *outData[kMaxOuts] = {0};
  const void *addr[kMaxSlots];
  PyObject *result = NULL;
  if (allocate(e, k, a, outs, outData) != 0)
    goto done;
  for (int s = 0; s < e->numSlots; ++s) {
    int8_t v = e->slot[s];
    addr[s] = v >= 0 ? (const char *)k->dl[v].data + k->dl[v].byte_offset
                     : outData[-v - 1];
  }
  int rc;
  Py_BEGIN_ALLOW_THREADS;
  rc = e->launch(e->prepared, addr, stream);
  Py_END_ALLOW_THREADS;
  if (rc != 0) {
    result = Py_NewRef(Py_None); /* the checked path says why */
    goto done;
  }
  bump(counts, sLaunches);
  if (e->numOuts == 1) {
    result = outs[0];
    outs[0] = NULL;
  } else {
    result = PyTuple_New(e->numOuts);
    for (int j = 0; result && j < e->numOuts; ++j) {
      PyTuple_SetItem(result, j, outs[j]); /* steals */
      outs[j] = NULL;
    }
  }
done:
  for (int j = 0; j < kMaxOuts; ++j)
    Py_XDECREF(outs[j]);
  return result;
}

/* A remembered refusal: counted under its reason, served by the chain. */
static PyObject *refusedEntry(PyObject *site, PyObject *a) {
  PyObject *chain = PyTuple_GetItem(site, 1);
  PyObject *counts = PyTuple_GetItem(site, 2);
  PyObject *reason = PyTuple_GetItem(site, 3);
  if (!chain || !counts || !reason)
    return NULL;
  bump(counts, reason);
  return PyObject_CallObject(chain, a);
}

/* run(sites, a, unverified_ok, auto) -> result or None. A fast call (no
 * argument tuple, no format string): it runs on every warm call. */
static PyObject *run(PyObject *self, PyObject *const *args, Py_ssize_t n) {
  (void)self;
  if (!api)
    return Py_NewRef(Py_None);
  if (n != 4 || !PyDict_Check(args[0]) || !PyTuple_Check(args[1])) {
    PyErr_SetString(PyExc_TypeError,
                    "run(sites: dict, a: tuple, unverified_ok, auto)");
    return NULL;
  }
  PyObject *sites = args[0], *a = args[1];
  const int unverifiedOk = PyObject_IsTrue(args[2]);
  const int autoMode = PyObject_IsTrue(args[3]);
  if (unverifiedOk < 0 || autoMode < 0)
    return NULL;
  Key k;
  int r = buildKey(&k, a);
  if (r <= 0)
    return r < 0 ? NULL : Py_NewRef(Py_None);
  PyObject *key = keyBytes(&k);
  if (!key)
    return NULL;
  PyObject *site = PyDict_GetItemWithError(sites, key);
  Py_DECREF(key);
  if (!site)
    return PyErr_Occurred() ? NULL : Py_NewRef(Py_None);
  Py_INCREF(site); /* the launch runs without the GIL: keep the handle */
  PyObject *result = Py_NewRef(Py_None);
  const Entry *e = PyCapsule_GetPointer(PyTuple_GetItem(site, 0),
                                        ENTRY_CAPSULE);
  if (!e) {
    Py_CLEAR(result);
  } else if (e->refusal ? autoMode : (e->verified || unverifiedOk)) {
    Py_DECREF(result);
    result = e->refusal ? refusedEntry(site, a)
                        : launchEntry(e, &k, a, PyTuple_GetItem(site, 2));
  }
  Py_DECREF(site);
  return result;
}

/* ---- registration (the Python path, after its own launch) --------------- */

/* key(a) -> the bytes a registered site of a is stored under, or None. */
static PyObject *key(PyObject *self, PyObject *a) {
  (void)self;
  if (!api || !PyTuple_Check(a))
    return Py_NewRef(Py_None);
  Key k;
  int r = buildKey(&k, a);
  if (r <= 0)
    return r < 0 ? NULL : Py_NewRef(Py_None);
  return keyBytes(&k);
}

static void dropEntry(Entry *e) {
  if (!e)
    return;
  for (int j = 0; j < kMaxOuts; ++j)
    Py_XDECREF(e->make[j]);
  PyMem_Free(e);
}

static void freeEntry(PyObject *capsule) {
  dropEntry(PyCapsule_GetPointer(capsule, ENTRY_CAPSULE));
}

/* Output j's shape for the shim from (sizes, strides, dtype, device type,
 * device index), torch's codes; None leaves it unset (the factory makes
 * it). 0, or -1 on a malformed shape. */
static int fillShape(Entry *e, int j, PyObject *shape) {
  if (!shape || shape == Py_None)
    return 0;
  PyObject *sizes = PyTuple_GetItem(shape, 0);
  PyObject *strides = PyTuple_GetItem(shape, 1);
  Py_ssize_t nd = sizes ? PyTuple_Size(sizes) : -1;
  if (nd < 0 || nd > kMaxDims || PyTuple_Size(shape) != 5 ||
      !strides || PyTuple_Size(strides) != nd)
    return -1;
  e->shape[j].ndim = (int)nd;
  for (Py_ssize_t d = 0; d < nd; ++d) {
    e->shape[j].sizes[d] = PyLong_AsLongLong(PyTuple_GetItem(sizes, d));
    e->shape[j].strides[d] = PyLong_AsLongLong(PyTuple_GetItem(strides, d));
  }
  e->shape[j].dtype = (int32_t)PyLong_AsLong(PyTuple_GetItem(shape, 2));
  e->shape[j].deviceType = (int32_t)PyLong_AsLong(PyTuple_GetItem(shape, 3));
  e->shape[j].deviceIndex = (int32_t)PyLong_AsLong(PyTuple_GetItem(shape, 4));
  if (PyErr_Occurred())
    return -1;
  e->shape[j].set = 1;
  return 0;
}

static int fillOuts(Entry *e, PyObject *outs) {
  e->numOuts = (int)PyTuple_Size(outs);
  if (e->numOuts < 0 || e->numOuts > kMaxOuts)
    return -1;
  for (int j = 0; j < e->numOuts; ++j) {
    /* (argument, in place, make, like, shape): Entry's fields */
    PyObject *spec = PyTuple_GetItem(outs, j);
    long arg = spec ? PyLong_AsLong(PyTuple_GetItem(spec, 0)) : -1;
    PyObject *inPlace = arg >= 0 ? PyTuple_GetItem(spec, 1) : NULL;
    PyObject *make = inPlace ? PyTuple_GetItem(spec, 2) : NULL;
    PyObject *like = make ? PyTuple_GetItem(spec, 3) : NULL;
    if (arg >= kMaxArgs || !like)
      return -1;
    e->outArg[j] = (int8_t)arg;
    e->inPlace[j] = (int8_t)(inPlace == Py_True);
    e->likeArg[j] = (int8_t)(like == Py_True);
    if (e->inPlace[j])
      continue; /* the caller's tensor: nothing to allocate */
    if (!PyCallable_Check(make) ||
        fillShape(e, j, PyTuple_Size(spec) > 4 ? PyTuple_GetItem(spec, 4) : NULL))
      return -1;
    e->make[j] = Py_NewRef(make);
  }
  return 0;
}

/* entry(prepared, launch, slots, outs, verified) -> a launcher site's C
 * part; entry(None, None, (), (), refused=True) -> a refusal's. */
static PyObject *entry(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *prepared, *launch, *slots, *outs;
  int verified, refusal = 0;
  if (!PyArg_ParseTuple(args, "OOO!O!p|p", &prepared, &launch, &PyTuple_Type,
                        &slots, &PyTuple_Type, &outs, &verified, &refusal))
    return NULL;
  Entry *e = PyMem_Calloc(1, sizeof *e);
  if (!e)
    return PyErr_NoMemory();
  e->refusal = refusal;
  e->verified = verified;
  e->numSlots = (int)PyTuple_Size(slots);
  int bad = !api || e->numSlots > kMaxSlots ||
            (!refusal && (fillOuts(e, outs) != 0 || prepared == Py_None));
  for (int s = 0; !bad && s < e->numSlots; ++s) {
    long v = PyLong_AsLong(PyTuple_GetItem(slots, s));
    bad = (v == -1 && PyErr_Occurred()) || v < -kMaxOuts || v >= kMaxArgs ||
          (v < 0 && -v - 1 >= e->numOuts);
    e->slot[s] = (int8_t)v;
  }
  if (!bad && !refusal) {
    e->prepared = PyLong_AsVoidPtr(prepared);
    e->launch = (BfLaunch)PyLong_AsVoidPtr(launch);
    bad = !e->prepared || !e->launch;
  }
  if (bad) {
    dropEntry(e);
    if (!PyErr_Occurred())
      PyErr_SetString(PyExc_ValueError, "bitfold fast entry: bad layout");
    return NULL;
  }
  PyObject *c = PyCapsule_New(e, ENTRY_CAPSULE, freeEntry);
  if (!c) {
    dropEntry(e);
  }
  return c;
}

/* init(exchange_api_capsule, Tensor, Parameter, is_grad_enabled) -> None. */
static PyObject *init(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *capsule, *t, *p, *g;
  if (!PyArg_ParseTuple(args, "OOOO", &capsule, &t, &p, &g))
    return NULL;
  const BfExchangeApi *x = PyCapsule_GetPointer(capsule, "dlpack_exchange_api");
  if (!x)
    return NULL;
  if (x->header.version.major != 1 || !x->dltensor_from_py_object_no_sync ||
      !x->current_work_stream) {
    PyErr_Format(PyExc_RuntimeError,
                 "DLPack exchange API %u.%u without the functions bitfold uses",
                 x->header.version.major, x->header.version.minor);
    return NULL;
  }
  PyObject **slots[3] = {&tensorType, &parameterType, &gradEnabled};
  PyObject *given[3] = {t, p, g};
  for (int i = 0; i < 3; ++i) {
    PyObject *old = *slots[i];
    *slots[i] = Py_NewRef(given[i]);
    Py_XDECREF(old);
  }
  api = x;
  Py_RETURN_NONE;
}

/* init_empty(empty_strided, get_data_ptr, delete, wrap) -> None: torch's C
 * allocation (function addresses; all four 0 unbinds it). */
static PyObject *initEmpty(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *f[4];
  if (!PyArg_ParseTuple(args, "OOOO", &f[0], &f[1], &f[2], &f[3]))
    return NULL;
  void *p[4];
  int bound = 0;
  for (int i = 0; i < 4; ++i) {
    p[i] = f[i] == Py_None ? NULL : PyLong_AsVoidPtr(f[i]);
    if (PyErr_Occurred())
      return NULL;
    bound += p[i] != NULL;
  }
  if (bound != 0 && bound != 4) {
    PyErr_SetString(PyExc_ValueError, "init_empty: all four functions or none");
    return NULL;
  }
  shim.empty = (BfEmptyStrided)p[0];
  shim.data = (BfDataPtr)p[1];
  shim.drop = (BfDelete)p[2];
  shim.wrap = (BfWrap)p[3];
  Py_RETURN_NONE;
}

static PyObject *shimOutputs(PyObject *self, PyObject *unused) {
  (void)self;
  (void)unused;
  return PyLong_FromLongLong(shimMade);
}

static PyObject *servedCalls(PyObject *self, PyObject *unused) {
  (void)self;
  (void)unused;
  return PyLong_FromLongLong(served);
}

static PyMethodDef methods[] = {
    {"init", init, METH_VARARGS, "Binds the DLPack exchange API and torch."},
    {"run", (PyCFunction)(void (*)(void))run, METH_FASTCALL,
     "A warm call: its result, or None."},
    {"key", key, METH_O, "The site key of an argument tuple, or None."},
    {"entry", entry, METH_VARARGS, "A site's C part (a capsule)."},
    {"served", servedCalls, METH_NOARGS, "Warm calls served here so far."},
    {"init_empty", initEmpty, METH_VARARGS,
     "Binds torch's C allocation (function addresses, or four None)."},
    {"shim_outputs", shimOutputs, METH_NOARGS,
     "Outputs made through torch's C allocation so far."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_bitfold_fast",
                                    "bitfold.torch's warm calls in C.", -1,
                                    methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__bitfold_fast(void) {
  sRequiresGrad = PyUnicode_InternFromString("requires_grad");
  sLaunches = PyUnicode_InternFromString("launches");
  sIsNeg = PyUnicode_InternFromString("is_neg");
  sOne = PyLong_FromLong(1);
  if (!sRequiresGrad || !sLaunches || !sIsNeg || !sOne)
    return NULL;
  return PyModule_Create(&module);
}
