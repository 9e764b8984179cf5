/*===- bitfold.h - bitfold's C API ---------------------------------------===*
 *
 * Stable C ABI of libbitfold.so: look up a registered kernel, launch it on
 * DLPack tensors (DLTensor) on the caller's CUDA stream. Kernels are JIT
 * compiled for the shape class they meet (column count, alignments, 32- or
 * 64-bit indexing), cached in memory and on disk, and launched through the
 * CUDA driver, which is loaded at run time (libcuda is never linked).
 *
 * Errors: every function returns a bitfold_status; nothing aborts the
 * process and no C++ exception crosses this API. bitfold_last_error()
 * returns the message of the most recent call on the calling thread (empty
 * after a call that succeeded).
 *
 * Thread safety: a runtime and its kernels may be used from many threads at
 * once (launch, lookup); only bitfold_runtime_destroy must not race with
 * other calls on the same runtime.
 *
 *===----------------------------------------------------------------------===*/
#ifndef BITFOLD_H
#define BITFOLD_H

#include <dlpack/dlpack.h>

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define BITFOLD_API
#else
#define BITFOLD_API __attribute__((visibility("default")))
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef enum bitfold_status {
  BITFOLD_SUCCESS = 0,
  /** A NULL handle or pointer, malformed parameter text, or the wrong
   *  number of tensors or scalars. */
  BITFOLD_ERROR_INVALID_ARGUMENT = 1,
  /** No registered kernel of that name. */
  BITFOLD_ERROR_UNKNOWN_TEMPLATE = 2,
  /** A tensor's dtype is not the one its operand needs. */
  BITFOLD_ERROR_DTYPE = 3,
  /** Tensor shapes disagree (rows, columns, batches), or a shape the
   *  template's reference would not run this way (e.g. D % 4 != 0). */
  BITFOLD_ERROR_SHAPE = 4,
  /** Strides the kernel cannot address (last dim not packed, rows not
   *  mergeable, overlapping rows, not dense channels-last). */
  BITFOLD_ERROR_STRIDE = 5,
  /** A pointer not aligned as the kernel or its reference requires. */
  BITFOLD_ERROR_ALIGNMENT = 6,
  /** Host memory, tensors on different devices, or a missing device. */
  BITFOLD_ERROR_DEVICE = 7,
  /** Beyond what bitfold supports (sizes, grid limits, in-place use). */
  BITFOLD_ERROR_UNSUPPORTED = 8,
  /** Code generation failed. */
  BITFOLD_ERROR_COMPILE = 9,
  /** The CUDA driver cannot be loaded or initialised; the message says why
   *  (the dlopen error text, a missing entry point, cuInit's result). */
  BITFOLD_ERROR_NO_DRIVER = 10,
  /** A CUDA driver call failed (module load, launch ...). */
  BITFOLD_ERROR_CUDA = 11,
  /** A bug in bitfold. */
  BITFOLD_ERROR_INTERNAL = 12,
  /** Not an error: async compile mode (bitfold_runtime_set_async_compile)
   *  and the launch's shape class is still compiling in the background.
   *  Nothing was launched; serve the call another way and launch again
   *  later. */
  BITFOLD_STATUS_NOT_READY = 13
} bitfold_status;

/** "BITFOLD_ERROR_SHAPE" etc. */
BITFOLD_API const char *bitfold_status_name(bitfold_status status);

/** Message of the most recent bitfold call on this thread; "" after a
 *  success. Valid until the next bitfold call on this thread. */
BITFOLD_API const char *bitfold_last_error(void);

/** The library's version, e.g. "0.1.0". */
BITFOLD_API const char *bitfold_version(void);

/** Names of the registered (stock and user) kernels, i in
 *  [0, bitfold_num_registered_kernels()); NULL outside. */
BITFOLD_API int bitfold_num_registered_kernels(void);
BITFOLD_API const char *bitfold_registered_kernel_name(int i);

typedef struct bitfold_runtime bitfold_runtime;
typedef struct bitfold_kernel bitfold_kernel;

