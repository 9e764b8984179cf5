# glibc 2.28 symbol versions for a library linked here (release/README.md):
# linked whole into the release libraries (BITFOLD_GLIBC_COMPAT), and into
# tests/release's small probe in every build.
if(CMAKE_SYSTEM_NAME STREQUAL Linux AND CMAKE_SYSTEM_PROCESSOR STREQUAL x86_64)
  add_library(bitfold_glibc_compat STATIC EXCLUDE_FROM_ALL
    ${CMAKE_CURRENT_LIST_DIR}/../release/GlibcCompat.c)
  set_target_properties(bitfold_glibc_compat PROPERTIES
    POSITION_INDEPENDENT_CODE ON C_VISIBILITY_PRESET hidden)
  target_compile_options(bitfold_glibc_compat PRIVATE -fno-builtin)
  # Before glibc 2.34 pthread_create & co., dlopen & co. and shm_open lived
  # in libpthread, libdl and librt: needed by name (here they are stubs, so
  # --as-needed would drop them; -l: since their .so links are gone), or
  # an older glibc would not find them.
  set(BITFOLD_GLIBC_COMPAT_LIBS
    "-Wl,--push-state,--no-as-needed -l:libpthread.so.0 -l:libdl.so.2 -l:librt.so.1 -Wl,--pop-state")
endif()

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
  bitfold_portable_link()
endfunction()

# What makes the release library a manylinux one (docs/wheel.md):
#  - zlib and zstd from their archives, not libz.so / libzstd.so; other
#    system libraries llvm-config names (z3, xml2) only if something uses them;
#  - glibc 2.28's symbol versions (BITFOLD_GLIBC_COMPAT: release/GlibcCompat.c,
#    linked whole, before libstdc++.a and libgcc_eh.a, which also need it).
# release/check-glibc.py then checks the linked libbitfold.so.
function(bitfold_portable_link)
  get_property(sys TARGET bitfold_llvm_static PROPERTY INTERFACE_LINK_LIBRARIES)
  set(items)
  set(optional)
  foreach(item IN LISTS sys)
    if(item STREQUAL "-lz" OR item STREQUAL "-lzstd")
      string(SUBSTRING ${item} 2 -1 name)
      find_library(BITFOLD_${name}_ARCHIVE NAMES lib${name}.a REQUIRED)
      list(APPEND items ${BITFOLD_${name}_ARCHIVE})
    elseif(item MATCHES "^-l|\\.so$")
      list(APPEND optional ${item})
    else()
      list(APPEND items ${item})
    endif()
  endforeach()
  # One item: CMake keeps a flag string as it is, in place.
  string(JOIN " " optional ${optional})
  list(APPEND items "-Wl,--push-state,--as-needed ${optional} -Wl,--pop-state")
  if(BITFOLD_GLIBC_COMPAT)
    list(PREPEND items "$<LINK_LIBRARY:WHOLE_ARCHIVE,bitfold_glibc_compat>")
    list(APPEND items ${BITFOLD_GLIBC_COMPAT_LIBS})
  endif()
  set_property(TARGET bitfold_llvm_static PROPERTY INTERFACE_LINK_LIBRARIES ${items})
  if(BITFOLD_GLIBC_COMPAT AND TARGET bitfold_shared)
    # Part of `all`: a library naming a newer glibc (or a non-allowed
    # library) fails the build.
    find_package(Python3 COMPONENTS Interpreter REQUIRED)
    set(stamp ${CMAKE_BINARY_DIR}/runtime/libbitfold.glibc-checked)
    add_custom_command(OUTPUT ${stamp}
      COMMAND ${Python3_EXECUTABLE} ${PROJECT_SOURCE_DIR}/release/check-glibc.py
              $<TARGET_FILE:bitfold_shared> --max 2.28
      COMMAND ${CMAKE_COMMAND} -E touch ${stamp}
      DEPENDS bitfold_shared ${PROJECT_SOURCE_DIR}/release/check-glibc.py
      COMMENT "libbitfold.so: glibc <= 2.28, manylinux allow-list")
    add_custom_target(bitfold_glibc_check ALL DEPENDS ${stamp})
  endif()
endfunction()
