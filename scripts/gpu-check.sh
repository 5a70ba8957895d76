#!/usr/bin/env bash
# gpu-check.sh: build kiln for sm_90, run every CUDA test and the GPU benches, print a short table.
#
#   scripts/gpu-check.sh                 # configure + build (preset cuda: sm_90 + PTX) here, then run
#   scripts/gpu-check.sh --prebuilt DIR  # run executables staged by scripts/gpu-stage (no build):
#     tar xJf .gpu/stage.tar.xz -C /tmp && scripts/gpu-check.sh --prebuilt /tmp/stage
#
# Logs, bench JSON and the table go to build/gpu-check/ (to /tmp/gpu-check when $OUT is set, the device
# tool's folder, which takes back 8 files at most: then $OUT gets table.txt, kiln-bench.md and
# gpu-check-logs.tgz with everything). Each row is printed as it ends; the table comes last. Budget:
# GPU_CHECK_BUDGET seconds for the rows (default 450, so that a device call of 560 s leaves time to pack
# the results); a row gets what is left of it, a row with under 15 s left is skipped. Exit status: 0 when
# nothing failed or was skipped for time.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
prebuilt=""
while [ $# -gt 0 ]; do
  case "$1" in
    --prebuilt)
      [ $# -ge 2 ] || { echo "gpu-check: --prebuilt needs a folder (scripts/gpu-stage's stage)" >&2; exit 2; }
      prebuilt=$2; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu-check: unknown argument $1" >&2; exit 2 ;;
  esac
done
if [ -n "$prebuilt" ] && [ ! -d "$prebuilt" ]; then
  echo "gpu-check: --prebuilt $prebuilt: no such folder" >&2
  exit 2
fi
if [ -n "${OUT:-}" ]; then out=/tmp/gpu-check; else out=$root/build/gpu-check; fi
rm -rf "$out" && mkdir -p "$out"
# Tests find their fixtures through KILN_PARITY_DIR, or by the source path they were built from (the
# benches their Python scripts): on a machine where the checkout sits elsewhere, link the path the stage
# was built in (gpu-stage writes it) to this checkout, only if it is free.
export KILN_PARITY_DIR="$root/tests/parity/fixtures"
built_in=/work/main
[ -n "$prebuilt" ] && [ -f "$prebuilt/source_root" ] && built_in=$(cat "$prebuilt/source_root")
if [ -n "$prebuilt" ] && [ ! -e "$built_in" ] && [ "$(id -u)" -eq 0 ]; then
  mkdir -p "$(dirname "$built_in")" && ln -s "$root" "$built_in"
fi
start=$(date +%s)
deadline=$(( start + ${GPU_CHECK_BUDGET:-450} ))
# Open MPI as root (the device machine's commands run as root); NCCL says why a communicator fails.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 NCCL_DEBUG=${NCCL_DEBUG:-WARN}

if [ -n "$prebuilt" ]; then
  bin=$(cd "$prebuilt" && pwd)
  export LD_LIBRARY_PATH="$bin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  # CUDA's large libraries (cuBLAS, cuDNN, NCCL) come from this machine: find the folders that hold them.
  for lib in $(for e in "$bin"/*; do [ -f "$e" ] && ldd "$e" 2>/dev/null; done | awk '/not found/{print $1}' | sort -u); do
    d=$(find / -xdev \( -path /proc -o -path /sys \) -prune -o -name "$lib" -print -quit 2>/dev/null)
    [ -n "$d" ] && LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$(dirname "$d")" && echo "gpu-check: $lib from $(dirname "$d")"
  done
  export LD_LIBRARY_PATH
  # PyTorch (the benches start python3) keeps its own CUDA libraries: the staged ones must not shadow them.
  export KILN_TORCH_PYTHON=${KILN_TORCH_PYTHON:-"env -u LD_LIBRARY_PATH python3"}
else
  cmake --preset cuda -DKILN_BUILD_BENCH=ON >"$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
  cmake --build build/cuda -j"$(nproc)" >"$out/build.log" 2>&1 || { grep -m20 -A5 error "$out/build.log"; exit 1; }
  bin=$root/build/cuda
  deadline=$(( $(date +%s) + ${GPU_CHECK_BUDGET:-450} ))  # the budget is for the rows, from here
fi

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv 2>/dev/null | tee "$out/nvidia-smi.csv"

rows=()
failed=0
row() {  # row NAME STATUS SECONDS SUMMARY: a table row, printed now as well
  rows+=("$(printf '%-40s %-13s %6ss  %s' "$1" "$2" "$3" "$4")")
  echo "${rows[-1]}"
}
last_rc=0 last_secs=0.0
run() {  # run NAME TIMEOUT CMD...: record passed / failed / skipped (exit 77) within the budget
  local name=$1 limit=$2; shift 2
  local left=$(( deadline - $(date +%s) )) t0 rc
  if [ "$left" -lt 15 ]; then
    row "$name" "FAILED(time)" 0.0 "not run: the budget (GPU_CHECK_BUDGET) is spent"
    failed=1 last_rc=124
    return
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  t0=$(date +%s%N)
  timeout -k 5 "$limit" "$@" >"$out/$name.log" 2>&1
  rc=$?
  last_rc=$rc
  local ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  local secs="$((ms / 1000)).$(( (ms % 1000) / 100 ))"
  last_secs=$secs
  local status=passed
  if [ $rc -eq 77 ]; then status=skipped; elif [ $rc -ne 0 ]; then status="FAILED($rc)"; failed=1; fi
  # timeout's 124 (or 137 after -k) only where the limit was reached: a program that exits 124 itself,
  # or a kill -9 from elsewhere (the OOM killer), is a failure with its own code.
  if { [ $rc -eq 124 ] || [ $rc -eq 137 ]; } && [ "$ms" -ge $(( limit * 1000 )) ]; then
    status="FAILED(time)"
  else
    [ $rc -eq 124 ] || [ $rc -eq 137 ] && last_rc=1
  fi
  local summary=$(grep -E -m1 "test cases? out of|No errors detected|skipping|CUDA available|result:" "$out/$name.log" ||
                  grep -E -m1 "error|failure" "$out/$name.log")
  summary=$(echo "$summary" | sed 's/^ *//' | cut -c1-70)
  row "$name" "$status" "$secs" "$summary"
}

skip() {  # skip NAME WHY: a row that says why it did not run
  row "$1" skipped 0.0 "$2"
}

# Where nvidia-smi lists a GPU, a CUDA test that finds none fails (exit 1) instead of reporting itself
# skipped (exit 77): a broken driver or runtime must not pass the check (tests/support/main_cuda.cpp).
if [ "$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')" -gt 0 ]; then export KILN_REQUIRE_GPU=1; fi  # not grep -q: SIGPIPE under pipefail

if [ -z "$(find "$bin" -type f -perm -u+x -name 'kiln_cuda_*' -print -quit)" ]; then
  echo "gpu-check: no kiln_cuda_* test executables under $bin: nothing would be checked" >&2
  exit 1
fi
kinfo=$(find "$bin" -type f -name kiln-info -perm -u+x -not -path '*/consumer/*' | head -1)
[ -n "$kinfo" ] && run kiln-info 30 "$kinfo"
while IFS= read -r -d '' exe; do  # (NUL-separated: a path with spaces stays one)
  run "$(basename "$exe")" 180 "$exe" --color_output=no --report_level=short --log_level=test_suite
done < <(find "$bin" -type f -perm -u+x -name 'kiln_cuda_*' -print0 | sort -z)
# Distributed<Nccl> (issue #6): one rank per GPU under mpiexec (one GPU: world size 1).
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then  # only the visible ones get a rank
  gpus=$(tr ',' '\n' <<<"$CUDA_VISIBLE_DEVICES" | grep -c .)
fi
[ "${gpus:-0}" -ge 1 ] || gpus=1
# Each rank's OpenMP gets its share of the cores (by default every rank would take them all).
omp=$(( $(nproc) / gpus )); [ "$omp" -ge 1 ] || omp=1
launch=(mpiexec --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS="$omp" -n "$gpus")
mpi=yes
echo "gpu-check: mpiexec: $(command -v mpiexec || echo none), orted: $(command -v orted || echo none)"
if ! command -v mpiexec >/dev/null; then  # a bare machine: an MPI singleton (world size 1)
  gpus=1
  launch=()
  # Open MPI 4's singleton MPI_Init starts orted: without it (and its plugins) MPI cannot start here.
  command -v orted >/dev/null || mpi="no Open MPI runtime on this machine (no mpiexec, no orted)"
elif ! timeout -k 5 30 "${launch[@]}" true >"$out/mpiexec-probe.log" 2>&1; then
  # An mpiexec that cannot start processes here (another Open MPI than the staged libmpi, say).
  mpi="mpiexec -n $gpus cannot start processes here (see mpiexec-probe.log)"
fi
mpi_run() {  # mpi_run NAME TIMEOUT CMD...: run, or skip once an MPI row has run out of time (a hang in MPI_Init)
  local name=$1
  if [ "$mpi" != yes ]; then skip "$name" "$mpi"; return; fi
  run "$@"
  if [ "$last_rc" -eq 124 ] || [ "$last_rc" -eq 137 ]; then mpi="an earlier MPI row ran out of time ($name)"; fi  # (run: only a real timeout leaves 124/137)
}
while IFS= read -r -d '' exe; do
  mpi_run "$(basename "$exe")_np$gpus" 120 "${launch[@]}" "$exe" \
    --color_output=no --report_level=short --log_level=test_suite
done < <(find "$bin" -type f -perm -u+x -name 'kiln_nccl_test_*' -print0 | sort -z)
job_ddp=$(find "$bin" -type f -perm -u+x -name mlp_boston | head -1)
boston=$(find "$bin" -name boston_fixture.csv | head -1)
if [ -n "$job_ddp" ] && [ -n "$boston" ]; then
  mpi_run "mlp_boston_ddp_np$gpus" 90 "${launch[@]}" "$job_ddp" \
    --device cuda --parallel ddp --data "$boston" --epochs 30
  # DataParallel's GPU replicas (every GPU of the machine).
  run mlp_boston_dp_gpus 90 "$job_ddp" --device cuda --parallel dp --data "$boston" --epochs 30
fi
# The main job, one epoch on the GPU (gpu-stage stages a part of Fashion-MNIST's training set; Debian's
# package when built here), in fp32 and in the mixed precisions (issue #5: tensor cores).
data="$bin/fashion-mnist"
[ -d "$data" ] || data=/usr/share/datasets/fashion-mnist
job=$(find "$bin" -type f -perm -u+x -name lenet_fashion_mnist | head -1)
if [ -n "$job" ] && [ -d "$data" ]; then
  run lenet_fashion_mnist 120 "$job" --device cuda --epochs 1 --data "$data" --metrics "$out/lenet_fashion_mnist.jsonl"
  for p in fp16 bf16; do
    run "lenet_fashion_mnist_$p" 120 "$job" --device cuda --epochs 1 --precision "$p" --data "$data" \
      --metrics "$out/lenet_fashion_mnist_$p.jsonl"
  done
fi
while IFS= read -r -d '' exe; do
  extra=()
  # bench_loader_cuda skips itself without Fashion-MNIST; a --data that names a missing folder is an error.
  [ "$(basename "$exe")" = bench_loader_cuda ] && [ -d "$data" ] && extra=(--data "$data")
  run "$(basename "$exe")" 150 "$exe" --json "$out/$(basename "$exe").json" "${extra[@]}"
done < <(find "$bin" -type f -perm -u+x -name 'bench_*_cuda' ! -name 'bench_distributed_cuda' -print0 | sort -z)
kb=$(find "$bin" -type f -perm -u+x -name kiln-bench | head -1)  # issue #7: fused vs unfused on the GPU
if [ -n "$kb" ]; then
  run kiln-bench 200 "$kb" --device cuda --precisions fp32,fp16,bf16 --batches 128,1024 \
    --repeat 10 --torch no --json "$out/kiln-bench.json" --plot "$out/kiln-bench-plots"
  # A fused step that could not be captured is timed op by op: shown in the table, not a quiet fallback
  # (not a failure: cuDNN's legacy calls may refuse capture; the cross entropy's label count is a CUB
  # reduction inside the captured steps since the ninth session).
  if [ "$last_rc" -eq 0 ] && grep -q "CUDA graph capture failed" "$out/kiln-bench.log" 2>/dev/null; then
    rows[-1]="$(printf '%-40s %-13s %6ss  %s' kiln-bench "WARN(graph)" "$last_secs" \
      "$(grep -c 'CUDA graph capture failed' "$out/kiln-bench.log") steps not captured: see kiln-bench.log")"
    echo "${rows[-1]}"
  fi
fi
dist=$(find "$bin" -type f -perm -u+x -name bench_distributed_cuda | head -1)
if [ -n "$dist" ]; then
  # Scaling per device count (issue #6): 2, 4, ... ranks up to every GPU; each job times one GPU alone too.
  for n in 2 4 8; do
    if [ "$n" -lt "$gpus" ]; then
      mpi_run "bench_distributed_cuda_np$n" 150 mpiexec --allow-run-as-root --oversubscribe \
        -x OMP_NUM_THREADS="$(( $(nproc) / n > 0 ? $(nproc) / n : 1 ))" -n "$n" "$dist" \
        --json "$out/bench_distributed_cuda_np$n.json"
    fi
  done
  mpi_run "bench_distributed_cuda_np$gpus" 150 "${launch[@]}" "$dist" --json "$out/bench_distributed_cuda.json"
fi
if [ -n "$kb" ]; then
  # Last, with what is left of the budget: next to PyTorch eager and torch.compile (each configuration a
  # fresh compile on a cold cache: the slowest row).
  run kiln-bench-vs-torch 300 "$kb" --device cuda --models lenet,mlp --precisions fp32,fp16 --batches 128 \
    --repeat 10 --elements 0 --json "$out/kiln-bench-vs-torch.json"
  # A comparison that measured no PyTorch is a failed row, not a quiet pass.
  if [ "$last_rc" -eq 0 ] && grep -q "PyTorch: not measured" "$out/kiln-bench-vs-torch.log" 2>/dev/null; then
    rows[-1]="$(printf '%-40s %-13s %6ss  %s' kiln-bench-vs-torch "FAILED(torch)" "$last_secs" \
      "PyTorch not measured: see kiln-bench-vs-torch.log")"
    echo "${rows[-1]}"
    failed=1
  fi
  # The tables for docs/benchmarks.md (paste them there with the date and machine).
  jsons=()
  for j in "$out/kiln-bench.json" "$out/kiln-bench-vs-torch.json"; do [ -f "$j" ] && jsons+=("$j"); done
  [ ${#jsons[@]} -gt 0 ] && timeout -k 5 60 python3 "$root/scripts/bench-table" "${jsons[@]}" \
    >"$out/kiln-bench.md" 2>>"$out/kiln-bench.log"
fi

# The benches' ratios (kiln-bench's are in kiln-bench.md: hundreds of them), then the table, last: the
# device tool's reply keeps the end of the output.
echo
for j in "$out"/*.json; do
  case "$(basename "$j")" in kiln-bench*.json) continue ;; esac
  [ -f "$j" ] && timeout -k 5 30 python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[1].split('/')[-1], json.dumps(d.get('ratios', {})))" "$j" 2>/dev/null
done
{
  echo "== kiln gpu-check $(date -u +%Y-%m-%dT%H:%MZ), $(( $(date +%s) - start ))s =="
  printf '%-40s %-13s %7s  %s\n' target status time summary
  printf '%s\n' "${rows[@]}"
} >"$out/table.txt"
if [ -n "${OUT:-}" ]; then  # three files back: the table, the benchmark tables, every log in one archive
  cp "$out/table.txt" "$OUT/"
  [ -f "$out/kiln-bench.md" ] && cp "$out/kiln-bench.md" "$OUT/"
  tar -C "$(dirname "$out")" -czf "$OUT/gpu-check-logs.tgz" "$(basename "$out")"
fi
echo
cat "$out/table.txt"
exit $failed