typedef struct bitfold_runtime_options {
  /** Disk cache directory; NULL: $BITFOLD_CACHE_DIR, else
   *  $XDG_CACHE_HOME/bitfold, else ~/.cache/bitfold. */
  const char *cache_dir;
  /** 0: cache in memory only. Default 1 ($BITFOLD_DISK_CACHE=0 turns it
   *  off too). */
  int disk_cache;
  /** Receives warnings (e.g. a corrupt cache entry was rebuilt, the cache
   *  directory is read-only). NULL: printed to stderr unless
   *  $BITFOLD_QUIET=1. */
  void (*warning)(const char *message, void *user);
  void *warning_user;
  /** Tune DB file written by `bitfold tune` (DIR/tune-db.json). The first
   *  launch of a shape class uses the DB's winner when it was tuned on this
   *  GPU model with this bitfold, LLVM and PTX toolchain; otherwise the
   *  default config (an entry tuned elsewhere is warned about once and not
   *  used). Nothing is ever tuned or waited for at launch. A missing file
   *  is an empty DB; an unreadable one is warned about and ignored.
   *  NULL: $BITFOLD_TUNE_DB; "" (or NULL with the variable unset): none.
   *  (Added in 0.1: appended, so callers must fill the struct with
   *  bitfold_runtime_options_init.) */
  const char *tune_db;
  /* The fields below were appended in 0.2 (fill the struct with
   * bitfold_runtime_options_init). */
  /** Threads compiling prewarmed shapes (bitfold_prewarm) in the
   *  background. 0 (default): min(4, hardware threads). */
  int compile_threads;
  /** Byte budget of the disk cache's kernel entries: a write that would
   *  take them over it first removes the least recently used entries.
   *  -1 (default): $BITFOLD_CACHE_MAX_BYTES, else 1 GiB; 0: unlimited. */
  int64_t cache_max_bytes;
  /** What a shape class missing from the tune DB gets (needs a tune DB
   *  file, tune_db or $BITFOLD_TUNE_DB, to record winners in):
   *  BITFOLD_TUNE_OFF (default): the heuristic default config, nothing is
   *  tuned; BITFOLD_TUNE_BACKGROUND: the default config at once while its
   *  configs are timed on a background thread on the same GPU, then the
   *  winner (written to the tune DB file atomically); BITFOLD_TUNE_NOW: the
   *  first launch of the class tunes, then launches the winner. Every
   *  config gives the same bits: only speed changes. A tune times on a
   *  stream of its own and leaves a caller's CUDA graph capture valid
   *  (with NOW inside a capture, only the winner's launch is captured). */
  int tune_on_miss;
  /** Wall time all tunes of this runtime may take together, in seconds;
   *  once spent, missed classes get the default. Default 60; <= 0:
   *  unlimited. */
  double tune_budget_seconds;
} bitfold_runtime_options;

/** Values of bitfold_runtime_options.tune_on_miss. */
enum {
  BITFOLD_TUNE_OFF = 0,
  BITFOLD_TUNE_BACKGROUND = 1,
  BITFOLD_TUNE_NOW = 2
};

/** Fills `options` with the defaults. */
BITFOLD_API void bitfold_runtime_options_init(bitfold_runtime_options *options);

/** Creates a runtime. `options` may be NULL (defaults). Needs no GPU. */
BITFOLD_API bitfold_status
bitfold_runtime_create(const bitfold_runtime_options *options,
                       bitfold_runtime **out);

/** How the runtime's kernel cache answered so far: first launches of a
 *  shape class either hit memory, read the disk cache, or compiled. Warm
 *  launches do not touch the cache and are not counted. */
typedef struct bitfold_cache_stats {
  uint64_t memory_hits;
  uint64_t disk_hits;
  uint64_t compiles;
  uint64_t compile_failures;
} bitfold_cache_stats;

/** Fills `out` with the runtime's cache counters. */
BITFOLD_API bitfold_status bitfold_runtime_cache_stats(bitfold_runtime *runtime,
                                                       bitfold_cache_stats *out);

/** Progress of a runtime's prewarm compiles (bitfold_prewarm). */
typedef struct bitfold_prewarm_status {
  uint64_t pending; /**< queued or compiling */
  uint64_t done;    /**< finished (compiled, or found in a cache), failed or not */
  uint64_t failed;  /**< finished with an error */
} bitfold_prewarm_status;

