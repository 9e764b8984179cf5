# The codegen revision: SHA-256 (first 16 hex digits) over the paths and
# contents of every source that decides a kernel's code (codegen/, dsl/,
# keys/), in the kernel cache key beside the version, so that a cache
# filled by another build of the same version misses instead of serving
# that build's code. Script mode, run at build time whenever one of those
# files changes:
#   cmake -DROOT=<source dir> -DOUT=<header> -P cmake/CodegenRevision.cmake
# The header is rewritten only when the revision changes.
file(GLOB_RECURSE files RELATIVE "${ROOT}" "${ROOT}/codegen/*" "${ROOT}/dsl/*"
     "${ROOT}/keys/*")
list(SORT files)
set(all "")
foreach(f IN LISTS files)
  if(f MATCHES "\\.md$")
    continue()
  endif()
  file(SHA256 "${ROOT}/${f}" h)
  string(APPEND all "${f} ${h}\n")
endforeach()
string(SHA256 rev "${all}")
string(SUBSTRING "${rev}" 0 16 rev)
set(text "#define BITFOLD_CODEGEN_REVISION \"${rev}\"\n")
set(old "")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUT}" "${text}")
endif()
