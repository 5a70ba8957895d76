# KilnTesting.cmake — helpers for tests/CMakeLists.txt: Boost.Test executables registered in CTest.
#
#   kiln_add_test_module(<module> SOURCES <.cpp>... [CUDA_SOURCES <.cpp>...] [LABELS <label>...])
#       kiln_cpu_test_<module>   -> ctest kiln.cpu.test.<module>   (label cpu)
#       kiln_cuda_test_<module>  -> ctest kiln.cuda.test.<module>  (label cuda, skipped = exit 77 without a
#       device), with CUDA only: SOURCES + CUDA_SOURCES, compiled by nvcc through a generated .cu that
#       includes the .cpp files, with KILN_TEST_CUDA=1 (support/policies.hpp then lists kiln::Cuda).
#       KILN_TEST_UNITY (default ON): each executable's sources are one translation unit.
#   kiln_add_cuda_test(<name> SOURCES <.cpp>... [LABELS ...])       the CUDA half alone (tests/cuda/)
#   kiln_add_mpi_test(<name> SOURCES <.cpp>... [RANKS <n>] [LABELS ...])
#       kiln_mpi_test_<name> run as `mpiexec -n <n>` (default 2) -> ctest kiln.mpi.test.<name> (label mpi)
#   kiln_add_nccl_test(<name> SOURCES <.cpp>... [RANKS <n>])
#       kiln_nccl_test_<name> (nvcc) run as `mpiexec -n <n>` (default 1) -> ctest kiln.nccl.test.<name>
#       (labels cuda, mpi; skipped without a GPU)
#   kiln_add_compile_fail_test(<file.cpp>)
#       first line `// expect: <regex>`; ctest kiln.compile_fail.<name> (label compile) passes only if
#       building compile_fail_<name> fails with a diagnostic matching <regex> (cmake/ExpectCompileFail.cmake)
#   kiln_add_header_tests()     OBJECT libraries kiln_header_tests(_cuda): one TU per public header
#   kiln_add_consumer_tests()   ctest kiln.consumer.install / kiln.consumer.subdir (label compile)
#
# Needs Boost::unit_test_framework (find_package(Boost ... COMPONENTS unit_test_framework) first).
include_guard(GLOBAL)

if(NOT TARGET Boost::unit_test_framework)
  message(FATAL_ERROR "KilnTesting.cmake: find_package(Boost 1.74 REQUIRED COMPONENTS unit_test_framework) first")
endif()

cmake_path(SET KILN_TESTS_DIR NORMALIZE "${CMAKE_CURRENT_LIST_DIR}/../tests")
set(_KILN_CMAKE_DIR "${CMAKE_CURRENT_LIST_DIR}")
# Arguments of every Boost.Test run: plain text, one line per suite, the one-line summary at the end.
set(KILN_TEST_ARGS --color_output=no --report_level=short --log_level=test_suite)
set(KILN_TEST_TIMEOUT 600 CACHE STRING "CTest timeout (s) of each kiln test")
mark_as_advanced(KILN_TEST_TIMEOUT)

set(KILN_TEST_CUDA_ENABLED FALSE)
if(KILN_CUDA_ENABLED AND TARGET kiln::cuda)
  set(KILN_TEST_CUDA_ENABLED TRUE)
endif()

# ---- Internal targets shared by the tests (never installed) --------------------------------------

# kiln + whichever of kiln::blas / kiln::openmp exist, `#include "support/..."`, warnings.
add_library(kiln_test_common INTERFACE)
target_include_directories(kiln_test_common INTERFACE ${KILN_TESTS_DIR})
target_link_libraries(kiln_test_common INTERFACE kiln::kiln)
foreach(_component IN ITEMS blas openmp zlib)
  if(TARGET kiln::${_component})
    target_link_libraries(kiln_test_common INTERFACE kiln::${_component})
  endif()
endforeach()
target_compile_options(kiln_test_common INTERFACE
  "$<$<COMPILE_LANGUAGE:CXX>:-Wall;-Wextra>"
  "$<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra>")

