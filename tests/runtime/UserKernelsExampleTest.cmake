# CTest script: install the "bitfold" and "jit" components to a scratch
# prefix, then build examples/user_kernels against that prefix alone
# (find_package(bitfold COMPONENTS jit), and again through pkg-config
# bitfold-jit) and run it: each C++ kernel must have the hash of its text
# file, interpret, and compile to PTX (no GPU: the launch is skipped).
#   -DBUILD_DIR=<build tree> -DEXAMPLE_DIR=<examples/user_kernels>
#   -DWORK_DIR=<scratch> -DCXX_COMPILER=<c++> -DGENERATOR=<generator>
#   -DREADME=<README.md> (its C++ DSL example is built the same way)
#   -DZOO_DIR=<examples/zoo> (a C++ zoo kernel is built the same way; its
#   hash must be its .bfk file's)
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

foreach(component bitfold jit)
  run(${CMAKE_COMMAND} --install ${BUILD_DIR} --component ${component}
      --prefix ${prefix})
endforeach()
# No internal header leaks: only the public DSL and codegen headers.
file(GLOB_RECURSE headers RELATIVE ${prefix}/include ${prefix}/include/*)
list(SORT headers)
message(STATUS "installed headers: ${headers}")
foreach(h ${headers})
  if(NOT h MATCHES "^(dlpack/|bitfold/(bitfold\\.hp?p?|dsl/(IR|Ops|Parser|Interp|ApproxModels|ApproxTables|Folds)\\.h|dsl/Ops\\.def|codegen/Codegen\\.h|keys/(CompileOptions|KernelABI|ShapeSpec|TileConfig)\\.h)$)")
    message(FATAL_ERROR "unexpected installed header: ${h}")
  endif()
endforeach()

# 1. find_package(bitfold COMPONENTS jit).
set(env ${CMAKE_COMMAND} -E env BITFOLD_LIBCUDA=/nonexistent/libcuda.so.1
    BITFOLD_DISK_CACHE=0)
run(${CMAKE_COMMAND} -S ${EXAMPLE_DIR} -B ${WORK_DIR}/build -G ${GENERATOR}
    -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCMAKE_PREFIX_PATH=${prefix}
    -DCMAKE_BUILD_TYPE=Release)
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build)
run(${env} ${WORK_DIR}/build/user_kernels ${EXAMPLE_DIR})
message(STATUS "user_kernels (find_package):\n${out}")
foreach(want "user_add_rmsnorm" "user_bias_gelu_tanh" "user_softmax"
        "same hash" "PTX (sm_90)" "interp y[0, 0:6]")
  string(FIND "${out}" "${want}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "user_kernels output lacks '${want}'")
  endif()
endforeach()

# 2. pkg-config bitfold-jit.
find_program(PKG_CONFIG pkg-config REQUIRED)
file(GLOB_RECURSE pcs ${prefix}/*/bitfold-jit.pc)
get_filename_component(pcdir "${pcs}" DIRECTORY)
run(${CMAKE_COMMAND} -E env PKG_CONFIG_PATH=${pcdir}
    ${PKG_CONFIG} --cflags --libs bitfold-jit)
separate_arguments(flags UNIX_COMMAND "${out}")
get_filename_component(libdir ${pcdir} DIRECTORY)
run(${CXX_COMPILER} ${EXAMPLE_DIR}/main.cpp ${EXAMPLE_DIR}/Kernels.cpp
    ${EXAMPLE_DIR}/GpuBuffers.cpp -DUSER_KERNELS_SOURCE_DIR="${EXAMPLE_DIR}"
    ${flags} -ldl -Wl,-rpath,${libdir} -o ${WORK_DIR}/user_kernels-pc)
run(${env} ${WORK_DIR}/user_kernels-pc)
message(STATUS "user_kernels (pkg-config): ok")

# 3. The README's C++ DSL example, verbatim (its first ```cpp block), built
# against the installed package alone with a main that builds the program.
file(READ ${README} readme)
string(FIND "${readme}" "```cpp\n" start)
if(start EQUAL -1)
  message(FATAL_ERROR "README.md has no ```cpp block")
