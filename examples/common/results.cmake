# What the examples' comparison scripts (precision_check.cmake, ddp_check.cmake) share.
#
# _run_result(<out> <key> <command>...): runs the command, fails unless it ends with exit status 0 and a
#   `result: ... ok=1` line, and sets <out> to that line's <key>= value (and <out>_line to the line,
#   <out>_output to the standard output).
# _micro(<value> <out>): a non-negative decimal ("3.4881") as integer millionths (3488100), because
#   CMake's math() is integer only.
function(_run_result out key)
  execute_process(COMMAND ${ARGN} OUTPUT_VARIABLE _out ERROR_VARIABLE _err RESULT_VARIABLE _rc TIMEOUT 240)
  string(REPLACE ";" " " _shown "${ARGN}")
  if(NOT _out MATCHES "(^|\n)(result: [^\n]*ok=1)\n" OR NOT _rc EQUAL 0)
    message(FATAL_ERROR "FAILED: `${_shown}` did not end ok=1 (exit status ${_rc}):\n${_out}${_err}")
  endif()
  set(_line "${CMAKE_MATCH_2}")
  if(NOT _line MATCHES "${key}=([0-9.]+)")
    message(FATAL_ERROR "FAILED: no ${key}= in `${_line}`")
  endif()
  message("$ ${_shown}\n  ${_line}")
  set(${out} "${CMAKE_MATCH_1}" PARENT_SCOPE)
  set(${out}_line "${_line}" PARENT_SCOPE)
  set(${out}_output "${_out}" PARENT_SCOPE)
endfunction()

function(_micro value out)
  string(REGEX MATCH "^([0-9]+)\\.?([0-9]*)$" _m "${value}")
  set(_int "${CMAKE_MATCH_1}")
  set(_frac "${CMAKE_MATCH_2}000000")
  string(SUBSTRING "${_frac}" 0 6 _frac)
  math(EXPR _v "${_int} * 1000000 + 1${_frac} - 1000000")  # 1 in front: no leading zeros to misread
  set(${out} ${_v} PARENT_SCOPE)
endfunction()
