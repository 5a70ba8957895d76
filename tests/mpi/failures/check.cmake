# Runs tests/mpi/failures/rank_failure.cpp under mpiexec -n 2 with rank 1 failing (MODE: kill, hang,
# throw) and checks that the job ends with a non-zero status within LIMIT seconds (no hang), with the
# message that says why (EXPECT, a regex over stdout + stderr). MPIEXEC=none runs PROGRAM MODE alone
# (watchdog_exit.cpp: a process that must end itself).
# GROUP_TIMEOUT, where given, is the group's timeout in seconds (the program's second argument); REJECT,
# a regex the output must not match (what the failure must have prevented).
#   cmake -DMPIEXEC=... -DPROGRAM=... -DMODE=... -DLIMIT=... -DEXPECT=... [-DGROUP_TIMEOUT=...] [-DREJECT=...]
#         -P check.cmake
foreach(v IN ITEMS MPIEXEC PROGRAM MODE LIMIT EXPECT)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "check.cmake: -D${v}=... is required")
  endif()
endforeach()
string(TIMESTAMP start "%s" UTC)
set(launch ${MPIEXEC} -n 2)
if(MPIEXEC STREQUAL "none")
  set(launch "")
endif()
execute_process(COMMAND ${launch} ${PROGRAM} ${MODE} ${GROUP_TIMEOUT}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out TIMEOUT ${LIMIT})
string(TIMESTAMP stop "%s" UTC)
math(EXPR elapsed "${stop} - ${start}")
message("${out}")
message("${launch} ${PROGRAM} ${MODE}: status '${rc}' after ${elapsed} s")
if(rc MATCHES "timeout")
  message(FATAL_ERROR "the job still ran after ${LIMIT} s: a failed rank left the others hanging")
endif()
if(rc EQUAL 0)
  message(FATAL_ERROR "the job exited 0 although rank 1 failed (${MODE})")
endif()
if(NOT out MATCHES "${EXPECT}")
  message(FATAL_ERROR "the output does not say why the job ended (expected the regex: ${EXPECT})")
endif()
if(DEFINED REJECT AND out MATCHES "${REJECT}")
  message(FATAL_ERROR "the output shows what the failure must have prevented (the regex: ${REJECT})")
endif()