endif()
math(EXPR start "${start} + 7")
string(SUBSTRING "${readme}" ${start} -1 rest)
string(FIND "${rest}" "```" end)
string(SUBSTRING "${rest}" 0 ${end} snippet)
set(readme_dir ${WORK_DIR}/readme-example)
file(WRITE ${readme_dir}/main.cpp "${snippet}
#include <cstdio>
int main() {
  auto def = lnModulate();
  if (!def) {
    std::fprintf(stderr, \"%s\\n\", llvm::toString(def.takeError()).c_str());
    return 1;
  }
  std::printf(\"readme example %s\\n\", (*def)->hash.c_str());
  return 0;
}
")
file(WRITE ${readme_dir}/CMakeLists.txt "cmake_minimum_required(VERSION 3.20)
project(readme_example LANGUAGES CXX)
set(CMAKE_CXX_STANDARD 20)
find_package(bitfold REQUIRED COMPONENTS jit)
add_executable(readme_example main.cpp)
target_link_libraries(readme_example PRIVATE bitfold::jit)
")
run(${CMAKE_COMMAND} -S ${readme_dir} -B ${readme_dir}/build -G ${GENERATOR}
    -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCMAKE_PREFIX_PATH=${prefix}
    -DCMAKE_BUILD_TYPE=Release)
run(${CMAKE_COMMAND} --build ${readme_dir}/build)
run(${env} ${readme_dir}/build/readme_example)
message(STATUS "${out}")

# 4. A C++ zoo kernel (examples/zoo/fused_add_rms_norm.cpp, as it is)
# against the installed package alone: its hash must be its .bfk file's.
set(zoo_dir ${WORK_DIR}/zoo-example)
file(WRITE ${zoo_dir}/main.cpp "#include \"ZooKernels.h\"
#include \"dsl/Parser.h\"
#include <cstdio>
#include <fstream>
#include <sstream>
int main() {
  auto cpp = zoo::fusedAddRmsNorm();
  if (!cpp) {
    std::fprintf(stderr, \"%s\\n\", llvm::toString(cpp.takeError()).c_str());
    return 1;
  }
  std::ifstream f(\"${ZOO_DIR}/fused_add_rms_norm.bfk\");
  std::stringstream s;
  s << f.rdbuf();
  auto text = bitfold::dsl::parseKernel(s.str(), \"fused_add_rms_norm.bfk\");
  if (!text) {
    std::fprintf(stderr, \"%s\\n\", llvm::toString(text.takeError()).c_str());
    return 1;
  }
  if ((*text)->hash != (*cpp)->hash) {
    std::fprintf(stderr, \"C++ %s != text %s\\n\", (*cpp)->hash.c_str(),
                 (*text)->hash.c_str());
    return 1;
  }
  std::printf(\"zoo fused_add_rms_norm.cpp: the text's hash %s\\n\",
              (*cpp)->hash.c_str());
  return 0;
}
")
file(WRITE ${zoo_dir}/CMakeLists.txt "cmake_minimum_required(VERSION 3.20)
project(zoo_example LANGUAGES CXX)
set(CMAKE_CXX_STANDARD 20)
find_package(bitfold REQUIRED COMPONENTS jit)
add_executable(zoo_example main.cpp ${ZOO_DIR}/fused_add_rms_norm.cpp)
target_include_directories(zoo_example PRIVATE ${ZOO_DIR})
target_link_libraries(zoo_example PRIVATE bitfold::jit)
")
run(${CMAKE_COMMAND} -S ${zoo_dir} -B ${zoo_dir}/build -G ${GENERATOR}
    -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCMAKE_PREFIX_PATH=${prefix}
    -DCMAKE_BUILD_TYPE=Release)
run(${CMAKE_COMMAND} --build ${zoo_dir}/build)
run(${env} ${zoo_dir}/build/zoo_example)
message(STATUS "${out}")
