# CTest kiln.example.<program>.ddp (cmake -P): --parallel ddp on 2 ranks trains like one process.
#   cmake -DPROGRAM=<example> -DMPIEXEC=<mpiexec> -DKEY=test_accuracy|test_rmse -DTOLERANCE=<x>
#         -DBATCH=<per-rank batch> -DARGS="<arguments;separated;by;semicolons>" -P ddp_check.cmake
# Runs the program once with --batch-size 2*BATCH, and under `mpiexec -n 2` with --parallel ddp
# --batch-size BATCH. The DistributedSampler shares of one shuffled order make the same global batches
# (rank r takes every other sample), and the averaged gradient is the global batch's mean, so both runs
# must end ok=1 with KEY within TOLERANCE; the ddp run must also log its ranks once.
foreach(_var PROGRAM MPIEXEC KEY TOLERANCE BATCH ARGS)
  if(NOT DEFINED ${_var})
    message(FATAL_ERROR "ddp_check.cmake: pass -D${_var}=...")
  endif()
endforeach()
include(${CMAKE_CURRENT_LIST_DIR}/results.cmake)  # _run_result(), _micro()

math(EXPR _global "2 * ${BATCH}")
_run_result(_single ${KEY} "${PROGRAM}" ${ARGS} --device cpu --batch-size ${_global})
_run_result(_ddp ${KEY} "${MPIEXEC}" -n 2 "${PROGRAM}" ${ARGS} --device cpu --parallel ddp --batch-size ${BATCH})
string(REGEX MATCHALL "DistributedDataParallel: 2 ranks over mpi \\(cpu\\)" _lines "${_ddp_output}")
list(LENGTH _lines _n)
if(NOT _n EQUAL 1)
  message(FATAL_ERROR "FAILED: the ddp run logged `DistributedDataParallel: 2 ranks over mpi (cpu)` ${_n} times, not once:\n${_ddp_output}")
endif()
_micro(${_single} _a)
_micro(${_ddp} _b)
_micro(${TOLERANCE} _tol)
math(EXPR _diff "${_b} - ${_a}")
if(_diff LESS 0)
  math(EXPR _diff "-${_diff}")
endif()
if(_diff GREATER _tol)
  message(FATAL_ERROR "FAILED: ddp ${KEY}=${_ddp} differs from one process's ${_single} by more than ${TOLERANCE}")
endif()
message("ddp check passed: ${KEY} one process ${_single}, 2 ranks ${_ddp}")
