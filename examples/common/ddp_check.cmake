# CTest kiln.example.<program>.ddp (cmake -P): --parallel ddp on 2 ranks trains like one process.
#   cmake -DPROGRAM=<example> -DMPIEXEC=<mpiexec> -DKEY=test_accuracy|test_rmse -DTOLERANCE=<x>
#         -DBATCH=<per-rank batch> -DARGS="<arguments;separated;by;semicolons>" -P ddp_check.cmake
# Runs the program once with --batch-size 2*BATCH, and under `mpiexec -n 2` with --parallel ddp
# --batch-size BATCH. The DistributedSampler shares of one shuffled order make the same global batches
# (rank r takes every other sample), and the averaged gradient is the global batch's mean, so both runs
# must end ok=1 with KEY within TOLERANCE and train_loss within 1 %; the ddp run must also log its ranks once.
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
# The epoch's training loss too (the ranks' means averaged over the job: equal shares, so the global
# batch's mean): within 1 % of one process's.
foreach(_run IN ITEMS single ddp)
  if(NOT _${_run}_line MATCHES "train_loss=([0-9.]+)")
    message(FATAL_ERROR "FAILED: no train_loss= in `${_${_run}_line}`")
  endif()
  _micro(${CMAKE_MATCH_1} _${_run}_loss)
endforeach()
math(EXPR _loss_diff "${_ddp_loss} - ${_single_loss}")
if(_loss_diff LESS 0)
  math(EXPR _loss_diff "-${_loss_diff}")
endif()
math(EXPR _loss_allowed "${_single_loss} / 100")
if(_loss_diff GREATER _loss_allowed)
  message(FATAL_ERROR "FAILED: ddp train_loss (${_ddp_loss} millionths) differs from one process's (${_single_loss}) by more than 1 %")
endif()
message("ddp check passed: ${KEY} one process ${_single}, 2 ranks ${_ddp}; train_loss ${_single_loss} and ${_ddp_loss} millionths")
