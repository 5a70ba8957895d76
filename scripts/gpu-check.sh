#!/usr/bin/env bash
# gpu-check.sh: build kiln for sm_90, run every CUDA test and the GPU benches, print a short table.
#
#   scripts/gpu-check.sh                 # configure + build (preset cuda: sm_90 + PTX) here, then run
#   scripts/gpu-check.sh --prebuilt DIR  # run executables staged by scripts/gpu-stage (no build):
#     tar xJf .gpu/stage.tar.xz -C /tmp && scripts/gpu-check.sh --prebuilt /tmp/stage
#
# Results (logs, bench JSON, the table) go to $OUT when set, else build/gpu-check/. Budget: under 8
# minutes on an H200 including the build; each test has a timeout. Exit status: 0 when nothing failed.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
prebuilt=""
while [ $# -gt 0 ]; do
  case "$1" in
    --prebuilt)
      [ $# -ge 2 ] || { echo "gpu-check: --prebuilt needs a folder (scripts/gpu-stage's stage)" >&2; exit 2; }
      prebuilt=$2; shift 2 ;;
    -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu-check: unknown argument $1" >&2; exit 2 ;;
  esac
done
if [ -n "$prebuilt" ] && [ ! -d "$prebuilt" ]; then
  echo "gpu-check: --prebuilt $prebuilt: no such folder" >&2
  exit 2
fi
out=${OUT:-$root/build/gpu-check}
# Tests find their fixtures through KILN_PARITY_DIR, or by the source path they were built from: on a
# machine where the checkout sits elsewhere, link that path to this checkout (only if it is free).
export KILN_PARITY_DIR="$root/tests/parity/fixtures"
if [ -n "$prebuilt" ] && [ ! -e /work/main ] && [ "$(id -u)" -eq 0 ]; then
  mkdir -p /work && ln -s "$root" /work/main
fi
mkdir -p "$out"
start=$(date +%s)

if [ -n "$prebuilt" ]; then
  bin=$(cd "$prebuilt" && pwd)
  export LD_LIBRARY_PATH="$bin/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  # CUDA's large libraries (cuBLAS, cuDNN, NCCL) come from this machine: find the folders that hold them.
  for lib in $(for e in "$bin"/*; do [ -f "$e" ] && ldd "$e" 2>/dev/null; done | awk '/not found/{print $1}' | sort -u); do
    d=$(find / -xdev \( -path /proc -o -path /sys \) -prune -o -name "$lib" -print -quit 2>/dev/null)
    [ -n "$d" ] && LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$(dirname "$d")" && echo "gpu-check: $lib from $(dirname "$d")"
  done
  export LD_LIBRARY_PATH
else
  cmake --preset cuda -DKILN_BUILD_BENCH=ON >"$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
  cmake --build build/cuda -j"$(nproc)" >"$out/build.log" 2>&1 || { grep -m20 -A5 error "$out/build.log"; exit 1; }
  bin=$root/build/cuda
fi

nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv 2>/dev/null | tee "$out/nvidia-smi.csv"

rows=()
failed=0
run() {  # run NAME TIMEOUT CMD...: record passed / failed / skipped (exit 77)
  local name=$1 limit=$2; shift 2
  local t0=$(date +%s%N) rc
  timeout "$limit" "$@" >"$out/$name.log" 2>&1
  rc=$?
  local ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  local secs="$((ms / 1000)).$(( (ms % 1000) / 100 ))"
  local status=passed
  if [ $rc -eq 77 ]; then status=skipped; elif [ $rc -ne 0 ]; then status="FAILED($rc)"; failed=1; fi
  local summary=$(grep -E -m1 "has (passed|failed) with|skipping|CUDA available|result:" "$out/$name.log" ||
                  grep -E -m1 "error|failure" "$out/$name.log")
  summary=$(echo "$summary" | cut -c1-70)
  rows+=("$(printf '%-40s %-12s %6ss  %s' "$name" "$status" "$secs" "$summary")")
}

skip() {  # skip NAME WHY: a row that says why it did not run
  rows+=("$(printf '%-40s %-12s %6ss  %s' "$1" skipped 0.0 "$2")")
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
for exe in $(find "$bin" -type f -perm -u+x -name 'kiln_cuda_*' | sort); do
  run "$(basename "$exe")" 180 "$exe" --color_output=no --report_level=short --log_level=test_suite
done
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
if ! command -v mpiexec >/dev/null; then  # a bare machine: an MPI singleton (world size 1)
  gpus=1
  launch=()
  # Open MPI 4's singleton MPI_Init starts orted: without it (and its plugins) MPI cannot start here.
  command -v orted >/dev/null || mpi="no Open MPI runtime on this machine (no mpiexec, no orted)"
elif ! timeout 60 "${launch[@]}" true >"$out/mpiexec-probe.log" 2>&1; then
  # An mpiexec that cannot start processes here (another Open MPI than the staged libmpi, say).
  mpi="mpiexec -n $gpus cannot start processes here (see mpiexec-probe.log)"
fi
for exe in $(find "$bin" -type f -perm -u+x -name 'kiln_nccl_test_*' | sort); do
  if [ "$mpi" = yes ]; then
    run "$(basename "$exe")_np$gpus" 180 "${launch[@]}" "$exe" \
      --color_output=no --report_level=short --log_level=test_suite
  else
    skip "$(basename "$exe")" "$mpi"
  fi
done
job_ddp=$(find "$bin" -type f -perm -u+x -name mlp_boston | head -1)
boston=$(find "$bin" -name boston_fixture.csv | head -1)
if [ -n "$job_ddp" ] && [ -n "$boston" ]; then
  if [ "$mpi" = yes ]; then
    run "mlp_boston_ddp_np$gpus" 120 "${launch[@]}" "$job_ddp" \
      --device cuda --parallel ddp --data "$boston" --epochs 30
  else
    skip mlp_boston_ddp "$mpi"
  fi
fi
# Fashion-MNIST: staged by gpu-stage, or Debian's package when built here.
data="$bin/fashion-mnist"
[ -d "$data" ] || data=/usr/share/datasets/fashion-mnist
for exe in $(find "$bin" -type f -perm -u+x -name 'bench_*_cuda' ! -name 'bench_distributed_cuda' | sort); do
  extra=()
  # bench_loader_cuda skips itself without Fashion-MNIST; a --data that names a missing folder is an error.
  [ "$(basename "$exe")" = bench_loader_cuda ] && [ -d "$data" ] && extra=(--data "$data")
  run "$(basename "$exe")" 180 "$exe" --json "$out/$(basename "$exe").json" "${extra[@]}"
done
kb=$(find "$bin" -type f -perm -u+x -name kiln-bench | head -1)  # issue #7: fused vs unfused on the GPU
if [ -n "$kb" ]; then
  run kiln-bench 240 "$kb" --device cuda --precisions fp32,fp16,bf16 --batches 128,1024 \
    --repeat 10 --torch no --json "$out/kiln-bench.json" --plot "$out/kiln-bench-plots"
  # A fused step that could not be captured is timed op by op: shown in the table, not a quiet fallback
  # (not a failure: cuDNN's legacy calls may refuse capture; the cross entropy's label count is a CUB
  # reduction inside the captured steps since the ninth session).
  if grep -q "CUDA graph capture failed" "$out/kiln-bench.log" 2>/dev/null; then
    rows[${#rows[@]}-1]="$(printf '%-40s %-12s %6ss  %s' kiln-bench "WARN(graph)" - \
      "$(grep -c 'CUDA graph capture failed' "$out/kiln-bench.log") steps not captured: see kiln-bench.log")"
  fi
  # Next to PyTorch eager and torch.compile (each configuration a fresh compile: fewer of them).
  run kiln-bench-vs-torch 300 "$kb" --device cuda --models lenet,mlp --precisions fp32,fp16 --batches 128 \
    --repeat 10 --elements 0 --json "$out/kiln-bench-vs-torch.json"
  # The tables for docs/benchmarks.md (paste them there with the date and machine).
  python3 "$root/scripts/bench-table" "$out/kiln-bench.json" "$out/kiln-bench-vs-torch.json" \
    >"$out/kiln-bench.md" 2>>"$out/kiln-bench.log" || true
  # A comparison that measured no PyTorch is a failed row, not a quiet pass.
  if grep -q "PyTorch: not measured" "$out/kiln-bench-vs-torch.log" 2>/dev/null; then
    rows[${#rows[@]}-1]="$(printf '%-40s %-12s %6ss  %s' kiln-bench-vs-torch "FAILED(torch)" - \
      "PyTorch not measured: see kiln-bench-vs-torch.log")"
    failed=1
  fi
fi
dist=$(find "$bin" -type f -perm -u+x -name bench_distributed_cuda | head -1)
if [ -n "$dist" ]; then
  if [ "$mpi" = yes ]; then
    # Scaling per device count (issue #6): 2, 4, ... ranks up to every GPU; each job times one GPU alone too.
    for n in 2 4 8; do
      if [ "$n" -lt "$gpus" ]; then
        run "bench_distributed_cuda_np$n" 180 mpiexec --allow-run-as-root --oversubscribe \
          -x OMP_NUM_THREADS="$(( $(nproc) / n > 0 ? $(nproc) / n : 1 ))" \
          -n "$n" "$dist" \
          --json "$out/bench_distributed_cuda_np$n.json"
      fi
    done
    run "bench_distributed_cuda_np$gpus" 180 "${launch[@]}" "$dist" --json "$out/bench_distributed_cuda.json"
  else
    skip bench_distributed_cuda "$mpi"
  fi
fi
job_dp=$(find "$bin" -type f -perm -u+x -name mlp_boston | head -1)
if [ -n "$job_dp" ] && [ -n "${boston:-}" ]; then  # DataParallel's GPU replicas (every GPU of the machine)
  run mlp_boston_dp_gpus 120 "$job_dp" --device cuda --parallel dp --data "$boston" --epochs 30
fi
# The main job, one epoch on the GPU.
job=$(find "$bin" -type f -perm -u+x -name lenet_fashion_mnist | head -1)
if [ -n "$job" ] && [ -d "$data" ]; then
  run lenet_fashion_mnist 180 "$job" --device cuda --epochs 1 --data "$data" --metrics "$out/lenet_fashion_mnist.jsonl"
  for p in fp16 bf16; do  # mixed precision (issue #5): the same epoch, tensor cores
    run "lenet_fashion_mnist_$p" 180 "$job" --device cuda --epochs 1 --precision "$p" --data "$data" \
      --metrics "$out/lenet_fashion_mnist_$p.jsonl"
  done
fi

echo
echo "== kiln gpu-check $(date -u +%Y-%m-%dT%H:%MZ), $(( $(date +%s) - start ))s =="
printf '%-40s %-12s %7s  %s\n' target status time summary
printf '%s\n' "${rows[@]}" | tee "$out/table.txt"
for j in "$out"/*.json; do
  [ -f "$j" ] && python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(sys.argv[1].split('/')[-1], json.dumps(d.get('ratios', {})))" "$j" 2>/dev/null
done
exit $failed