# Host optimisation of the tests in optimised builds: CI builds every test from scratch on 2 cores, and
# g++ at -O3 was most of it (a CUDA test's TU: 89 s of host compilation at -O3, 51 s at -O1, 29 s at
# -O0, beside 36 s of device code that nvcc's -O does not touch). The CPU tests run at -O1 (their host
# code is what they test); the CUDA tests' host code is checks and launches, -O0. The build type's -O
# is replaced in this directory's flags (tests/ and the targets made here), not added after it: nvcc
# warns about a second -O. Examples, benches and tools keep the build type's flags. Empty: no change.
set(KILN_TEST_HOST_OPTIMIZATION "-O1" CACHE STRING "Host optimisation flag of the CPU tests in non-Debug builds")
set(KILN_TEST_CUDA_HOST_OPTIMIZATION "-O0" CACHE STRING "Host optimisation flag of the CUDA tests in non-Debug builds")
mark_as_advanced(KILN_TEST_HOST_OPTIMIZATION KILN_TEST_CUDA_HOST_OPTIMIZATION)
foreach(_lang IN ITEMS CXX CUDA)
  set(_opt "${KILN_TEST_HOST_OPTIMIZATION}")
  if(_lang STREQUAL "CUDA")
    set(_opt "${KILN_TEST_CUDA_HOST_OPTIMIZATION}")
  endif()
  if(NOT _opt STREQUAL "")
    foreach(_config IN ITEMS RELEASE RELWITHDEBINFO MINSIZEREL)
      string(REGEX REPLACE "(^| )-O[0-9sgz]*( |$)" "\\1${_opt}\\2" CMAKE_${_lang}_FLAGS_${_config}
             "${CMAKE_${_lang}_FLAGS_${_config}}")
    endforeach()
  endif()
endforeach()

# KILN_SANITIZE=ON: ASan + UBSan on the CPU (C++) test executables; any UB report fails the test.
add_library(kiln_test_sanitize INTERFACE)
target_compile_options(kiln_test_sanitize INTERFACE
  "$<$<COMPILE_LANGUAGE:CXX>:-fsanitize=address,undefined;-fno-omit-frame-pointer;-fno-sanitize-recover=undefined>")
target_link_options(kiln_test_sanitize INTERFACE -fsanitize=address,undefined)

# The Boost.Test main, compiled once.
add_library(kiln_test_main OBJECT ${KILN_TESTS_DIR}/support/main.cpp)
target_link_libraries(kiln_test_main PRIVATE Boost::unit_test_framework)

# <source>'s path under tests/ (an include directory of every test target), as generated files include
# it: no absolute path in them, so ccache (CCACHE_BASEDIR) hits across checkouts in different folders.
function(_kiln_test_include_path out_var source)
  cmake_path(ABSOLUTE_PATH source BASE_DIRECTORY "${CMAKE_CURRENT_SOURCE_DIR}" NORMALIZE OUTPUT_VARIABLE abs)
  cmake_path(RELATIVE_PATH abs BASE_DIRECTORY "${KILN_TESTS_DIR}" OUTPUT_VARIABLE path)
  set(${out_var} "${path}" PARENT_SCOPE)
endfunction()

# A .cu in the build tree that #includes <source>: a source file has one LANGUAGE, so the same .cpp is
# compiled by g++ for the CPU executable and by nvcc for the CUDA one.
function(_kiln_cuda_wrapper out_var source dir)
  _kiln_test_include_path(include_path "${source}")
  cmake_path(REMOVE_EXTENSION include_path LAST_ONLY OUTPUT_VARIABLE rel)
  string(MAKE_C_IDENTIFIER "${rel}" name)  # unit/tensor/test_shape -> unit_tensor_test_shape
  set(cu "${dir}/${name}.cu")
  file(CONFIGURE OUTPUT "${cu}" @ONLY
       CONTENT "// Generated by cmake/KilnTesting.cmake: compiles the test below with nvcc.\n#include \"${include_path}\"\n")
  set(${out_var} "${cu}" PARENT_SCOPE)
