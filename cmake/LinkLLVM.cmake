# bitfold_link_llvm(<target> LLVM <components...> MLIR <libs...>)
#
# Dev flavour: the shared libLLVM.so / libMLIR.so Debian ships.
# Release flavour: static archives. The archive list comes from
# `llvm-config --link-static --libs`, never from the exported CMake targets:
# those pull libLLVM.so back in, and mixing it with static NVPTX archives
# aborts at start-up ("option registered more than once").
function(bitfold_link_llvm target)
  cmake_parse_arguments(ARG "" "" "LLVM;MLIR" ${ARGN})
  if(NOT BITFOLD_STATIC_LLVM)
    target_link_libraries(${target} PUBLIC LLVM)
    if(ARG_MLIR)
      target_link_libraries(${target} PUBLIC MLIR)
    endif()
    return()
  endif()
  find_program(BITFOLD_LLVM_CONFIG llvm-config HINTS ${LLVM_TOOLS_BINARY_DIR} REQUIRED NO_DEFAULT_PATH)
  message(STATUS "bitfold: static LLVM via ${BITFOLD_LLVM_CONFIG}")
  execute_process(COMMAND ${BITFOLD_LLVM_CONFIG} --link-static --libfiles ${ARG_LLVM}
                  OUTPUT_VARIABLE llvm_libs OUTPUT_STRIP_TRAILING_WHITESPACE
                  COMMAND_ERROR_IS_FATAL ANY)
  execute_process(COMMAND ${BITFOLD_LLVM_CONFIG} --link-static --system-libs
                  OUTPUT_VARIABLE llvm_sys OUTPUT_STRIP_TRAILING_WHITESPACE
                  COMMAND_ERROR_IS_FATAL ANY)
  separate_arguments(llvm_libs UNIX_COMMAND "${llvm_libs}")
  separate_arguments(llvm_sys UNIX_COMMAND "${llvm_sys}")
  set(mlir_libs)
  foreach(lib ${ARG_MLIR})
    list(APPEND mlir_libs ${LLVM_LIBRARY_DIR}/lib${lib}.a)
  endforeach()
  # libstdc++ too: the GPU machine's may be older or newer than ours.
  target_link_libraries(${target} PUBLIC -static-libstdc++ -static-libgcc
    -Wl,--start-group ${mlir_libs} ${llvm_libs} -Wl,--end-group ${llvm_sys})
endfunction()
