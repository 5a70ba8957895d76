# ExpectCompileFail.cmake — the body of the kiln.compile_fail.<name> tests.
#
#   cmake -DBUILD_DIR=<build tree> -DTARGET=compile_fail_<name> -DSOURCE=<tests/compile_fail/name.cpp>
#         [-DCONFIG=<config>] -P ExpectCompileFail.cmake
#
# Builds TARGET and succeeds only if the build FAILS and its output matches the regex on the first
# line of SOURCE (`// expect: <regex>`, CMake regex syntax). An optional second line `// errors: N`
# also caps the compiler's `error:` lines at N (the misuse is reported once, with no cascade after
# it). The build output is always printed.
foreach(var IN ITEMS BUILD_DIR TARGET SOURCE)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "ExpectCompileFail.cmake: -D${var}=... is missing")
  endif()
endforeach()

file(STRINGS "${SOURCE}" first_line LIMIT_COUNT 1)
if(NOT first_line MATCHES "^//[ \t]*expect:[ \t]*(.*)$")
  message(FATAL_ERROR "${SOURCE}: the first line must be `// expect: <regex of the diagnostic>`")
endif()
string(STRIP "${CMAKE_MATCH_1}" expected)
# The second line, read as text (file(STRINGS) would split a first line holding ';' into list items).
file(READ "${SOURCE}" source_text LIMIT 4096)
set(most_errors "")
if(source_text MATCHES "^[^\n]*\n//[ \t]*errors:([^\n]*)")
  string(STRIP "${CMAKE_MATCH_1}" most_errors)
  if(NOT most_errors MATCHES "^[0-9]+$")
    message(FATAL_ERROR "${SOURCE}: the second line must be `// errors: N`, N a count; it says `${most_errors}`")
  endif()
endif()

set(build_args --build "${BUILD_DIR}" --target "${TARGET}")
if(CONFIG)
  list(APPEND build_args --config "${CONFIG}")
endif()
execute_process(COMMAND "${CMAKE_COMMAND}" ${build_args}
                OUTPUT_VARIABLE output ERROR_VARIABLE output RESULT_VARIABLE rc)
message("${output}")

if(rc EQUAL 0)
  message(FATAL_ERROR "${TARGET}: ${SOURCE} compiled, but it must not (see its `// expect:` line)")
endif()
if(NOT output MATCHES "${expected}")
  message(FATAL_ERROR "${TARGET}: the build failed (exit ${rc}), but no line matches the `// expect:` "
                      "regex of ${SOURCE}:\n  ${expected}")
endif()
if(NOT most_errors STREQUAL "")
  string(REGEX MATCHALL "error:" error_lines "${output}")
  list(LENGTH error_lines error_count)
  if(error_count GREATER most_errors)
    message(FATAL_ERROR "${TARGET}: the expected diagnostic came with ${error_count} `error:` lines; "
                        "${SOURCE} allows at most ${most_errors} (its `// errors:` line)")
  endif()
endif()
message(STATUS "${TARGET}: failed to compile, with the expected diagnostic")