endfunction()

# KILN_TEST_UNITY: each test executable's sources compiled as one translation unit. A module's sources
# include the same headers and instantiate much the same templates; compiled apart, every TU paid for
# them again (all CUDA tests: 1903 s of compilation as one TU per source, 975 s as one per executable;
# CPU tests: 586 s, 359 s). Off: one TU per source, for editing a test (a change then recompiles one
# file, not the module).
option(KILN_TEST_UNITY "Compile each test executable's sources as one translation unit" ON)

# _kiln_unity_source(<out_var> <file> <source>...): writes <file>, one TU of the sources. Each source's
# include and conditional lines come first, at file scope; then each source is included inside a
# namespace of its own, where its own includes are already done, so that the file-local names of
# different sources (anonymous namespaces, aliases, suites opened on the same line) do not meet.
# Included .cpp / .cu / .inc files are not hoisted: they are code, not headers. A source added to or
# edited in the list re-runs CMake (CMAKE_CONFIGURE_DEPENDS), so a new #include is hoisted too.
# g++ warns of a lambda or class that uses the anonymous namespace of an included file (as if from a
# header, linked into several TUs); here the sources are included into one TU only: not warned of.
function(_kiln_unity_source out_var file)
  set(hoisted "")
  set(body "")
  set(index 0)
  foreach(src IN LISTS ARGN)
    _kiln_test_include_path(include_path "${src}")
    set(abs "${KILN_TESTS_DIR}/${include_path}")
    set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${abs}")
    file(STRINGS "${abs}" directives REGEX "^[ \t]*#[ \t]*(include|if|ifdef|ifndef|elif|else|endif)")
    string(APPEND hoisted "// ${include_path}\n")
    foreach(line IN LISTS directives)  # (a ';' in a comment splits a line: the piece is dropped below)
      string(REGEX REPLACE "[ \t]*//.*$" "" line "${line}")
      if(NOT line MATCHES "^[ \t]*#" OR line MATCHES "^[ \t]*#[ \t]*include.*\\.(cpp|cu|inc)[\">]")
        continue()
      endif()
      string(APPEND hoisted "${line}\n")
    endforeach()
    math(EXPR index "${index} + 1")
    string(APPEND body "namespace kiln_unity_${index} {\n#include \"${include_path}\"\n}  // namespace kiln_unity_${index}\n")
  endforeach()
  file(CONFIGURE OUTPUT "${file}" @ONLY CONTENT
       "// Generated by cmake/KilnTesting.cmake (KILN_TEST_UNITY): ${index} test sources as one translation unit.\n${hoisted}\n${body}")
  set(no_warning -Wno-subobject-linkage)
  if(file MATCHES "\\.cu$")
    set(no_warning -Xcompiler=-Wno-subobject-linkage)
  endif()
  set_source_files_properties("${file}" PROPERTIES COMPILE_OPTIONS ${no_warning})
  set(${out_var} "${file}" PARENT_SCOPE)
endfunction()

# Splits the sources into those that keep a TU of their own in a unity build (their paths under tests/
# in one of the lists named by `lists`) and the rest.
function(_kiln_split_own_tu unity_var own_var lists)
  set(unity "")
  set(own "")
  foreach(src IN LISTS ARGN)
    _kiln_test_include_path(rel "${src}")
    set(alone FALSE)
    foreach(list_name IN LISTS lists)
      if(rel IN_LIST ${list_name})
        set(alone TRUE)
      endif()
    endforeach()
    if(alone)
      list(APPEND own "${src}")
    else()
      list(APPEND unity "${src}")
    endif()
  endforeach()
  set(${unity_var} "${unity}" PARENT_SCOPE)
  set(${own_var} "${own}" PARENT_SCOPE)
endfunction()

