# CTest kiln.example.mlp_boston.bad_checkpoint (cmake -P): --resume from a damaged checkpoint ends with a
# one-line error that names the file and what is wrong, exit status 1, for a damaged header and for a
# training state whose metadata is not a count.
#   cmake -DPROGRAM=<mlp_boston> -DDATA=<csv> -DDIR=<scratch folder> -DPYTHON=<python3> -P bad_checkpoint_check.cmake
# Writes a checkpoint with one epoch, then copies it twice with python3 (same length, so the header size
# still fits): "epoch":"1" -> "epoch":"x", and tensor 0.bias's "dtype":"F32" -> "dtype":12345.
foreach(_var PROGRAM DATA DIR PYTHON)
  if(NOT DEFINED ${_var})
    message(FATAL_ERROR "bad_checkpoint_check.cmake: pass -D${_var}=...")
  endif()
endforeach()
set(_good "${DIR}/mlp_boston_bad_checkpoint.safetensors")
file(REMOVE "${_good}")
execute_process(COMMAND "${PROGRAM}" --data "${DATA}" --device cpu --epochs 1 --checkpoint "${_good}"
                OUTPUT_QUIET ERROR_QUIET)
if(NOT EXISTS "${_good}")
  message(FATAL_ERROR "FAILED: mlp_boston --epochs 1 --checkpoint wrote no ${_good}")
endif()

# Copies the checkpoint with `from` replaced by `to` (each once, same length) and resumes from the copy.
function(_resume name from to expect)
  set(_bad "${DIR}/mlp_boston_${name}.safetensors")
  execute_process(COMMAND "${PYTHON}" -c "import sys
data = open(sys.argv[1], 'rb').read()
a, b = sys.argv[3].encode(), sys.argv[4].encode()
assert len(a) == len(b) and data.count(a) == 1, (a, data.count(a))
open(sys.argv[2], 'wb').write(data.replace(a, b))" "${_good}" "${_bad}" "${from}" "${to}" RESULT_VARIABLE _rc)
  if(NOT _rc EQUAL 0)
    message(FATAL_ERROR "FAILED: could not make ${_bad}")
  endif()
  execute_process(COMMAND "${PROGRAM}" --data "${DATA}" --device cpu --epochs 2 --checkpoint "${_bad}" --resume
                  OUTPUT_VARIABLE _out ERROR_VARIABLE _err RESULT_VARIABLE _rc)
  message("$ mlp_boston --resume (${name})\n${_out}${_err}exit status ${_rc}")
  string(REGEX MATCHALL "error:" _errors "${_err}")  # one error line (its text may hold a ";")
  list(LENGTH _errors _count)
  if(NOT _rc EQUAL 1 OR NOT _count EQUAL 1 OR NOT _err MATCHES "mlp_boston: error: [^\n]*${expect}")
    message(FATAL_ERROR "FAILED (${name}): expected exit status 1 and one error line matching '${expect}'")
  endif()
endfunction()

_resume(bad_epoch "\"epoch\":\"1\"" "\"epoch\":\"x\""
        "mlp_boston_bad_epoch\\.safetensors: metadata 'epoch' is 'x'; expected a whole number")
_resume(bad_dtype "\"0.bias\":{\"dtype\":\"F32\"" "\"0.bias\":{\"dtype\":12345"
        "mlp_boston_bad_dtype\\.safetensors: tensor '0\\.bias': dtype must be a string such as \"F32\", got 12345")
message("bad checkpoint check passed")
