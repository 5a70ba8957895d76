# Test data for mlp_boston, written at configure time (CI machines may lack python3-sklearn's real file):
#
#   kiln_write_boston_fixture(<path> <rows>)  a CSV in the format of scikit-learn's boston_house_prices.csv
#       (a count line "<rows>,13,,,,,,,,,,,,", the quoted header "CRIM",...,"LSTAT","MEDV", <rows> rows of
#       numbers) with features drawn in Boston's ranges by a fixed linear congruential generator and
#       MEDV = 22.5 + a linear function of the standardized features + 2 (z_LSTAT^2 - 1) + 2 max(0, z_RM)
#       + uniform noise in [-0.5, 0.5] (standard deviation 0.29; MEDV's own is about 6.5). The same file on
#       every machine: integer arithmetic only, numbers with 4 decimals.
#   kiln_write_boston_bad_fixture(<path>)     the same format, two rows, the second with NOX = "0.5x".
#
# Written only when the content changes, so re-configuring does not touch the files.

# name:offset:span:weight: the uniform range's offset and span (units of 1e-4) and the weight of the
# standardized feature in MEDV (units of 1e-4)
set(_kiln_boston_columns
  "CRIM:0:900000:-10000"      "ZN:0:1000000:3000"       "INDUS:4600:273000:-3000"   "CHAS:0:0:0"
  "NOX:3850:4860:-10000"      "RM:35610:52190:30000"    "AGE:29000:971000:-2000"    "DIS:11300:109700:-15000"
  "RAD:10000:230000:5000"     "TAX:1870000:5240000:-5000" "PTRATIO:126000:94000:-20000" "B:3200:3937000:4000"
  "LSTAT:17300:362000:-40000")

# Writes `content` to `path` unless the file already holds exactly that.
function(_kiln_write_if_changed path content)
  if(EXISTS "${path}")
    file(READ "${path}" _old)
    if(_old STREQUAL content)
      return()
    endif()
  endif()
  file(WRITE "${path}" "${content}")
endfunction()

# The integer `v` (units of 1e-4) as a decimal with 4 places: -12345 -> "-1.2345".
function(_kiln_decimal v out)
  set(_sign "")
  if(v LESS 0)
    set(_sign "-")
    math(EXPR v "-(${v})")
  endif()
  math(EXPR _whole "${v} / 10000")
  math(EXPR _frac "${v} % 10000 + 10000")  # 5 digits: drop the leading 1
  string(SUBSTRING "${_frac}" 1 4 _frac)
  set(${out} "${_sign}${_whole}.${_frac}" PARENT_SCOPE)
endfunction()

function(kiln_write_boston_fixture path rows)
  set(_header "")
  foreach(_column IN LISTS _kiln_boston_columns)
    string(REPLACE ":" ";" _c "${_column}")
    list(GET _c 0 _name)
    string(APPEND _header "\"${_name}\",")
  endforeach()
  set(_text "${rows},13,,,,,,,,,,,,\n${_header}\"MEDV\"\n")
  set(_x 20261130)  # LCG state: x = (1103515245 x + 12345) mod 2^31, as in C's rand()
  foreach(_row RANGE 1 ${rows})
    set(_line "")
    set(_medv 225000)
    foreach(_column IN LISTS _kiln_boston_columns)
      string(REPLACE ":" ";" _c "${_column}")
      list(GET _c 0 _name)
      list(GET _c 1 _offset)
      list(GET _c 2 _span)
      list(GET _c 3 _weight)
      math(EXPR _x "(1103515245 * ${_x} + 12345) % 2147483648")
      math(EXPR _u "(${_x} / 256) % 10000")  # uniform in [0, 10000)
      if(_name STREQUAL "CHAS")  # a 0/1 indicator (15 % ones), worth +2.5
        if(_u LESS 1500)
          string(APPEND _line "1,")
          math(EXPR _medv "${_medv} + 25000")
        else()
          string(APPEND _line "0,")
        endif()
        continue()
      endif()
      math(EXPR _v "${_offset} + ${_u} * ${_span} / 10000")
      _kiln_decimal(${_v} _cell)
      string(APPEND _line "${_cell},")
      # z = (u - 5000) / 2887 is the feature standardized (a uniform's standard deviation is span / sqrt 12)
      math(EXPR _medv "${_medv} + ${_weight} * (${_u} - 5000) / 2887")
      if(_name STREQUAL "LSTAT")
        math(EXPR _medv "${_medv} + 20000 * (${_u} - 5000) * (${_u} - 5000) / 8334769 - 20000")
      elseif(_name STREQUAL "RM" AND _u GREATER 5000)
        math(EXPR _medv "${_medv} + 20000 * (${_u} - 5000) / 2887")
      endif()
    endforeach()
    math(EXPR _x "(1103515245 * ${_x} + 12345) % 2147483648")
    math(EXPR _medv "${_medv} + (${_x} / 256) % 10001 - 5000")  # noise in [-0.5, 0.5]
    _kiln_decimal(${_medv} _cell)
    string(APPEND _text "${_line}${_cell}\n")
  endforeach()
  _kiln_write_if_changed("${path}" "${_text}")
endfunction()

function(kiln_write_boston_bad_fixture path)
  string(CONCAT _text
    "2,13,,,,,,,,,,,,\n"
    "\"CRIM\",\"ZN\",\"INDUS\",\"CHAS\",\"NOX\",\"RM\",\"AGE\",\"DIS\",\"RAD\",\"TAX\",\"PTRATIO\",\"B\",\"LSTAT\",\"MEDV\"\n"
    "0.00632,18,2.31,0,0.538,6.575,65.2,4.09,1,296,15.3,396.9,4.98,24\n"
    "0.02731,0,7.07,0,0.5x,6.421,78.9,4.9671,2,242,17.8,396.9,9.14,21.6\n")
  _kiln_write_if_changed("${path}" "${_text}")
endfunction()
