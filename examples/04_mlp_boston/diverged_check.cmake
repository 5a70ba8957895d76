# CTest kiln.example.mlp_boston.diverged_keeps_checkpoint (cmake -P): a resumed run whose loss stops being
# finite (--lr 1e30) exits 1 and leaves the checkpoint of its last finite epoch as it was, byte for byte.
#   cmake -DPROGRAM=<mlp_boston> -DDATA=<csv> -DDIR=<scratch folder> -P diverged_check.cmake
foreach(_var PROGRAM DATA DIR)
  if(NOT DEFINED ${_var})
    message(FATAL_ERROR "diverged_check.cmake: pass -D${_var}=...")
  endif()
endforeach()
set(_checkpoint "${DIR}/mlp_boston_diverged.safetensors")
file(REMOVE "${_checkpoint}")
execute_process(COMMAND "${PROGRAM}" --data "${DATA}" --device cpu --epochs 2 --checkpoint "${_checkpoint}"
                RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
if(NOT EXISTS "${_checkpoint}")
  message(FATAL_ERROR "the first run (exit ${_rc}) wrote no checkpoint:\n${_out}${_err}")
endif()
file(MD5 "${_checkpoint}" _before)
execute_process(COMMAND "${PROGRAM}" --data "${DATA}" --device cpu --epochs 4 --checkpoint "${_checkpoint}" --resume
                        --lr 1e30
                RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
message("${_out}${_err}")
if(NOT _rc EQUAL 1)
  message(FATAL_ERROR "the diverging run exited ${_rc}, not 1")
endif()
if(NOT _err MATCHES "a loss is not finite: [^\n]*mlp_boston_diverged.safetensors is not overwritten")
  message(FATAL_ERROR "the diverging run did not say that the checkpoint was kept")
endif()
file(MD5 "${_checkpoint}" _after)
if(NOT _before STREQUAL _after)
  message(FATAL_ERROR "the checkpoint changed: a diverged epoch overwrote the last finite one")
endif()
file(REMOVE "${_checkpoint}")
message("diverged check passed: the checkpoint of epoch 2 is unchanged")
