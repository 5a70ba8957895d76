# CTest kiln.example.<program>.precision (cmake -P): mixed-precision training reaches fp32's result.
#   cmake -DPROGRAM=<example> -DKEY=test_accuracy|test_rmse -DTOLERANCE=<x> [-DRELATIVE=ON]
#         -DARGS="<arguments;separated;by;semicolons>" -P precision_check.cmake
# Runs the program with ARGS in fp32, fp16 and bf16 (same seed), reads KEY from each `result:` line and
# fails unless every run ends ok=1 and |KEY(fp16) - KEY(fp32)| and |KEY(bf16) - KEY(fp32)| are at most
# TOLERANCE (times KEY(fp32) with RELATIVE): issue #5's 0.5 percentage points of accuracy, 5 % of RMSE.
foreach(_var PROGRAM KEY TOLERANCE ARGS)
  if(NOT DEFINED ${_var})
    message(FATAL_ERROR "precision_check.cmake: pass -D${_var}=...")
  endif()
endforeach()

include(${CMAKE_CURRENT_LIST_DIR}/results.cmake)  # _run_result(), _micro()
foreach(_precision IN ITEMS fp32 fp16 bf16)
  _run_result(_${_precision} ${KEY} "${PROGRAM}" ${ARGS} --precision ${_precision})
endforeach()

_micro(${_fp32} _ref)
_micro(${TOLERANCE} _tol)
if(RELATIVE)
  math(EXPR _tol "${_tol} * ${_ref} / 1000000")
endif()
foreach(_precision IN ITEMS fp16 bf16)
  _micro(${_${_precision}} _v)
  math(EXPR _diff "${_v} - ${_ref}")
  if(_diff LESS 0)
    math(EXPR _diff "-${_diff}")
  endif()
  if(_diff GREATER _tol)
    message(FATAL_ERROR "FAILED: ${_precision} ${KEY}=${_${_precision}} is more than the allowed difference "
                        "(${_tol} millionths) from fp32's ${_fp32}")
  endif()
endforeach()
message("precision check passed: ${KEY} fp32 ${_fp32}, fp16 ${_fp16}, bf16 ${_bf16}")
