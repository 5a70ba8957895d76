# CTest kiln.example.mlp_boston.changed_resume (cmake -P): a resume whose flags change what the model sees
# or the order it is trained in is refused before training; one that changes only how it runs goes on.
#   cmake -DPROGRAM=<mlp_boston> -DDATA=<csv> -DDIR=<scratch folder> [-DMPIEXEC=<mpiexec>] -P changed_resume_check.cmake
# Trains 2 epochs with --checkpoint, then resumes to 3 epochs with one setting changed at a time: --limit,
# --batch-size, --accumulate, --target, --weight-decay, --lr-step-size, and --data with a row fewer. Each must exit 1 with one line
# `the checkpoint was trained with X; this run has Y: resume with Z` (examples/common/checkpoint.hpp
# run_settings), train nothing and leave the checkpoint's bytes as they were. Then a resume from a copy of
# the data in another folder, in bf16, on 2 DataParallel replicas, 1 loader worker and --lr 0.005 (which
# replaces the checkpoint's) must train epoch 3 at that lr.
# With MPIEXEC (--parallel ddp): the checkpoint comes from `MPIEXEC -n 2 ... --parallel ddp --batch-size
# 64`; one process must refuse --batch-size 64 (batches of 128 in all) and accept --batch-size 128.
foreach(_var PROGRAM DATA DIR)
  if(NOT DEFINED ${_var})
    message(FATAL_ERROR "changed_resume_check.cmake: pass -D${_var}=...")
  endif()
endforeach()
set(_suffix "")
if(DEFINED MPIEXEC)
  set(_suffix "_ddp")
endif()
set(_folder "${DIR}/changed_resume${_suffix}")
file(REMOVE_RECURSE "${_folder}")
file(MAKE_DIRECTORY "${_folder}/moved")
set(_checkpoint "${_folder}/c.safetensors")

# The data with its last row dropped (the count line says one row fewer), and a copy elsewhere.
file(STRINGS "${DATA}" _lines)
list(LENGTH _lines _count)
list(GET _lines 0 _count_line)
if(NOT _count_line MATCHES "^([0-9]+)(,.*)$")
  message(FATAL_ERROR "FAILED: ${DATA} does not start with a count line")
endif()
math(EXPR _rows "${CMAKE_MATCH_1} - 1")
set(_rest "${CMAKE_MATCH_2}")
math(EXPR _last "${_count} - 2")
set(_shorter "${_rows}${_rest}\n")
foreach(_i RANGE 1 ${_last})
  list(GET _lines ${_i} _line)
  string(APPEND _shorter "${_line}\n")
endforeach()
file(WRITE "${_folder}/shorter.csv" "${_shorter}")
file(COPY "${DATA}" DESTINATION "${_folder}/moved")
get_filename_component(_name "${DATA}" NAME)
set(_moved "${_folder}/moved/${_name}")

# Runs the program (through `launch`, a list: empty or MPIEXEC -n 2) with --device cpu, the checkpoint
# and the arguments after `launch`; sets _out (stdout and stderr) and _rc.
macro(_run launch)
  execute_process(COMMAND ${launch} "${PROGRAM}" --device cpu --checkpoint "${_checkpoint}" ${ARGN}
                  OUTPUT_VARIABLE _o ERROR_VARIABLE _e RESULT_VARIABLE _rc TIMEOUT 120)
  set(_out "${_o}${_e}")
  string(REPLACE ";" " " _args "${ARGN}")
  message("$ mlp_boston ${_args}\n${_out}exit status ${_rc}")
endmacro()

