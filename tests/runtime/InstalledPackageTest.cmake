# CTest script: install the "bitfold" component to a scratch prefix, then
# build and run tests/runtime/consumer/main.c against it, once through
# find_package(bitfold) and once through pkg-config, and check that
# libbitfold.so exports the C API only.
#   -DBUILD_DIR=<build tree> -DSOURCE_DIR=<tests/runtime> -DWORK_DIR=<scratch>
#   -DC_COMPILER=<cc> -DGENERATOR=<generator>
file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out
                  ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGN}\n${out}\n${err}")
  endif()
  set(out "${out}" PARENT_SCOPE)
endfunction()

run(${CMAKE_COMMAND} --install ${BUILD_DIR} --component bitfold --prefix ${prefix})
file(GLOB_RECURSE libs ${prefix}/*/libbitfold.so)
list(LENGTH libs n)
if(NOT n EQUAL 1)
  message(FATAL_ERROR "expected one libbitfold.so under ${prefix}, found: ${libs}")
endif()
get_filename_component(libdir ${libs} DIRECTORY)

# Exports: bitfold_* only.
find_program(NM nm REQUIRED)
run(${NM} -D --defined-only ${libs})
string(REGEX MATCHALL "[^\n]+" symbols "${out}")
foreach(line ${symbols})
  if(NOT line MATCHES " bitfold_[a-z_]+$")
    message(FATAL_ERROR "libbitfold.so exports more than the C API: '${line}'")
  endif()
endforeach()
message(STATUS "exports: ${symbols}")

# 1. find_package(bitfold).
run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/consumer -B ${WORK_DIR}/cmake-build
    -G ${GENERATOR} -DCMAKE_C_COMPILER=${C_COMPILER} -DCMAKE_CXX_COMPILER=${CXX_COMPILER}
    -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_BUILD_TYPE=Release)
run(${CMAKE_COMMAND} --build ${WORK_DIR}/cmake-build)
run(${CMAKE_COMMAND} -E env BITFOLD_LIBCUDA=/nonexistent/libcuda.so.1
    ${WORK_DIR}/cmake-build/consumer)
message(STATUS "find_package consumer:\n${out}")
run(${CMAKE_COMMAND} -E env BITFOLD_LIBCUDA=/nonexistent/libcuda.so.1
    ${WORK_DIR}/cmake-build/consumer_cpp)
message(STATUS "find_package C++ consumer (bitfold.hpp):\n${out}")

# 2. pkg-config.
find_program(PKG_CONFIG pkg-config REQUIRED)
run(${CMAKE_COMMAND} -E env PKG_CONFIG_PATH=${libdir}/pkgconfig
    ${PKG_CONFIG} --cflags --libs bitfold)
separate_arguments(flags UNIX_COMMAND "${out}")
run(${C_COMPILER} -std=c99 -Wall -Wextra -pedantic -Werror
    ${SOURCE_DIR}/consumer/main.c ${flags} -Wl,-rpath,${libdir}
    -o ${WORK_DIR}/consumer-pc)
run(${CMAKE_COMMAND} -E env BITFOLD_LIBCUDA=/nonexistent/libcuda.so.1
    ${WORK_DIR}/consumer-pc)
message(STATUS "pkg-config consumer:\n${out}")