/** Fills `out` with the runtime's prewarm progress; with `wait` = 1, first
 *  blocks until nothing is pending. Returns BITFOLD_ERROR_COMPILE (out
 *  filled, bitfold_last_error() the first failure's message) when a
 *  prewarm compile has failed, else BITFOLD_SUCCESS. */
BITFOLD_API bitfold_status
bitfold_runtime_prewarm_status(bitfold_runtime *runtime, int wait,
                               bitfold_prewarm_status *out);

/** Asynchronous compile mode, per runtime; off by default (and for the
 *  CLI). With `on` = 1, a launch whose shape class is not compiled yet
 *  queues the compile on the compile threads (compile_threads) and
 *  returns BITFOLD_STATUS_NOT_READY at once, without launching; once it
 *  is compiled, launches of the class run it. Concurrent first launches
 *  of one class queue one compile. A compile that fails in the background
 *  is recorded once (bitfold_runtime_prewarm_status counts these compiles
 *  as prewarm compiles) and every later launch of the class returns its
 *  error. Turning the mode on also starts the toolchain's set-up in the
 *  background (LLVM, nvJitLink's load and first link), so the first
 *  compile of the process costs no more than any other. Destroying the
 *  runtime skips queued compiles and waits for running ones. */
BITFOLD_API bitfold_status
bitfold_runtime_set_async_compile(bitfold_runtime *runtime, int on);

/** Quick-first mode, per runtime; off by default. With `on` = 1, a shape
 *  class whose chosen config (tune DB or default) is in neither the memory
 *  nor the disk cache first compiles the config whose kernel compiles
 *  fastest (the shortest PTX) and launches that; the chosen config then
 *  compiles on the compile threads and serves every launch after it is
 *  ready. Every config gives the same bits, so only speed changes. A
 *  synchronous first launch waits for the quick compile only; in async
 *  compile mode the class is served sooner. The background compiles count
 *  as prewarm compiles (bitfold_runtime_prewarm_status); if one fails the
 *  quick kernel keeps serving. Pinned configs and prewarmed shapes compile
 *  the chosen config only. Turning the mode on also starts the toolchain's
 *  set-up in the background, as async compile mode does. */
BITFOLD_API bitfold_status
bitfold_runtime_set_quick_first(bitfold_runtime *runtime, int on);

/** Destroys a runtime, its kernels and their loaded modules. NULL is a
 *  no-op. Launched work is not waited for: synchronise first. */
BITFOLD_API void bitfold_runtime_destroy(bitfold_runtime *runtime);

/** Looks up a registered kernel by name, with its parameters as text
 *  ("key=value" separated by spaces or commas; NULL or "" = defaults):
 *    dtype=bf16|f16|f32          all stock kernels (default bf16)
 *    bias_dtype=bf16|f16|f32     conv_bias (default: dtype)
 *    residual=0|1                conv_bias (default 0)
 *    gate=full|per_batch|global  residual_gate (default full)
 *  The kernel is owned by the runtime (valid until it is destroyed); the
 *  same name and parameters give the same kernel. */
BITFOLD_API bitfold_status
bitfold_kernel_from_registry(bitfold_runtime *runtime, const char *name,
                             const char *params, bitfold_kernel **out);

/** Creates a kernel from a program in the kernel text format
 *  (docs/kernel-format.md), `length` bytes of `text` (no NUL needed). The
 *  program is parsed, verified and registered under its name as a user
 *  kernel; the kernel then launches exactly like a stock kernel (per-shape
 *  specialisation, memory and disk caches, tune DB) and takes no
 *  parameters. Errors (BITFOLD_ERROR_INVALID_ARGUMENT): a malformed text
 *  ("line:column: expected X, found Y"), a program the verifier rejects
 *  (its message names the node), a name that is a stock kernel's, or a
 *  different program under a name already registered (the same program
 *  again gives the same kernel). Nothing is registered or cached for a
 *  program that fails. The kernel is owned by the runtime. */
BITFOLD_API bitfold_status bitfold_kernel_from_source(bitfold_runtime *runtime,
                                                      const char *text,
                                                      size_t length,
                                                      bitfold_kernel **out);

/** The tensors a launch takes, in order: for each tensor group (q and k of
 *  qk_layernorm are two groups), the kernel's operands in declaration
 *  order, inputs then outputs. Names are the operands' ("x", "scale",
 *  "y"...). */
