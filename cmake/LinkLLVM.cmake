# bitfold_link_llvm(<target> LLVM <components...> MLIR <libs...>)
#
# Dev flavour: the shared libLLVM.so / libMLIR.so Debian ships.
# Release flavour: static archives. The archive list comes from
# `llvm-config --link-static --libs`, never from the exported CMake targets:
# those pull libLLVM.so back in, and mixing it with static NVPTX archives
# aborts at start-up ("option registered more than once").
#
# In the release flavour every target links one INTERFACE target,
# bitfold_llvm_static, which bitfold_finalize_llvm() (called once at the end
# of the top-level CMakeLists) fills with a single --start-group/--end-group
# of the union of all requested archives: CMake deduplicates link items, so
# one group per library would break apart.
function(bitfold_link_llvm target)
  cmake_parse_arguments(ARG "" "" "LLVM;MLIR" ${ARGN})
  if(NOT BITFOLD_STATIC_LLVM)
    target_link_libraries(${target} PUBLIC LLVM)
    if(ARG_MLIR)
      target_link_libraries(${target} PUBLIC MLIR)
    endif()
    return()
  endif()
  if(NOT TARGET bitfold_llvm_static)
    add_library(bitfold_llvm_static INTERFACE)
    set_property(GLOBAL PROPERTY BITFOLD_LLVM_TARGET_DIR ${CMAKE_CURRENT_SOURCE_DIR})
  endif()
  set_property(GLOBAL APPEND PROPERTY BITFOLD_LLVM_COMPONENTS ${ARG_LLVM})
  set_property(GLOBAL APPEND PROPERTY BITFOLD_MLIR_LIBS ${ARG_MLIR})
  target_link_libraries(${target} PUBLIC bitfold_llvm_static)
endfunction()

function(bitfold_finalize_llvm)
  if(NOT BITFOLD_STATIC_LLVM OR NOT TARGET bitfold_llvm_static)
    return()
  endif()
  get_property(components GLOBAL PROPERTY BITFOLD_LLVM_COMPONENTS)
  get_property(mlir GLOBAL PROPERTY BITFOLD_MLIR_LIBS)
  list(REMOVE_DUPLICATES components)
  find_program(BITFOLD_LLVM_CONFIG llvm-config HINTS ${LLVM_TOOLS_BINARY_DIR}
               REQUIRED NO_DEFAULT_PATH)
  execute_process(COMMAND ${BITFOLD_LLVM_CONFIG} --link-static --libfiles ${components}
                  OUTPUT_VARIABLE llvm_libs OUTPUT_STRIP_TRAILING_WHITESPACE
                  COMMAND_ERROR_IS_FATAL ANY)
  execute_process(COMMAND ${BITFOLD_LLVM_CONFIG} --link-static --system-libs
                  OUTPUT_VARIABLE llvm_sys OUTPUT_STRIP_TRAILING_WHITESPACE
                  COMMAND_ERROR_IS_FATAL ANY)
  separate_arguments(llvm_libs UNIX_COMMAND "${llvm_libs}")
  separate_arguments(llvm_sys UNIX_COMMAND "${llvm_sys}")
  # The MLIR archives: the closure of the named libraries over MLIR's
  # exported link interfaces (their LLVM dependencies are the llvm-config
  # components named above).
  set(mlir_libs)
  set(pending ${mlir})
  set(seen)
  while(pending)
    list(POP_FRONT pending lib)
    if(lib IN_LIST seen OR NOT lib MATCHES "^MLIR")
      continue()
    endif()
    list(APPEND seen ${lib})
    if(EXISTS ${LLVM_LIBRARY_DIR}/lib${lib}.a)
      list(APPEND mlir_libs ${LLVM_LIBRARY_DIR}/lib${lib}.a)
    endif()
    if(TARGET ${lib})
      get_target_property(deps ${lib} INTERFACE_LINK_LIBRARIES)
      if(deps)
        list(APPEND pending ${deps})
      endif()
    endif()
  endwhile()
  list(LENGTH mlir_libs n_mlir)
  list(LENGTH llvm_libs n_llvm)
  message(STATUS "bitfold: static link of ${n_mlir} MLIR and ${n_llvm} LLVM archives")
  # libstdc++ too: a GPU host's may be older or newer than ours.
  string(JOIN " " group ${mlir_libs} ${llvm_libs})
  set_property(TARGET bitfold_llvm_static PROPERTY INTERFACE_LINK_LIBRARIES
    -static-libstdc++ -static-libgcc
    "-Wl,--start-group ${group} -Wl,--end-group" ${llvm_sys})
endfunction()
