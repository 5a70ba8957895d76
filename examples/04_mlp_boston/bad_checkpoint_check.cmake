# CTest kiln.example.mlp_boston.bad_checkpoint (cmake -P): --resume from a damaged checkpoint ends with a
# one-line error that names the file and what is wrong, exit status 1, for a damaged header and for a
# training state whose metadata is not a count, and for a checkpoint of the model's weights alone.
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

# Resumes from `file`, which must be refused: exit status 1 and one error line matching `expect`.
function(_refused file name expect)
  execute_process(COMMAND "${PROGRAM}" --data "${DATA}" --device cpu --epochs 2 --checkpoint "${file}" --resume
                  OUTPUT_VARIABLE _out ERROR_VARIABLE _err RESULT_VARIABLE _rc)
  message("$ mlp_boston --resume (${name})\n${_out}${_err}exit status ${_rc}")
  string(REGEX MATCHALL "error:" _errors "${_err}")  # one error line (its text may hold a ";")
  list(LENGTH _errors _count)
  if(NOT _rc EQUAL 1 OR NOT _count EQUAL 1 OR NOT _err MATCHES "mlp_boston: error: [^\n]*${expect}")
    message(FATAL_ERROR "FAILED (${name}): expected exit status 1 and one error line matching '${expect}'")
  endif()
endfunction()

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
  _refused("${_bad}" ${name} "${expect}")
endfunction()

_resume(bad_epoch "\"epoch\":\"1\"" "\"epoch\":\"x\""
        "mlp_boston_bad_epoch\\.safetensors: metadata 'epoch' is 'x'; expected a whole number")
_resume(bad_dtype "\"0.bias\":{\"dtype\":\"F32\"" "\"0.bias\":{\"dtype\":12345"
        "mlp_boston_bad_dtype\\.safetensors: tensor '0\\.bias': dtype must be a string such as \"F32\", got 12345")
# The model's weights alone (as save_checkpoint(path, model) or torch's save_file(state_dict) write
# them): no epoch, no optimizer state, no metadata.
set(_weights "${DIR}/mlp_boston_model_only.safetensors")
execute_process(COMMAND "${PYTHON}" -c "import json, struct, sys
data = open(sys.argv[1], 'rb').read()
n = struct.unpack('<Q', data[:8])[0]
header, body = json.loads(data[8:8 + n]), data[8 + n:]
kept, parts, at = {}, [], 0
for name, t in header.items():
    if name == '__metadata__' or name.startswith('optimizer'):
        continue
    b, e = t['data_offsets']
    parts.append(body[b:e])
    kept[name] = dict(t, data_offsets=[at, at + e - b])
    at += e - b
assert kept and len(kept) < len(header) - 1, sorted(header)
text = json.dumps(kept).encode()
text += b' ' * (-len(text) % 8)
open(sys.argv[2], 'wb').write(struct.pack('<Q', len(text)) + text + b''.join(parts))" "${_good}" "${_weights}"
                RESULT_VARIABLE _rc)
if(NOT _rc EQUAL 0)
  message(FATAL_ERROR "FAILED: could not make ${_weights}")
endif()
_refused("${_weights}" "model only" "mlp_boston_model_only\\.safetensors: a checkpoint of the model only \\(no epoch, no optimizer state\\); --resume needs a training state")
message("bad checkpoint check passed")
