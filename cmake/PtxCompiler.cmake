# NVIDIA's PTX Compiler API (libnvptxcompiler_static.a): PTX -> cubin in
# process and whole-program. nvJitLink compiles PTX as relocatable code
# (ptxas -c), which costs 8-48 registers a thread on our kernels
# (docs/design-notes.md, "The cubin tool"). The library is wrapped in its
# own shared library, libbitfold-ptxc.so (codegen/PtxCompilerShim.cpp),
# which codegen loads with dlopen as it does nvJitLink: one 40 MB object
# instead of a copy in every binary that links codegen.
#
# Found in the CUDA toolkit (CUDA::nvptxcompiler_static), else under
# BITFOLD_PTX_COMPILER_ROOT (lib/, include/), else fetched there from PyPI
# (scripts/fetch-ptx-compiler.py, pinned wheel). Without it codegen uses
# nvJitLink; -DBITFOLD_PTX_COMPILER=OFF builds without it on purpose.
option(BITFOLD_PTX_COMPILER "Build libbitfold-ptxc.so (NVIDIA's PTX Compiler API)" ON)
set(BITFOLD_PTX_COMPILER_VERSION 13.0.88)
set(BITFOLD_PTX_COMPILER_SHA256
  7579fc2d9928030ee45626694a9062e02a691594c481bf2bbd46cdd090b33fa3)
set(BITFOLD_PTX_COMPILER_ROOT
  ${PROJECT_SOURCE_DIR}/.deps/nvptxcompiler-${BITFOLD_PTX_COMPILER_VERSION}
  CACHE PATH "where libnvptxcompiler_static.a is fetched to (lib/, include/)")

set(BITFOLD_PTX_COMPILER_FOUND OFF)
if(BITFOLD_PTX_COMPILER)
  set(lib "")
  if(TARGET CUDA::nvptxcompiler_static)
    get_target_property(lib CUDA::nvptxcompiler_static IMPORTED_LOCATION)
    set(inc ${CUDAToolkit_INCLUDE_DIRS})
    set(BITFOLD_PTX_COMPILER_ID "CUDA ${CUDAToolkit_VERSION}")
  endif()
  if(NOT lib OR NOT EXISTS "${lib}")
    set(lib ${BITFOLD_PTX_COMPILER_ROOT}/lib/libnvptxcompiler_static.a)
    set(inc ${BITFOLD_PTX_COMPILER_ROOT}/include)
    set(BITFOLD_PTX_COMPILER_ID "nvidia-nvptxcompiler ${BITFOLD_PTX_COMPILER_VERSION}")
    if(NOT EXISTS "${lib}")
      find_package(Python3 COMPONENTS Interpreter QUIET)
      if(Python3_Interpreter_FOUND)
        execute_process(
          COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/scripts/fetch-ptx-compiler.py
                  --version ${BITFOLD_PTX_COMPILER_VERSION}
                  --sha256 ${BITFOLD_PTX_COMPILER_SHA256}
                  --dest ${BITFOLD_PTX_COMPILER_ROOT}
          RESULT_VARIABLE rc)
      endif()
    endif()
  endif()
  if(EXISTS "${lib}")
    set(BITFOLD_PTX_COMPILER_FOUND ON)
    set(BITFOLD_PTX_COMPILER_LIB ${lib})
    set(BITFOLD_PTX_COMPILER_INCLUDE ${inc})
    message(STATUS "bitfold: PTX Compiler API ${BITFOLD_PTX_COMPILER_ID} (${lib})")
  else()
    message(WARNING "bitfold: no PTX Compiler API (libnvptxcompiler_static.a): "
      "kernels are assembled by nvJitLink, with more registers. Where pip can "
      "reach PyPI, reconfigure; else unpack the wheel nvidia-nvptxcompiler=="
      "${BITFOLD_PTX_COMPILER_VERSION} (its nvidia/cu13/lib and include) into "
      "${BITFOLD_PTX_COMPILER_ROOT}, or pass -DBITFOLD_PTX_COMPILER=OFF.")
  endif()
endif()