# add_executable(<target>) of the sources, compiled by nvcc through generated .cu files: one that
# includes them all (KILN_TEST_UNITY), else a wrapper for each.
# KILN_TEST_CUDA_OWN_TU: sources (paths under tests/) that keep a TU of their own in a unity build;
# KILN_TEST_OWN_TU: such sources for both compilers (a replacement of the global operator new, which a
# unity build's namespaces cannot hold).
function(_kiln_cuda_executable target)
  set(dir "${CMAKE_CURRENT_BINARY_DIR}/generated/${target}")
  set(unity "")
  set(own "${ARGN}")
  if(KILN_TEST_UNITY)
    _kiln_split_own_tu(unity own "KILN_TEST_CUDA_OWN_TU;KILN_TEST_OWN_TU" ${ARGN})
    list(LENGTH unity count)
    if(count EQUAL 1)
      list(APPEND own ${unity})
      set(unity "")
    endif()
  endif()
  set(cu_sources "")
  if(unity)
    _kiln_unity_source(cu "${dir}/unity.cu" ${unity})
    list(APPEND cu_sources "${cu}")
  endif()
  foreach(src IN LISTS own)
    _kiln_cuda_wrapper(cu "${src}" "${dir}")
    list(APPEND cu_sources "${cu}")
  endforeach()
  add_executable(${target} ${cu_sources})
endfunction()

# add_executable(<target>) of the C++ sources: as one TU (KILN_TEST_UNITY; but KILN_TEST_OWN_TU's), else
# as they are.
function(_kiln_cpu_executable target)
  _kiln_split_own_tu(unity own "KILN_TEST_OWN_TU" ${ARGN})
  list(LENGTH unity count)
  if(KILN_TEST_UNITY AND count GREATER 1)
    _kiln_unity_source(cpp "${CMAKE_CURRENT_BINARY_DIR}/generated/${target}/unity.cpp" ${unity})
    add_executable(${target} "${cpp}" ${own})
  else()
    add_executable(${target} ${ARGN})
  endif()
endfunction()

if(KILN_TEST_CUDA_ENABLED)
  # main_cuda.cpp: exits 77 (CTest: skipped) when no CUDA device is usable, else runs Boost.Test.
  _kiln_cuda_wrapper(_main_cu ${KILN_TESTS_DIR}/support/main_cuda.cpp ${CMAKE_CURRENT_BINARY_DIR}/generated/kiln_test_main_cuda)
  add_library(kiln_test_main_cuda OBJECT ${_main_cu})
  target_include_directories(kiln_test_main_cuda PRIVATE ${KILN_TESTS_DIR})
  target_link_libraries(kiln_test_main_cuda PRIVATE Boost::unit_test_framework CUDA::cudart)
endif()

function(_kiln_reject_unparsed function)
  if(ARGN)
    message(FATAL_ERROR "${function}: unexpected arguments: ${ARGN}")
  endif()
endfunction()

# ---- Unit tests ----------------------------------------------------------------------------------

function(kiln_add_cuda_test name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "SOURCES;LABELS")
  _kiln_reject_unparsed(kiln_add_cuda_test ${arg_UNPARSED_ARGUMENTS})
  if(NOT KILN_TEST_CUDA_ENABLED)
    return()
  endif()
  if(NOT arg_SOURCES)
    message(FATAL_ERROR "kiln_add_cuda_test(${name}): no SOURCES")
  endif()
  set(target kiln_cuda_test_${name})
  _kiln_cuda_executable(${target} ${arg_SOURCES})
  target_link_libraries(${target} PRIVATE kiln_test_main_cuda kiln_test_common kiln::cuda Boost::unit_test_framework)
  target_compile_definitions(${target} PRIVATE KILN_TEST_CUDA=1)
  add_test(NAME kiln.cuda.test.${name} COMMAND ${target} ${KILN_TEST_ARGS})
  set(labels cuda ${arg_LABELS})
  set_tests_properties(kiln.cuda.test.${name} PROPERTIES
    LABELS "${labels}" SKIP_RETURN_CODE 77 TIMEOUT ${KILN_TEST_TIMEOUT})