# A resume with `args` must be refused with `expect` (a regular expression) and change nothing.
function(_refused expect)
  file(SHA256 "${_checkpoint}" _before)
  _run("" --resume --epochs 3 ${ARGN})
  file(SHA256 "${_checkpoint}" _after)
  string(REGEX MATCHALL "error:" _errors "${_out}")
  list(LENGTH _errors _n)
  if(NOT _rc EQUAL 1 OR NOT _n EQUAL 1)
    message(FATAL_ERROR "FAILED: expected exit status 1 and one error line")
  endif()
  if(NOT _out MATCHES "mlp_boston: error: [^\n]*c\\.safetensors: the checkpoint was trained with ${expect}\n")
    message(FATAL_ERROR "FAILED: the error does not match 'the checkpoint was trained with ${expect}'")
  endif()
  if(_out MATCHES "epoch 3/3" OR NOT _before STREQUAL _after)
    message(FATAL_ERROR "FAILED: the refused resume trained or changed the checkpoint")
  endif()
endfunction()

if(DEFINED MPIEXEC)
  _run("${MPIEXEC};-n;2" --data "${DATA}" --epochs 2 --parallel ddp --batch-size 64)
  if(NOT EXISTS "${_checkpoint}")
    message(FATAL_ERROR "FAILED: the ddp run wrote no checkpoint")
  endif()
  _refused("batches of 128; this run has --batch-size 64: resume with --batch-size 128" --data "${DATA}" --batch-size 64)
  _run("" --data "${DATA}" --resume --epochs 3 --batch-size 128)
  if(NOT _out MATCHES "resumed from [^\n]*c\\.safetensors after epoch 2\n(.*\n)?epoch 3/3: [^\n]*\nresult: ")
    message(FATAL_ERROR "FAILED: one process with --batch-size 128 did not resume the ddp run of 2 x 64")
  endif()
  message("changed resume check passed: ddp 2 x 64 resumes as 1 x 128, not 1 x 64")
  return()
endif()

_run("" --data "${DATA}" --epochs 2)
if(NOT EXISTS "${_checkpoint}")
  message(FATAL_ERROR "FAILED: the first run wrote no checkpoint")
endif()
_refused("no --limit; this run has --limit 100: resume with no --limit" --data "${DATA}" --limit 100)
_refused("batches of 128; this run has --batch-size 64: resume with --batch-size 128" --data "${DATA}" --batch-size 64)
_refused("--accumulate 1; this run has --accumulate 2: resume with --accumulate 1" --data "${DATA}" --accumulate 2)
_refused("--target MEDV; this run has --target LSTAT: resume with --target MEDV" --data "${DATA}" --target LSTAT)
_refused("--weight-decay 0; this run has --weight-decay 0.1: resume with --weight-decay 0" --data "${DATA}" --weight-decay 0.1)
_refused("no --lr-step-size; this run has --lr-step-size 2: resume with no --lr-step-size" --data "${DATA}" --lr-step-size 2)
_refused("a --data of [0-9]+ rows, [^\n]*; this run has a --data of ${_rows} rows, [^\n]*: resume with the --data it was trained on"
         --data "${_folder}/shorter.csv")

# The same data elsewhere, another precision, parallel mode, worker count and --lr (which replaces the
# checkpoint's, 0.01): resumed, epoch 3 trained at the new lr.
_run("" --data "${_moved}" --resume --epochs 3 --precision bf16 --parallel dp --devices 2 --workers 1 --lr 0.005)
if(NOT _out MATCHES "resumed from [^\n]*c\\.safetensors after epoch 2, lr 0\\.005 from --lr \\(the checkpoint's: 0\\.01\\)\n(.*\n)?epoch 3/3: [^\n]*\nresult: [^\n]*precision=bf16")
  message(FATAL_ERROR "FAILED: the resume with the data moved, bf16, 2 replicas and --lr did not train epoch 3")
endif()
if(NOT _out MATCHES "Adam\\(lr=0\\.005\\)")
  message(FATAL_ERROR "FAILED: the run's line does not show --lr's 0.005")
endif()
message("changed resume check passed: --limit, --batch-size, --accumulate, --target, --weight-decay, --lr-step-size and --data refused")
