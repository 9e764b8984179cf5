/* A C program using the INSTALLED bitfold package (find_package or
 * pkg-config). Without a driver ($BITFOLD_LIBCUDA points nowhere in the
 * test) it checks that the library loads, finds a template, rejects host
 * memory, and explains why it cannot launch. Exit 0 on the expected
 * outcomes. */
#include <bitfold/bitfold.h>

#include <stdio.h>
#include <string.h>

static int expect(bitfold_status got, bitfold_status want, const char *what) {
  if (got != want) {
    fprintf(stderr, "%s: got %s, want %s: %s\n", what, bitfold_status_name(got),
            bitfold_status_name(want), bitfold_last_error());
    return 1;
  }
  printf("%s: %s: %s\n", what, bitfold_status_name(got), bitfold_last_error());
  return 0;
}

int main(void) {
  bitfold_runtime *rt = NULL;
  bitfold_kernel *k = NULL;
  bitfold_runtime_options opts;
  int64_t xs[3] = {1, 8, 64}, bs[2] = {1, 64};
  DLTensor x, scale, shift, y;
  const DLTensor *ts[4];
  float eps = 1e-6f;
  int bad = 0;

  printf("bitfold %s, %d templates\n", bitfold_version(), bitfold_num_templates());
  bitfold_runtime_options_init(&opts);
  opts.disk_cache = 0;
  bad |= expect(bitfold_runtime_create(&opts, &rt), BITFOLD_SUCCESS, "create");
  bad |= expect(bitfold_template(rt, "ln_modulate", "dtype=bf16", &k),
                BITFOLD_SUCCESS, "template");
  if (bad)
    return 1;

  memset(&x, 0, sizeof x);
  x.data = (void *)(uintptr_t)0x10000000;
  x.device.device_type = kDLCUDA;
  x.ndim = 3;
  x.dtype.code = kDLBfloat;
  x.dtype.bits = 16;
  x.dtype.lanes = 1;
  x.shape = xs;
  y = x;
  y.data = (void *)(uintptr_t)0x40000000;
  scale = x;
  scale.ndim = 2;
  scale.shape = bs;
  scale.data = (void *)(uintptr_t)0x20000000;
  shift = scale;
  shift.data = (void *)(uintptr_t)0x30000000;
  ts[0] = &x, ts[1] = &scale, ts[2] = &shift, ts[3] = &y;

  x.device.device_type = kDLCPU;
  bad |= expect(bitfold_launch(k, ts, 4, &eps, 1, NULL), BITFOLD_ERROR_DEVICE,
                "host tensor");
  x.device.device_type = kDLCUDA;
  bad |= expect(bitfold_launch(k, ts, 4, &eps, 1, NULL),
                BITFOLD_ERROR_NO_DRIVER, "no driver");
  bitfold_runtime_destroy(rt);
  return bad;
}
