# CTest kiln.example.mlp_boston.resume (cmake -P): --checkpoint and --resume continue training exactly.
#   cmake -DPROGRAM=<mlp_boston> -DDATA=<csv> -DDIR=<scratch folder> [-DPRECISION=fp16]
#         [-DPARALLEL=3 | -DPARALLEL=ddp -DMPIEXEC=<mpiexec>] -P resume_check.cmake
# Runs 20 epochs in one go, then 10 epochs with --checkpoint and --metrics and 10 more with --resume, and
# fails unless the resumed run says where it resumed, ends ok=1 with the same test RMSE and train loss as the
# run in one go (the parameters, Adam's moments and step count and the epoch's shuffle are all restored),
# and the metrics file holds one JSON line per epoch, 1 to 20, each with a test_rmse; a third resume, with
# nothing left to train, makes no empty --metrics file. With PRECISION (fp16,
# bf16) every run trains in that precision: under fp16 the loss scaler's state goes through the checkpoint.
# With PARALLEL (a replica count) every run is --parallel dp --devices PARALLEL: the checkpoint holds the
# first replica and is loaded into all of them. With PARALLEL=ddp every run is `MPIEXEC -n 2 ...
# --parallel ddp`: rank 0 writes the checkpoint and the metrics, both ranks load the checkpoint.
foreach(_var PROGRAM DATA DIR)
  if(NOT DEFINED ${_var})
    message(FATAL_ERROR "resume_check.cmake: pass -D${_var}=...")
  endif()
endforeach()
set(_precision_args "")
set(_suffix "")
if(DEFINED PRECISION)
  set(_precision_args --precision ${PRECISION})
  set(_suffix "_${PRECISION}")
endif()
set(_launch "")
if(PARALLEL STREQUAL "ddp")
  set(_launch "${MPIEXEC}" -n 2)
  list(APPEND _precision_args --parallel ddp --batch-size 64)
  set(_suffix "${_suffix}_ddp")
elseif(DEFINED PARALLEL)
  list(APPEND _precision_args --parallel dp --devices ${PARALLEL})
  set(_suffix "${_suffix}_dp${PARALLEL}")
endif()
set(_checkpoint "${DIR}/mlp_boston_resume${_suffix}.safetensors")
set(_metrics "${DIR}/mlp_boston_resume${_suffix}.jsonl")
file(REMOVE "${_checkpoint}" "${_metrics}")

# Runs the program with the arguments after `ok`; sets <prefix>_out (stdout) and <prefix>_result (its
# `result:` line). With ok TRUE, the run must end ok=1 (exit status 0); else it may stop short of the
# baseline (10 epochs do: exit status 1), but must get to its `result:` line.
function(_run prefix ok)
  execute_process(COMMAND ${_launch} "${PROGRAM}" --data "${DATA}" --device cpu ${_precision_args} ${ARGN}
                  OUTPUT_VARIABLE _out ERROR_VARIABLE _err RESULT_VARIABLE _rc)
  string(REPLACE ";" " " _args "${ARGN}")
  message("$ mlp_boston ${_args}\n${_out}${_err}")
  if(NOT _out MATCHES "(^|\n)(result: [^\n]*ok=([01]))\n")
    message(FATAL_ERROR "FAILED: no `result: ... ok=` line (exit status ${_rc})")
  endif()
  set(_result "${CMAKE_MATCH_2}")
  if(ok AND NOT (_rc EQUAL 0 AND CMAKE_MATCH_3 STREQUAL "1"))
    message(FATAL_ERROR "FAILED: exit status ${_rc}, ok=${CMAKE_MATCH_3}; expected 0 and ok=1")
  endif()
  math(EXPR _status "1 - ${CMAKE_MATCH_3}")  # ok=1: exit status 0; ok=0: 1
  if(NOT _rc EQUAL _status)
    message(FATAL_ERROR "FAILED: exit status ${_rc} with ok=${CMAKE_MATCH_3}")
  endif()
  set(${prefix}_out "${_out}" PARENT_SCOPE)
  set(${prefix}_result "${_result}" PARENT_SCOPE)
endfunction()

_run(whole TRUE --epochs 20)
_run(first FALSE --epochs 10 --checkpoint "${_checkpoint}" --metrics "${_metrics}")
_run(resumed TRUE --epochs 20 --checkpoint "${_checkpoint}" --metrics "${_metrics}" --resume)

if(NOT resumed_out MATCHES "resumed from [^\n]*mlp_boston_resume${_suffix}.safetensors after epoch 10\n")
  message(FATAL_ERROR "FAILED: the resumed run does not say `resumed from ... after epoch 10`")
endif()
if(resumed_out MATCHES "(^|\n)epoch [0-9]/20:|(^|\n)epoch 10/20:")
  message(FATAL_ERROR "FAILED: the resumed run trained an epoch the checkpoint had done")
endif()
foreach(_key test_rmse train_loss epochs)
  string(REGEX MATCH "${_key}=[^ ]+" _a "${whole_result}")
  string(REGEX MATCH "${_key}=[^ ]+" _b "${resumed_result}")
  if(NOT _a OR NOT _a STREQUAL _b)
    message(FATAL_ERROR "FAILED: 20 epochs in one go give ${_a}, 10 + 10 resumed give ${_b}")
  endif()
endforeach()

file(STRINGS "${_metrics}" _lines)
list(LENGTH _lines _count)
if(NOT _count EQUAL 20)
  message(FATAL_ERROR "FAILED: ${_metrics} holds ${_count} lines, not 20 (one per epoch)")
endif()
set(_epoch 0)
foreach(_line IN LISTS _lines)
  math(EXPR _epoch "${_epoch} + 1")
  string(JSON _e ERROR_VARIABLE _json_error GET "${_line}" epoch)
  string(JSON _rmse ERROR_VARIABLE _json_error2 GET "${_line}" test_rmse)
  if(_json_error OR _json_error2 OR NOT _e EQUAL _epoch)
    message(FATAL_ERROR "FAILED: metrics line ${_epoch} is not epoch ${_epoch} with a test_rmse: ${_line}")
  endif()
endforeach()

# Resumed again at --epochs 20: nothing to train, the checkpoint's model evaluated; a --metrics file that
# is not there stays so (no empty file: the run wrote no epoch).
if(NOT DEFINED PARALLEL AND NOT DEFINED PRECISION)
  set(_absent "${DIR}/mlp_boston_resume_absent.jsonl")
  file(REMOVE "${_absent}")
  _run(done TRUE --epochs 20 --checkpoint "${_checkpoint}" --metrics "${_absent}" --resume)
  if(NOT done_out MATCHES "nothing to train")
    message(FATAL_ERROR "FAILED: the run resumed at --epochs 20 does not say `nothing to train`")
  endif()
  if(EXISTS "${_absent}")
    message(FATAL_ERROR "FAILED: the run with nothing to train made ${_absent}")
  endif()
endif()
message("resume check passed: ${resumed_result}")
