# What --metrics keeps (examples/common/report.hpp keep_metrics), run with
#   cmake -DPROGRAM=<example> -DCHECKPOINT=<a checkpoint> -DMETRICS=<file> "-DARGS=..." -P this
# 1. A file holding epochs 1, 2, 3 and a line that is not JSON; resuming from the checkpoint (epoch 2, or 1)
#    with --epochs 1 (nothing to train) keeps exactly the lines of the checkpoint's epochs.
# 2. A fresh run of one epoch starts the file: exactly one line, epoch 1.
# Prints "metrics check passed".
file(WRITE "${METRICS}" "{\"epoch\":1,\"train_loss\":1}\n{\"epoch\":2,\"train_loss\":2}\n{\"epoch\":3,\"train_loss\":3}\nnot json\n")
execute_process(COMMAND "${PROGRAM}" ${ARGS} --epochs 1 --checkpoint "${CHECKPOINT}" --resume --metrics "${METRICS}"
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc TIMEOUT 240)
if(NOT rc EQUAL 0 OR NOT out MATCHES "nothing to train: the checkpoint has done ([0-9]+) of")
  message(FATAL_ERROR "FAILED: the resumed run (exit status ${rc}):\n${out}${err}")
endif()
set(done ${CMAKE_MATCH_1})  # 2 after the resume test, 1 when only the smoke test ran before
set(want "")
foreach(e RANGE 1 3)
  if(e LESS_EQUAL done)
    string(APPEND want "{\"epoch\":${e},\"train_loss\":${e}}\n")
  endif()
endforeach()
file(READ "${METRICS}" kept)
if(NOT kept STREQUAL want)
  message(FATAL_ERROR "FAILED: resuming after epoch ${done} should keep the lines of epochs 1..${done}, the file holds:\n${kept}")
endif()
execute_process(COMMAND "${PROGRAM}" ${ARGS} --epochs 1 --metrics "${METRICS}"
                OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc TIMEOUT 240)
if(NOT out MATCHES "\nresult: ")  # its accuracy is not the point here (exit status 1 when low)
  message(FATAL_ERROR "FAILED: the fresh run (exit status ${rc}):\n${out}${err}")
endif()
file(STRINGS "${METRICS}" lines)
list(LENGTH lines n)
if(NOT n EQUAL 1 OR NOT lines MATCHES "\"epoch\":1[,}]")
  message(FATAL_ERROR "FAILED: a fresh run of one epoch should leave one line, epoch 1; the file holds ${n}:\n${lines}")
endif()
message("metrics check passed")
