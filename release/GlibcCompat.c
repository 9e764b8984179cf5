/* Binds the release library to glibc 2.28's symbol versions (manylinux_2_28).

   The LLVM/MLIR archives, libstdc++.a and libgcc_eh.a were compiled against
   this machine's glibc (2.36), so their calls name the newest version of a
   symbol: pthread_create@GLIBC_2.34, exp@GLIBC_2.29, stat@GLIBC_2.33,
   arc4random@GLIBC_2.36, ... A definition in the link itself wins over
   libc.so's, so each such symbol is defined here, hidden (the version
   script exports bitfold_* only), either forwarding to the old version of
   the same function (.symver) or, where glibc 2.28 has no such symbol,
   implemented with what 2.28 has. release/check-glibc.py fails the build
   when the linked library still names a version above its tag; a symbol it
   reports belongs here. docs/wheel.md says why this way. */
#define _GNU_SOURCE
#include <errno.h>
#include <dlfcn.h>
#include <link.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/random.h>
#include <sys/types.h>

#define BF_HIDDEN __attribute__((visibility("hidden")))

/* name -> name@ver: a local definition calling the old version. */
#define BF_FORWARD(ret, name, ver, params, args)                               \
  ret bf_old_##name params;                                                    \
  __asm__(".symver bf_old_" #name "," #name "@" ver);                          \
  BF_HIDDEN ret name params { return bf_old_##name args; }

typedef void *vp;
/* libpthread and libdl moved into libc in 2.34 under new versions. */
BF_FORWARD(int, pthread_create, "GLIBC_2.2.5", (vp t, vp a, vp (*f)(vp), vp x), (t, a, f, x))
BF_FORWARD(int, pthread_detach, "GLIBC_2.2.5", (unsigned long t), (t))
BF_FORWARD(int, pthread_join, "GLIBC_2.2.5", (unsigned long t, vp *r), (t, r))
BF_FORWARD(int, pthread_attr_setstacksize, "GLIBC_2.2.5", (vp a, size_t s), (a, s))
BF_FORWARD(int, pthread_key_create, "GLIBC_2.2.5", (unsigned *k, void (*d)(vp)), (k, d))
BF_FORWARD(int, __pthread_key_create, "GLIBC_2.2.5", (unsigned *k, void (*d)(vp)), (k, d))
BF_FORWARD(int, pthread_key_delete, "GLIBC_2.2.5", (unsigned k), (k))
BF_FORWARD(vp, pthread_getspecific, "GLIBC_2.2.5", (unsigned k), (k))
BF_FORWARD(int, pthread_setspecific, "GLIBC_2.2.5", (unsigned k, const void *v), (k, v))
BF_FORWARD(int, pthread_once, "GLIBC_2.2.5", (int *o, void (*f)(void)), (o, f))
BF_FORWARD(int, pthread_rwlock_rdlock, "GLIBC_2.2.5", (vp l), (l))
BF_FORWARD(int, pthread_rwlock_wrlock, "GLIBC_2.2.5", (vp l), (l))
BF_FORWARD(int, pthread_rwlock_unlock, "GLIBC_2.2.5", (vp l), (l))
BF_FORWARD(int, pthread_sigmask, "GLIBC_2.2.5", (int h, const void *s, vp o), (h, s, o))
BF_FORWARD(int, pthread_getname_np, "GLIBC_2.12", (unsigned long t, char *n, size_t l), (t, n, l))
BF_FORWARD(int, pthread_setname_np, "GLIBC_2.12", (unsigned long t, const char *n), (t, n))
/* The PTX Compiler API's archive (libbitfold-ptxc.so) also uses these. */
BF_FORWARD(int, pthread_kill, "GLIBC_2.2.5", (unsigned long t, int s), (t, s))
BF_FORWARD(int, pthread_mutexattr_init, "GLIBC_2.2.5", (vp a), (a))
BF_FORWARD(int, pthread_mutexattr_destroy, "GLIBC_2.2.5", (vp a), (a))
BF_FORWARD(int, pthread_mutexattr_settype, "GLIBC_2.2.5", (vp a, int t), (a, t))
BF_FORWARD(int, sem_init, "GLIBC_2.2.5", (vp s, int p, unsigned v), (s, p, v))
BF_FORWARD(int, sem_destroy, "GLIBC_2.2.5", (vp s), (s))
BF_FORWARD(int, sem_wait, "GLIBC_2.2.5", (vp s), (s))
BF_FORWARD(int, sem_trywait, "GLIBC_2.2.5", (vp s), (s))
BF_FORWARD(int, sem_post, "GLIBC_2.2.5", (vp s), (s))
BF_FORWARD(vp, dlopen, "GLIBC_2.2.5", (const char *f, int m), (f, m))
BF_FORWARD(vp, dlsym, "GLIBC_2.2.5", (vp h, const char *s), (h, s))
BF_FORWARD(int, dlclose, "GLIBC_2.2.5", (vp h), (h))
BF_FORWARD(char *, dlerror, "GLIBC_2.2.5", (void), ())
BF_FORWARD(int, dladdr, "GLIBC_2.2.5", (const void *a, Dl_info *i), (a, i))
BF_FORWARD(int, shm_open, "GLIBC_2.2.5", (const char *n, int f, unsigned m), (n, f, m))
BF_FORWARD(int, shm_unlink, "GLIBC_2.2.5", (const char *n), (n))
/* 2.29 replaced these libm entry points (no SVID error handling). */
BF_FORWARD(double, exp, "GLIBC_2.2.5", (double x), (x))
BF_FORWARD(double, exp2, "GLIBC_2.2.5", (double x), (x))
BF_FORWARD(double, log, "GLIBC_2.2.5", (double x), (x))
BF_FORWARD(double, log2, "GLIBC_2.2.5", (double x), (x))
BF_FORWARD(double, pow, "GLIBC_2.2.5", (double x, double y), (x, y))

/* Before 2.33 the stat family were inline calls of __xstat & co. */
#define BF_STAT_VER 1 /* _STAT_VER_LINUX on x86_64 */
int __xstat(int v, const char *p, vp b);
int __lxstat(int v, const char *p, vp b);
int __fxstat(int v, int fd, vp b);
int __fxstatat(int v, int d, const char *p, vp b, int f);
int __xmknod(int v, const char *p, unsigned m, dev_t *d);
BF_HIDDEN int stat(const char *p, vp b) { return __xstat(BF_STAT_VER, p, b); }
BF_HIDDEN int stat64(const char *p, vp b) { return __xstat(BF_STAT_VER, p, b); }
BF_HIDDEN int lstat(const char *p, vp b) { return __lxstat(BF_STAT_VER, p, b); }
BF_HIDDEN int lstat64(const char *p, vp b) { return __lxstat(BF_STAT_VER, p, b); }
BF_HIDDEN int fstat(int fd, vp b) { return __fxstat(BF_STAT_VER, fd, b); }
BF_HIDDEN int fstat64(int fd, vp b) { return __fxstat(BF_STAT_VER, fd, b); }
BF_HIDDEN int fstatat(int d, const char *p, vp b, int f) {
  return __fxstatat(BF_STAT_VER, d, p, b, f);
}
BF_HIDDEN int fstatat64(int d, const char *p, vp b, int f) {
  return __fxstatat(BF_STAT_VER, d, p, b, f);
}
BF_HIDDEN int mknod(const char *p, unsigned m, dev_t d) { return __xmknod(0, p, m, &d); }

/* libstdc++ skips atomics when this is nonzero; 0 (never assume a single
   thread) is always correct, only slower in single-threaded programs. */
BF_HIDDEN char __libc_single_threaded = 0;

/* LLVM's Process::GetMallocUsage. */
struct bf_mallinfo { int f[10]; };
struct bf_mallinfo2 { size_t f[10]; };
struct bf_mallinfo mallinfo(void);
BF_HIDDEN struct bf_mallinfo2 mallinfo2(void) {
  struct bf_mallinfo m = mallinfo();
  struct bf_mallinfo2 r;
  for (int i = 0; i < 10; ++i)
    r.f[i] = (size_t)(unsigned)m.f[i];
  return r;
}

/* LLVM's random seed and std::random_device. */
BF_HIDDEN uint32_t arc4random(void) {
  uint32_t v = 0;
  size_t got = 0;
  while (got < sizeof v) {
    ssize_t n = getrandom((char *)&v + got, sizeof v - got, 0);
    if (n > 0)
      got += (size_t)n;
    else if (errno != EINTR)
      break;
  }
  return v;
}

#ifdef DLFO_STRUCT_HAS_EH_DBASE /* glibc >= 2.35 headers: the unwinder uses it */
/* libgcc's unwinder (GCC 12) finds an address's .eh_frame_hdr with this
   2.35 function and does not fall back when it fails, so it is implemented
   over dl_iterate_phdr, which is what older unwinders used. */
struct bf_find { uintptr_t pc; struct dl_find_object *out; int found; };

static int bf_find_phdr(struct dl_phdr_info *info, size_t size, void *data) {
  struct bf_find *q = data;
  uintptr_t lo = UINTPTR_MAX, hi = 0, eh = 0;
  int hit = 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    uintptr_t start = info->dlpi_addr + ph->p_vaddr;
    if (ph->p_type == PT_GNU_EH_FRAME)
      eh = start;
    if (ph->p_type != PT_LOAD)
      continue;
    if (start < lo)
      lo = start;
    if (start + ph->p_memsz > hi)
      hi = start + ph->p_memsz;
    if (q->pc >= start && q->pc < start + ph->p_memsz)
      hit = 1;
  }
  if (!hit)
    return 0;
  memset(q->out, 0, sizeof *q->out);
  q->out->dlfo_map_start = (void *)lo;
  q->out->dlfo_map_end = (void *)hi;
  q->out->dlfo_eh_frame = (void *)eh;
  q->found = 1;
  return 1;
}

BF_HIDDEN int _dl_find_object(void *pc, struct dl_find_object *out) {
  struct bf_find q = {(uintptr_t)pc, out, 0};
  dl_iterate_phdr(bf_find_phdr, &q);
  return q.found ? 0 : -1;
}
#endif