endfunction()

# kiln_add_test_module(<module> SOURCES ... [CUDA_SOURCES ...] [LABELS ...] [HOST_ONLY])
# HOST_ONLY: the module has no device code (data readers, loaders): no CUDA build of its sources.
function(kiln_add_test_module module)
  cmake_parse_arguments(PARSE_ARGV 1 arg "HOST_ONLY" "" "SOURCES;CUDA_SOURCES;LABELS")
  _kiln_reject_unparsed(kiln_add_test_module ${arg_UNPARSED_ARGUMENTS})
  if(NOT arg_SOURCES)
    message(FATAL_ERROR "kiln_add_test_module(${module}): no SOURCES")
  endif()
  set(target kiln_cpu_test_${module})
  _kiln_cpu_executable(${target} ${arg_SOURCES})
  target_link_libraries(${target} PRIVATE kiln_test_main kiln_test_common Boost::unit_test_framework)
  if(KILN_SANITIZE)
    target_link_libraries(${target} PRIVATE kiln_test_sanitize)
  endif()
  add_test(NAME kiln.cpu.test.${module} COMMAND ${target} ${KILN_TEST_ARGS})
  set(labels cpu ${arg_LABELS})
  set_tests_properties(kiln.cpu.test.${module} PROPERTIES LABELS "${labels}" TIMEOUT ${KILN_TEST_TIMEOUT})
  if(KILN_SANITIZE)
    set_tests_properties(kiln.cpu.test.${module} PROPERTIES ENVIRONMENT UBSAN_OPTIONS=print_stacktrace=1)
  endif()
  if(arg_HOST_ONLY)
    if(arg_CUDA_SOURCES)
      kiln_add_cuda_test(${module} SOURCES ${arg_CUDA_SOURCES} LABELS ${arg_LABELS})
    endif()
  else()
    kiln_add_cuda_test(${module} SOURCES ${arg_SOURCES} ${arg_CUDA_SOURCES} LABELS ${arg_LABELS})
  endif()
endfunction()

