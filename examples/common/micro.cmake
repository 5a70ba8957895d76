# _micro(<value> <out>): a non-negative decimal ("3.4881") as integer millionths (3488100), because
# CMake's math() is integer only. Used by the examples' comparison scripts.
function(_micro value out)
  string(REGEX MATCH "^([0-9]+)\\.?([0-9]*)$" _m "${value}")
  set(_int "${CMAKE_MATCH_1}")
  set(_frac "${CMAKE_MATCH_2}000000")
  string(SUBSTRING "${_frac}" 0 6 _frac)
  math(EXPR _v "${_int} * 1000000 + 1${_frac} - 1000000")  # 1 in front: no leading zeros to misread
  set(${out} ${_v} PARENT_SCOPE)
endfunction()