BITFOLD_API int bitfold_kernel_num_tensors(const bitfold_kernel *kernel);
BITFOLD_API const char *bitfold_kernel_tensor_name(const bitfold_kernel *kernel,
                                                   int i);
/** 1 if tensor i is written by the kernel. */
BITFOLD_API int bitfold_kernel_tensor_is_output(const bitfold_kernel *kernel,
                                                int i);
BITFOLD_API int bitfold_kernel_num_groups(const bitfold_kernel *kernel);
BITFOLD_API int bitfold_kernel_num_scalars(const bitfold_kernel *kernel);
BITFOLD_API const char *bitfold_kernel_scalar_name(const bitfold_kernel *kernel,
                                                   int i);

/** Pins the tile configuration ("r1.t128.v8.p1") used for this kernel's
 *  later specialisations; NULL restores the default choice. Configs never
 *  change results, only speed. */
BITFOLD_API bitfold_status bitfold_kernel_set_config(bitfold_kernel *kernel,
                                                     const char *config);

/** Programmatic dependent launch (PDL, CUDA's programmatic stream
 *  serialization) for this kernel's later launches: 1 on, 0 off (default).
 *  A PDL launch may begin while the previous kernel on the stream is still
 *  running; the kernel waits on the GPU, before its first memory access,
 *  until that kernel has completed and its writes are visible, so results
 *  never change. It hides part of the gap between back-to-back kernels
 *  (launch latency, the predecessor's last wave; 0.4-0.6 us per launch on
 *  an H200 for the stock kernels) and also applies inside CUDA graph
 *  capture. PDL kernels are compiled with grid dependency control, a
 *  specialisation (and cache entry) of their own: the first PDL launch of
 *  a shape class compiles or loads it. Kernels of many tiny CTAs can run
 *  slower that way (bench/perf-notes.md). Where the GPU is older than
 *  sm_90 or the driver has no cuLaunchKernelEx, launches stay plain. */
BITFOLD_API bitfold_status bitfold_kernel_set_pdl(bitfold_kernel *kernel,
                                                  int enable);

/** Compiles, in the background, what launches of `kernel` on dense
 *  tensors of the given shapes on CUDA device `device` need (each shape
 *  class's specialisation, from the disk cache when it is there), on the
 *  runtime's compile threads (bitfold_runtime_options.compile_threads);
 *  returns once they are queued. The shapes are `num_shapes` lists of the
 *  first tensor's dims (as `bitfold run --shape` takes them), concatenated
 *  in `dims`, shape i having ndims[i] entries. Dense tensors from a
 *  caching allocator (aligned, packed rows) fall in the same shape class
 *  as these. A launch of a shape still compiling waits for that compile;
 *  nothing is compiled twice; launches of shapes already compiled never
 *  wait. Errors (nothing queued): NULL arrays, ndims out of range, a shape
 *  the template rejects (BITFOLD_ERROR_SHAPE). Progress and compile
 *  errors: bitfold_runtime_prewarm_status. The device's driver is needed
 *  (its arch chooses the code). */
BITFOLD_API bitfold_status bitfold_prewarm(bitfold_kernel *kernel,
                                           int num_shapes,
                                           const int64_t *dims,
                                           const int *ndims, int device);

/** Launches `kernel` on `stream` (a CUstream; NULL = the legacy default
 *  stream) in the current CUDA context when it belongs to the tensors'
 *  device, else in that device's primary context.
 *
 *  `tensors` (num_tensors of them, see bitfold_kernel_num_tensors) must be
 *  CUDA device tensors (kDLCUDA or kDLCUDAManaged) on one device, of the
 *  operands' dtypes, with the last dimension packed; byte_offset is
 *  honoured. Row-major operands: rows = product of the leading dims, which
 *  must merge into one row stride >= the column count (a chunk of a wider
 *  tensor is fine), or, for per-element operands, into two: inner rows one
 *  stride apart in groups another stride apart (a fused QKV projection's
 *  q view (B, S, H, D): heads D apart, tokens 3*H*D apart), groups not
 *  overlapping, the same two strides in every group of a launch; such a
 *  view is a shape class (a kernel) of its own. Channels-last operands: 4-D (N,C,H,W) or 5-D
 *  (N,C,D,H,W), dense channels-last; columns = C. Per-batch operands have
 *  B rows, B dividing the rows of the per-element operands (S = rows / B);
 *  per-column operands hold exactly one row of `columns` values.
 *
 *  `scalars` (num_scalars floats, see bitfold_kernel_num_scalars) e.g. eps.
 *
 *  The first launch of a shape class compiles (or loads from the cache);
 *  later ones are a hash lookup and one cuLaunchKernel. Returns when the
 *  launch is queued. Inside a CUDA graph capture the launch is captured;
 *  a first launch loads its module with the thread's capture mode relaxed,
 *  so it leaves a capture on this or any other thread valid. */