function(kiln_add_mpi_test name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "RANKS" "SOURCES;LABELS")
  _kiln_reject_unparsed(kiln_add_mpi_test ${arg_UNPARSED_ARGUMENTS})
  if(NOT TARGET kiln::mpi)
    return()
  endif()
  if(NOT arg_RANKS)
    set(arg_RANKS 2)
  endif()
  set(target kiln_mpi_test_${name})
  add_executable(${target} ${arg_SOURCES})
  target_link_libraries(${target} PRIVATE kiln_test_main kiln_test_common kiln::mpi Boost::unit_test_framework)
  add_test(NAME kiln.mpi.test.${name}
           COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${arg_RANKS} ${MPIEXEC_PREFLAGS}
                   $<TARGET_FILE:${target}> ${MPIEXEC_POSTFLAGS} ${KILN_TEST_ARGS})
  set(labels mpi ${arg_LABELS})
  set_tests_properties(kiln.mpi.test.${name} PROPERTIES
    LABELS "${labels}" PROCESSORS ${arg_RANKS} TIMEOUT ${KILN_TEST_TIMEOUT}
    ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
endfunction()

# kiln_add_nccl_test(<name> SOURCES <.cpp>... [RANKS <n>]): Distributed<Nccl> tests, compiled by nvcc,
# run as `mpiexec -n <n>` (default 1: one GPU is enough) -> ctest kiln.nccl.test.<name> (labels cuda,
# mpi; skipped = exit 77 without a GPU).
function(kiln_add_nccl_test name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "RANKS" "SOURCES")
  _kiln_reject_unparsed(kiln_add_nccl_test ${arg_UNPARSED_ARGUMENTS})
  if(NOT KILN_TEST_CUDA_ENABLED OR NOT TARGET kiln::nccl OR NOT TARGET kiln::mpi)
    return()
  endif()
  if(NOT arg_RANKS)
    set(arg_RANKS 1)
  endif()
  set(target kiln_nccl_test_${name})
  _kiln_cuda_executable(${target} ${arg_SOURCES})
  target_link_libraries(${target} PRIVATE kiln_test_main_cuda kiln_test_common kiln::cuda kiln::nccl kiln::mpi
                                          Boost::unit_test_framework)
  target_compile_definitions(${target} PRIVATE KILN_TEST_CUDA=1)
  add_test(NAME kiln.nccl.test.${name}
           COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${arg_RANKS} ${MPIEXEC_PREFLAGS}
                   $<TARGET_FILE:${target}> ${MPIEXEC_POSTFLAGS} ${KILN_TEST_ARGS})
  set_tests_properties(kiln.nccl.test.${name} PROPERTIES
    LABELS "cuda;mpi" PROCESSORS ${arg_RANKS} SKIP_RETURN_CODE 77 TIMEOUT ${KILN_TEST_TIMEOUT}
    ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
endfunction()

# ---- Expected compile errors ---------------------------------------------------------------------

function(kiln_add_compile_fail_test file)
  cmake_path(ABSOLUTE_PATH file BASE_DIRECTORY "${CMAKE_CURRENT_SOURCE_DIR}" NORMALIZE OUTPUT_VARIABLE abs)
  cmake_path(GET abs STEM name)
  file(STRINGS "${abs}" first_line LIMIT_COUNT 1)
  if(NOT first_line MATCHES "^//[ \t]*expect:[ \t]*[^ \t]")
    message(FATAL_ERROR "${abs}: the first line must be `// expect: <regex of the diagnostic>`")
  endif()
  set(target compile_fail_${name})
  add_library(${target} OBJECT EXCLUDE_FROM_ALL "${abs}")
  target_link_libraries(${target} PRIVATE kiln_test_common)
  target_compile_options(${target} PRIVATE -fdiagnostics-color=never)
  set(config_arg "")
  get_property(multi_config GLOBAL PROPERTY GENERATOR_IS_MULTI_CONFIG)
  if(multi_config)
    set(config_arg "-DCONFIG=$<CONFIG>")
  endif()
  # The script reads the regex from the file's first line itself (a regex may hold ';', which a
  # -D argument cannot carry); it fails if the build succeeds or the output does not match.
  add_test(NAME kiln.compile_fail.${name}
           COMMAND ${CMAKE_COMMAND} -DBUILD_DIR=${CMAKE_BINARY_DIR} -DTARGET=${target} -DSOURCE=${abs}
                   ${config_arg} -P ${_KILN_CMAKE_DIR}/ExpectCompileFail.cmake)
  # RESOURCE_LOCK: two builds must never run in the same build tree at once. LC_ALL=C: plain quotes.
  set_tests_properties(kiln.compile_fail.${name} PROPERTIES
    LABELS compile RESOURCE_LOCK kiln_build_tree ENVIRONMENT LC_ALL=C TIMEOUT ${KILN_TEST_TIMEOUT})
endfunction()

# ---- Header self-containment: one generated TU per public header ---------------------------------

function(kiln_add_header_tests)
  set(include_dir "${PROJECT_SOURCE_DIR}/include")
  file(GLOB_RECURSE headers CONFIGURE_DEPENDS RELATIVE "${include_dir}"
       "${include_dir}/kiln/*.hpp" "${include_dir}/kiln/*.cuh")
  set(host_tus "")
  set(cuda_tus "")
  foreach(header IN LISTS headers)
    cmake_path(GET header FILENAME file_name)
    cmake_path(GET header EXTENSION LAST_ONLY ext)
    if(ext STREQUAL ".cuh" OR header STREQUAL "kiln/cuda.hpp")  # nvcc only
      if(NOT KILN_TEST_CUDA_ENABLED)
        continue()
      endif()
      set(tu "${CMAKE_CURRENT_BINARY_DIR}/headers/${header}.cu")
      list(APPEND cuda_tus "${tu}")
    else()
      if((header MATCHES "^kiln/backend/cuda/" AND NOT TARGET kiln::cuda)
         OR (file_name MATCHES "^nccl" AND NOT TARGET kiln::nccl)
         OR (file_name STREQUAL "mpi.hpp" AND NOT TARGET kiln::mpi))
        continue()
      endif()
      set(tu "${CMAKE_CURRENT_BINARY_DIR}/headers/${header}.cpp")
      list(APPEND host_tus "${tu}")
    endif()
    # Included twice: the header must compile on its own and be guarded against double inclusion.
    file(CONFIGURE OUTPUT "${tu}" @ONLY CONTENT
         "// Generated by cmake/KilnTesting.cmake: <${header}> compiles on its own.\n#include <${header}>\n#include <${header}>\n")
  endforeach()

  foreach(kind IN ITEMS host cuda)
    set(target kiln_header_tests)
    if(kind STREQUAL "cuda")
      set(target kiln_header_tests_cuda)
    endif()
    if(NOT ${kind}_tus)
      continue()
    endif()
    add_library(${target} OBJECT ${${kind}_tus})
    target_link_libraries(${target} PRIVATE kiln_test_common)
    foreach(component IN ITEMS cuda nccl mpi)
      if(TARGET kiln::${component})
        target_link_libraries(${target} PRIVATE kiln::${component})
      endif()
    endforeach()
  endforeach()
endfunction()

# ---- Consumers: an outside project using the installed package, or kiln as a subdirectory ---------

function(kiln_add_consumer_tests)
  set(common_args
    -DKILN_SOURCE_DIR=${PROJECT_SOURCE_DIR}
    -DKILN_BINARY_DIR=${PROJECT_BINARY_DIR}
    -DGENERATOR=${CMAKE_GENERATOR}
    -DMAKE_PROGRAM=${CMAKE_MAKE_PROGRAM}
    -DCXX_COMPILER=${CMAKE_CXX_COMPILER}
    -DBUILD_TYPE=$<CONFIG>)
  if(CMAKE_CXX_COMPILER_LAUNCHER)
    list(GET CMAKE_CXX_COMPILER_LAUNCHER 0 launcher)
    list(APPEND common_args -DCXX_LAUNCHER=${launcher})
  endif()
  foreach(mode IN ITEMS install subdir)
    set(args -DMODE=${mode} -DWORK_DIR=${CMAKE_CURRENT_BINARY_DIR}/consumer/${mode} ${common_args})
    if(mode STREQUAL "install" AND TARGET kiln::cuda)
      list(APPEND args -DCOMPONENTS=cuda)  # also check find_package(kiln COMPONENTS cuda) + linking it
    endif()
    if(mode STREQUAL "subdir" AND KILN_TEST_CUDA_ENABLED)
      # The parent enables CUDA itself and compiles a .cu file against kiln (one small nvcc compile).
      list(JOIN CMAKE_CUDA_ARCHITECTURES "," archs)
      list(APPEND args -DCUDA=ON -DCUDA_COMPILER=${CMAKE_CUDA_COMPILER} -DCUDA_ARCHITECTURES=${archs})
      if(CMAKE_CUDA_COMPILER_LAUNCHER)
        list(GET CMAKE_CUDA_COMPILER_LAUNCHER 0 launcher)
        list(APPEND args -DCUDA_LAUNCHER=${launcher})
      endif()
    endif()
    add_test(NAME kiln.consumer.${mode}
             COMMAND ${CMAKE_COMMAND} ${args} -P ${_KILN_CMAKE_DIR}/RunConsumerTest.cmake)
    # (kiln_consumer_mpi starts a singleton Open MPI job, which refuses root without these)
    set_tests_properties(kiln.consumer.${mode} PROPERTIES LABELS compile TIMEOUT ${KILN_TEST_TIMEOUT}
      ENVIRONMENT "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1")
  endforeach()
endfunction()
