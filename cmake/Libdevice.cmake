# CUDA libdevice, the bitcode nvcc links for expf/logf/tanhf/erff. codegen
# embeds it (codegen/LinkLibdevice.cpp, .incbin) because a GPU host has
# no toolkit, and its hash enters every cache key (keys/CacheKey.cpp), so a
# build with another libdevice never reuses a cubin.
#   BITFOLD_LIBDEVICE_FILE    the bitcode's path (FindCUDAToolkit's root)
#   BITFOLD_LIBDEVICE_SHA256  its SHA-256, hex
# FindCUDAToolkit sets CUDAToolkit_LIBRARY_ROOT only in some layouts (not
# when it finds the toolkit without nvvm next to nvcc); the bin dir's parent
# is the root otherwise.
set(root ${CUDAToolkit_LIBRARY_ROOT})
if(NOT root)
  get_filename_component(root ${CUDAToolkit_BIN_DIR} DIRECTORY)
endif()
set(BITFOLD_LIBDEVICE_FILE ${root}/nvvm/libdevice/libdevice.10.bc)
if(NOT EXISTS ${BITFOLD_LIBDEVICE_FILE})
  message(FATAL_ERROR "bitfold: no libdevice at ${BITFOLD_LIBDEVICE_FILE} "
                      "(CUDA toolkit root: ${root})")
endif()
file(SHA256 ${BITFOLD_LIBDEVICE_FILE} BITFOLD_LIBDEVICE_SHA256)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
             ${BITFOLD_LIBDEVICE_FILE})
message(STATUS "bitfold: libdevice ${BITFOLD_LIBDEVICE_FILE} "
               "(sha256 ${BITFOLD_LIBDEVICE_SHA256})")
