//===- tests/runtime/AllocationCounter.h - Counting operator new -*- C++ -*-===//
//
// Replaces the global allocation functions of one test binary (include it
// from exactly one source file of it) to count heap allocations while
// `countAllocations` is set: the "warm launches allocate nothing" tests.
//
// Every plain form is replaced, the nothrow ones included, so that a pointer
// is always freed by the family that allocated it. Replacing only
// new(size_t) and delete(void*[, size_t]) was wrong under ASan: libasan
// defines the nothrow `operator new` itself (libstdc++'s would call the
// replaced new(size_t)), so std::stable_sort's temporary buffer
// (get_temporary_buffer: new(nothrow)) came from ASan's operator new and
// went back through the replaced sized delete, i.e. free(): ASan's
// alloc-dealloc-mismatch in runtime::pruneCacheDir. The array forms are
// left to the library: theirs call the replaced scalar forms.
//
//===----------------------------------------------------------------------===//

#ifndef BITFOLD_TESTS_RUNTIME_ALLOCATIONCOUNTER_H
#define BITFOLD_TESTS_RUNTIME_ALLOCATIONCOUNTER_H

#include <atomic>
#include <cstdlib>
#include <new>

namespace {

std::atomic<bool> countAllocations{false};
std::atomic<long> allocations{0};

void *countedAlloc(size_t n) noexcept {
  if (countAllocations.load(std::memory_order_relaxed))
    allocations.fetch_add(1, std::memory_order_relaxed);
  return std::malloc(n ? n : 1);
}

} // namespace

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void *operator new(size_t n) {
  if (void *p = countedAlloc(n))
    return p;
  throw std::bad_alloc();
}
void *operator new(size_t n, const std::nothrow_t &) noexcept {
  return countedAlloc(n);
}
void operator delete(void *p) noexcept { std::free(p); }
void operator delete(void *p, size_t) noexcept { std::free(p); }
void operator delete(void *p, const std::nothrow_t &) noexcept { std::free(p); }
#pragma GCC diagnostic pop

#endif
