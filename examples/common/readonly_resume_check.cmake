# CTest kiln.example.mlp_boston.readonly_resume (cmake -P): resuming into a folder the user cannot write
# stops before training, says why, and leaves the checkpoint as it was.
#   cmake -DPROGRAM=<mlp_boston> -DDATA=<csv> -DDIR=<scratch folder> -P readonly_resume_check.cmake
# Trains 2 epochs with --checkpoint DIR/readonly_resume/c.safetensors, makes the folder read-only and
# resumes to 4 epochs; the run must fail with `--checkpoint ...: cannot write into ... (Permission
# denied)` before its third epoch, and the checkpoint must keep its bytes. As root (who writes anywhere) the resume runs as
# nobody through setpriv; where that cannot be done (no setpriv, or nobody cannot reach the program or
# the data) the check prints "skipped:" and CTest reports it skipped.
foreach(_var PROGRAM DATA DIR)
  if(NOT DEFINED ${_var})
    message(FATAL_ERROR "readonly_resume_check.cmake: pass -D${_var}=...")
  endif()
endforeach()
set(_folder "${DIR}/readonly_resume")
set(_checkpoint "${_folder}/c.safetensors")
if(EXISTS "${_folder}")
  file(CHMOD "${_folder}" DIRECTORY_PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE
       WORLD_READ WORLD_EXECUTE)
  file(REMOVE_RECURSE "${_folder}")
endif()
file(MAKE_DIRECTORY "${_folder}")

execute_process(COMMAND "${PROGRAM}" --data "${DATA}" --device cpu --epochs 2 --checkpoint "${_checkpoint}"
                RESULT_VARIABLE _status OUTPUT_VARIABLE _out ERROR_VARIABLE _err)
if(NOT EXISTS "${_checkpoint}")
  message(FATAL_ERROR "the first run wrote no checkpoint (exit ${_status}):\n${_out}${_err}")
endif()
file(SHA256 "${_checkpoint}" _before)

set(_as "")
execute_process(COMMAND id -u OUTPUT_VARIABLE _uid OUTPUT_STRIP_TRAILING_WHITESPACE)
if(_uid STREQUAL "0")
  find_program(_setpriv setpriv)
  if(NOT _setpriv)
    message("skipped: running as root and there is no setpriv to resume as nobody")
    return()
  endif()
  set(_as "${_setpriv}" --reuid=65534 --regid=65534 --clear-groups --)
  execute_process(COMMAND ${_as} test -r "${DATA}" -a -x "${PROGRAM}" -a -r "${_checkpoint}" RESULT_VARIABLE _reach)
  if(NOT _reach EQUAL 0)
    message("skipped: nobody cannot read the program, the data or the checkpoint under ${DIR}")
    return()
  endif()
endif()

# Read-only for everyone (r-x), once nothing can skip: a skipped run leaves the folder as it was.
file(CHMOD "${_folder}" DIRECTORY_PERMISSIONS OWNER_READ OWNER_EXECUTE GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)

execute_process(COMMAND ${_as} "${PROGRAM}" --data "${DATA}" --device cpu --epochs 4 --checkpoint "${_checkpoint}"
                        --resume
                RESULT_VARIABLE _status OUTPUT_VARIABLE _out ERROR_VARIABLE _err TIMEOUT 90)
file(CHMOD "${_folder}" DIRECTORY_PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE
     WORLD_READ WORLD_EXECUTE)
file(SHA256 "${_checkpoint}" _after)
if(_status EQUAL 0)
  message(FATAL_ERROR "the read-only resume exited 0, expected an error:\n${_out}${_err}")
endif()
if(NOT "${_out}${_err}" MATCHES "--checkpoint [^\n]*c\\.safetensors: cannot write into [^\n]*readonly_resume \\(Permission denied\\)")
  message(FATAL_ERROR "the read-only resume did not say why:\n${_out}${_err}")
endif()
if(_out MATCHES "epoch 3/4")
  message(FATAL_ERROR "the read-only resume trained before refusing:\n${_out}")
endif()
if(NOT _before STREQUAL _after)
  message(FATAL_ERROR "the checkpoint changed")
endif()
string(REGEX MATCH "--checkpoint [^\n]*" _said "${_out}${_err}")
message("read-only resume check passed: ${_said}")
