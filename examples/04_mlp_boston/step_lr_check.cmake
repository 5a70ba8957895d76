# CTest kiln.example.mlp_boston.step_lr (cmake -P): --lr-step-size / --lr-gamma (torch's StepLR, stepped after
# every epoch) and --weight-decay, through a checkpoint.
#   cmake -DPROGRAM=<mlp_boston> -DDATA=<csv> -DDIR=<scratch folder> -P step_lr_check.cmake
# 1. 6 epochs with StepLR(step_size=2, gamma=0.5) from the default lr 0.01 train at 0.01, 0.01, 0.005, 0.005, 0.0025,
#    0.0025 (the metrics' lr of each epoch), and the run's line names Adam's weight decay and the schedule.
# 2. 3 epochs with --checkpoint, then --resume to 6, end with the same test RMSE, test loss and train loss
#    as the run in one go, epoch for epoch at the same lr (the checkpoint records the schedule's base lr).
# 3. A resume with --lr 0.002 trains epoch 4 at 0.002 and decays from there (epochs 5 and 6 at 0.001).
foreach(_var PROGRAM DATA DIR)
  if(NOT DEFINED ${_var})
    message(FATAL_ERROR "step_lr_check.cmake: pass -D${_var}=...")
  endif()
endforeach()
set(_folder "${DIR}/step_lr")
file(REMOVE_RECURSE "${_folder}")
file(MAKE_DIRECTORY "${_folder}")
set(_args --data "${DATA}" --device cpu --lr-step-size 2 --lr-gamma 0.5 --weight-decay 0.0001)  # lr 0.01: mlp_boston's

# Runs the program with _args and the arguments given; sets _out and the `result:` line's numbers.
macro(_run)
  execute_process(COMMAND "${PROGRAM}" ${_args} ${ARGN} OUTPUT_VARIABLE _out ERROR_VARIABLE _err
                  RESULT_VARIABLE _rc TIMEOUT 120)
  string(REPLACE ";" " " _shown "${ARGN}")
  message("$ mlp_boston ... ${_shown}\n${_out}${_err}exit status ${_rc}")
  if(NOT _out MATCHES "\nresult: test_rmse=([0-9.]+) [^\n]*test_loss=([0-9.]+) train_loss=([0-9.]+) ")
    message(FATAL_ERROR "FAILED: no `result:` line with test_rmse, test_loss and train_loss")
  endif()
  set(_numbers "${CMAKE_MATCH_1} ${CMAKE_MATCH_2} ${CMAKE_MATCH_3}")
endmacro()

# The lr of each line of a metrics file, in order, into `var` (a list).
function(_lrs file var)
  file(STRINGS "${file}" _lines)
  set(_list "")
  foreach(_line IN LISTS _lines)
    if(NOT _line MATCHES "\"lr\":([0-9.e+-]+)")
      message(FATAL_ERROR "FAILED: no lr in the metrics line `${_line}`")
    endif()
    list(APPEND _list "${CMAKE_MATCH_1}")
  endforeach()
  set(${var} "${_list}" PARENT_SCOPE)
endfunction()

_run(--epochs 6 --metrics "${_folder}/whole.jsonl")
set(_whole "${_numbers}")
if(NOT _out MATCHES "Adam\\(lr=0\\.01, weight_decay=1e-04\\), StepLR\\(step_size=2, gamma=0\\.5\\)")
  message(FATAL_ERROR "FAILED: the run's line does not name the weight decay and the schedule")
endif()
_lrs("${_folder}/whole.jsonl" _got)
if(NOT _got STREQUAL "0.01;0.01;0.005;0.005;0.0025;0.0025")
  message(FATAL_ERROR "FAILED: the epochs' lr are ${_got}; expected 0.01;0.01;0.005;0.005;0.0025;0.0025")
endif()

_run(--epochs 3 --checkpoint "${_folder}/c.safetensors" --metrics "${_folder}/part.jsonl")
file(COPY_FILE "${_folder}/c.safetensors" "${_folder}/copy.safetensors")
_run(--epochs 6 --checkpoint "${_folder}/c.safetensors" --metrics "${_folder}/part.jsonl" --resume)
if(NOT _out MATCHES "resumed from [^\n]*c\\.safetensors after epoch 3\n")
  message(FATAL_ERROR "FAILED: the second run did not resume after epoch 3")
endif()
if(NOT _numbers STREQUAL _whole)
  message(FATAL_ERROR "FAILED: 3 + 3 epochs end at ${_numbers} (test RMSE, test loss, train loss); 6 in one go at ${_whole}")
endif()
_lrs("${_folder}/part.jsonl" _got)
if(NOT _got STREQUAL "0.01;0.01;0.005;0.005;0.0025;0.0025")
  message(FATAL_ERROR "FAILED: resumed, the epochs' lr are ${_got}")
endif()

_run(--epochs 6 --checkpoint "${_folder}/copy.safetensors" --metrics "${_folder}/new_lr.jsonl" --resume --lr 0.002)
_lrs("${_folder}/new_lr.jsonl" _got)
if(NOT _got STREQUAL "0.002;0.001;0.001")
  message(FATAL_ERROR "FAILED: resumed with --lr 0.002, epochs 4-6 trained at ${_got}; expected 0.002;0.001;0.001")
endif()
message("step lr check passed: ${_whole}")
