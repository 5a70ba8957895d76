# CTest kiln.example.<program>.<what> (cmake -P): two ways of running the same training end alike.
#   cmake -DPROGRAM=<example> -DKEYS=<key;key> -DTOLERANCE=<relative> -DARGS=<common;arguments>
#         -DA=<first run's;arguments> -DB=<second run's;arguments> -P same_result_check.cmake
# Runs PROGRAM with ARGS + A and with ARGS + B, reads each KEY from the `result:` lines and fails unless
# both end ok=1 and every |KEY(B) - KEY(A)| is at most TOLERANCE times KEY(A) (a float sum in another
# order may differ in its last bits; a wrong accumulation or gradient sum moves them by far more).
foreach(_var PROGRAM KEYS TOLERANCE ARGS A B)
  if(NOT DEFINED ${_var})
    message(FATAL_ERROR "same_result_check.cmake: pass -D${_var}=...")
  endif()
endforeach()

include(${CMAKE_CURRENT_LIST_DIR}/results.cmake)  # _run_result(), _micro()
list(GET KEYS 0 _first)
_run_result(_a ${_first} "${PROGRAM}" ${ARGS} ${A})
_run_result(_b ${_first} "${PROGRAM}" ${ARGS} ${B})
_micro(${TOLERANCE} _tol)
foreach(_key IN LISTS KEYS)
  foreach(_run IN ITEMS a b)
    if(NOT _${_run}_line MATCHES "${_key}=([0-9.]+)")
      message(FATAL_ERROR "FAILED: no ${_key}= in `${_${_run}_line}`")
    endif()
    set(_${_run}_value "${CMAKE_MATCH_1}")
  endforeach()
  _micro(${_a_value} _va)
  _micro(${_b_value} _vb)
  math(EXPR _allowed "${_tol} * ${_va} / 1000000")
  math(EXPR _diff "${_vb} - ${_va}")
  if(_diff LESS 0)
    math(EXPR _diff "-${_diff}")
  endif()
  if(_diff GREATER _allowed)
    message(FATAL_ERROR "FAILED: ${_key} ${_b_value} (${B}) is more than ${TOLERANCE} of ${_a_value} (${A}) away")
  endif()
  message("${_key}: ${_a_value} (${A}) and ${_b_value} (${B})")
endforeach()
message("same result check passed")
