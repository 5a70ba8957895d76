# RunConsumerTest.cmake — the body of the kiln.consumer.<mode> tests: build and run tests/consumer as an
# outside project would.
#
#   cmake -DMODE=install|subdir -DKILN_SOURCE_DIR=<src> -DKILN_BINARY_DIR=<kiln build tree> -DWORK_DIR=<dir>
#         [-DGENERATOR=Ninja] [-DMAKE_PROGRAM=...] [-DCXX_COMPILER=g++] [-DCXX_LAUNCHER=ccache]
#         [-DBUILD_TYPE=Release] [-DCOMPONENTS=cuda]
#         [-DCUDA=ON [-DCUDA_COMPILER=nvcc] [-DCUDA_ARCHITECTURES=80,90] [-DCUDA_LAUNCHER=ccache]]
#         -P RunConsumerTest.cmake
#
# install: `cmake --install <kiln build tree> --prefix <WORK_DIR>/prefix`, then find_package(kiln CONFIG)
#          with CMAKE_PREFIX_PATH=<prefix> (and COMPONENTS, if given).
# subdir:  add_subdirectory(<src>) with KILN_BUILD_TESTS=OFF KILN_ENABLE_CUDA=OFF (ON with CUDA=ON).
# CUDA=ON: the consumer enables CUDA itself, before kiln, and builds and runs a .cu program on kiln::Cuda
#          (it skips without a device). tests/ passes it to the subdir test of a CUDA build.
# Every step must exit 0; the consumer's build tree is fresh each time.
foreach(var IN ITEMS MODE KILN_SOURCE_DIR KILN_BINARY_DIR WORK_DIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "RunConsumerTest.cmake: -D${var}=... is missing")
  endif()
endforeach()

function(run_step what)
  message(STATUS "kiln.consumer.${MODE}: ${what}")
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)  # output goes straight to CTest's log
  if(NOT rc EQUAL 0)
    list(JOIN ARGN " " command)
    message(FATAL_ERROR "kiln.consumer.${MODE}: ${what} failed (exit ${rc}):\n  ${command}")
  endif()
endfunction()

file(REMOVE_RECURSE "${WORK_DIR}")
set(build_dir "${WORK_DIR}/build")
set(configure_args -S "${KILN_SOURCE_DIR}/tests/consumer" -B "${build_dir}" -DKILN_CONSUMER_MODE=${MODE}
                   -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
if(GENERATOR)
  list(APPEND configure_args -G "${GENERATOR}")
endif()
if(MAKE_PROGRAM)
  list(APPEND configure_args "-DCMAKE_MAKE_PROGRAM=${MAKE_PROGRAM}")
endif()
if(CXX_COMPILER)
  list(APPEND configure_args "-DCMAKE_CXX_COMPILER=${CXX_COMPILER}")
endif()
if(CXX_LAUNCHER)
  list(APPEND configure_args "-DCMAKE_CXX_COMPILER_LAUNCHER=${CXX_LAUNCHER}")
endif()
if(BUILD_TYPE)
  list(APPEND configure_args "-DCMAKE_BUILD_TYPE=${BUILD_TYPE}")
endif()
if(CUDA)
  list(APPEND configure_args -DKILN_CONSUMER_CUDA=ON)
  if(CUDA_COMPILER)
    list(APPEND configure_args "-DCMAKE_CUDA_COMPILER=${CUDA_COMPILER}")
  endif()
  if(CUDA_ARCHITECTURES)  # comma-separated; through CUDAARCHS, which takes a list as it is
    string(REPLACE "," ";" archs "${CUDA_ARCHITECTURES}")
    set(ENV{CUDAARCHS} "${archs}")
  endif()
  if(CUDA_LAUNCHER)
    list(APPEND configure_args "-DCMAKE_CUDA_COMPILER_LAUNCHER=${CUDA_LAUNCHER}")
  endif()
endif()

if(MODE STREQUAL "install")
  set(prefix "${WORK_DIR}/prefix")
  set(install_args --install "${KILN_BINARY_DIR}" --prefix "${prefix}")
  if(BUILD_TYPE)
    list(APPEND install_args --config "${BUILD_TYPE}")
  endif()
  run_step("install kiln into ${prefix}" "${CMAKE_COMMAND}" ${install_args})
  list(APPEND configure_args "-DCMAKE_PREFIX_PATH=${prefix}")
  if(COMPONENTS)
    list(JOIN COMPONENTS "," components)  # a ';' would not survive execute_process
    list(APPEND configure_args "-DKILN_CONSUMER_COMPONENTS=${components}")
  endif()
elseif(MODE STREQUAL "subdir")
  list(APPEND configure_args "-DKILN_SOURCE_DIR=${KILN_SOURCE_DIR}" -DKILN_BUILD_TESTS=OFF
                             -DKILN_BUILD_EXAMPLES=OFF -DKILN_BUILD_BENCH=OFF)
  if(CUDA)
    list(APPEND configure_args -DKILN_ENABLE_CUDA=ON)
  else()
    list(APPEND configure_args -DKILN_ENABLE_CUDA=OFF)
  endif()
else()
  message(FATAL_ERROR "RunConsumerTest.cmake: MODE must be install or subdir, not '${MODE}'")
endif()

run_step("configure" "${CMAKE_COMMAND}" ${configure_args})
run_step("build" "${CMAKE_COMMAND}" --build "${build_dir}" --parallel 2)
run_step("run kiln_consumer" "${build_dir}/kiln_consumer")
foreach(component IN ITEMS cuda cu nccl mpi)
  if(EXISTS "${build_dir}/kiln_consumer_${component}")
    run_step("run kiln_consumer_${component}" "${build_dir}/kiln_consumer_${component}")
  endif()
endforeach()
if(EXISTS "${build_dir}/kiln_consumer_zlib")
  run_step("run kiln_consumer_zlib" "${build_dir}/kiln_consumer_zlib" "${build_dir}")
endif()