BITFOLD_API bitfold_status bitfold_launch(bitfold_kernel *kernel,
                                          const DLTensor *const *tensors,
                                          int num_tensors,
                                          const float *scalars,
                                          int num_scalars, void *stream);

/** bitfold_launch without DLTensor structs, for callers where building them
 *  costs more than the launch (Python through ctypes). `data` holds the
 *  num_tensors addresses (byte_offset 0); `meta` (num_meta_words int64)
 *  holds, for each tensor in turn:
 *    dtype     DLDataType as code | bits << 8 | lanes << 16, and the CUDA
 *              device ordinal << 32 (kDLCUDA)
 *    ndim
 *    shape     ndim sizes
 *    strides   ndim strides in elements
 *  so tensor i takes 2 + 2 * ndim words, and num_meta_words must be their
 *  sum. The metadata of a call site rarely changes while its addresses do,
 *  so a caller can keep `meta` and rebuild only `data`. Each tensor is then
 *  validated and launched exactly as by bitfold_launch (same statuses and
 *  messages); malformed arrays give BITFOLD_ERROR_INVALID_ARGUMENT. Warm
 *  launches allocate nothing. (Added in 0.1.) */
#define BITFOLD_RAW_MAX_TENSORS 16
BITFOLD_API bitfold_status
bitfold_launch_raw(bitfold_kernel *kernel, int num_tensors,
                   const void *const *data, const int64_t *meta,
                   int num_meta_words, const float *scalars, int num_scalars,
                   void *stream);

/** A bitfold_launch_raw call with its metadata and scalars fixed: for a
 *  caller that launches one layout many times (bitfold.torch's warm calls)
 *  and pays per argument it passes (ctypes). bitfold_prepare_raw checks
 *  the arrays' form as bitfold_launch_raw does and copies them; it does
 *  not validate the tensors (no addresses yet). Each
 *  bitfold_launch_prepared then launches exactly as bitfold_launch_raw
 *  with the same kernel, metadata and scalars and these `data` addresses
 *  (every tensor validated, same statuses and messages: its first
 *  successful binding keeps the layouts' checks, later launches redo those
 *  that depend on the addresses); it allocates nothing, and one prepared
 *  launch may be used from many threads. The
 *  kernel (and its runtime) must outlive it. (Added in 0.1.) */
typedef struct bitfold_prepared bitfold_prepared;
BITFOLD_API bitfold_status
bitfold_prepare_raw(bitfold_kernel *kernel, int num_tensors,
                    const int64_t *meta, int num_meta_words,
                    const float *scalars, int num_scalars,
                    bitfold_prepared **out);
BITFOLD_API bitfold_status
bitfold_launch_prepared(const bitfold_prepared *prepared,
                        const void *const *data, void *stream);
/** Frees a prepared launch (NULL: nothing). */
BITFOLD_API void bitfold_prepared_destroy(bitfold_prepared *prepared);

/* Old names. Version 0.1 called a kernel a "template"; these stay exported
 * with the same behaviour (and the old function name in their error
 * messages) so programs built against 0.1 keep linking and running. New
 * code uses the names above (docs/architecture.md, "Names"). */
/** = bitfold_num_registered_kernels(). */
BITFOLD_API int bitfold_num_templates(void);
/** = bitfold_registered_kernel_name(i). */
BITFOLD_API const char *bitfold_template_name(int i);
/** = bitfold_kernel_from_registry(runtime, name, params, out). */
BITFOLD_API bitfold_status bitfold_template(bitfold_runtime *runtime,
                                            const char *name,
                                            const char *params,
                                            bitfold_kernel **out);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* BITFOLD_H */
