#!/usr/bin/env bash
# run-fuzz.sh: fuzz kiln's file readers (IDX/MNIST, CIFAR-10, CSV, safetensors checkpoints) with libFuzzer
# for a bounded time.
#
#   tests/fuzz/run-fuzz.sh [--time SECONDS] [--only idx|cifar10|csv|safetensors]... [BUILD_DIR]
#
#   BUILD_DIR       where the fuzzers, seeds, corpora and logs go (default /tmp/kiln-fuzz); the corpora
#                   grow there from run to run
#   --time SECONDS  how long each target runs (default 60; libFuzzer's -max_total_time)
#   --only TARGET   fuzz only this target (repeatable; default: idx cifar10 csv safetensors)
#   -h, --help      this text
#
# Builds tests/fuzz/fuzz_<target>.cpp with clang++ (-O1 -g -fsanitize=fuzzer,address,undefined, zlib),
# seeds each corpus with small valid files it writes (IDX images, labels and a .gz; CIFAR-10 batches; CSV
# tables; safetensors files) plus tests/fuzz/regressions/<target>/*, then runs each target with -rss_limit_mb=2048
# -timeout=10. A crash, a leak, a hang, an allocation over 2 GiB or an exception other than kiln::Error
# is a finding: its input is copied into tests/fuzz/regressions/<target>/ (kept as a regression test:
# CTest replays that folder with g++, no clang needed) and the script exits 1 naming it.
#
# Needs clang++ and libFuzzer's runtime (Debian 12: apt-get install clang libclang-rt-14-dev) and
# zlib1g-dev. Not part of ./scripts/test: run it by hand.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }

seconds=60
targets=()
build=""
while (($#)); do
  case "$1" in
    --time) [[ $# -ge 2 ]] || { usage >&2; exit 2; }; seconds="$2"; shift 2 ;;
    --time=*) seconds="${1#--time=}"; shift ;;
    --only) [[ $# -ge 2 ]] || { usage >&2; exit 2; }; targets+=("$2"); shift 2 ;;
    --only=*) targets+=("${1#--only=}"); shift ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "run-fuzz.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
    *) [[ -z "$build" ]] || { echo "run-fuzz.sh: one build folder, got $build and $1" >&2; exit 2; }
       build="$1"; shift ;;
  esac
done
[[ "$seconds" =~ ^[1-9][0-9]*$ ]] || { echo "run-fuzz.sh: --time wants a positive number of seconds, got $seconds" >&2; exit 2; }
((${#targets[@]})) || targets=(idx cifar10 csv safetensors)
for t in "${targets[@]}"; do
  case "$t" in idx|cifar10|csv|safetensors) ;; *) echo "run-fuzz.sh: no target $t (idx, cifar10, csv, safetensors)" >&2; exit 2 ;; esac
done
build="${build:-/tmp/kiln-fuzz}"
mkdir -p "$build"
build="$(cd "$build" && pwd)"
regressions="$root/tests/fuzz/regressions"

cxx="${CXX_FUZZ:-clang++}"
command -v "$cxx" >/dev/null || {
  echo "run-fuzz.sh: $cxx not found; as root: apt-get install clang libclang-rt-14-dev zlib1g-dev" >&2; exit 2; }

# ---- Build ---------------------------------------------------------------------------------------
flags=(-std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
       -fno-omit-frame-pointer -I "$root/include" -I "$root/tests/fuzz" -DKILN_WITH_ZLIB=1)
for t in "${targets[@]}"; do
  echo "run-fuzz.sh: building $build/fuzz_$t"
  if ! "$cxx" "${flags[@]}" "$root/tests/fuzz/fuzz_$t.cpp" -lz -o "$build/fuzz_$t" 2>"$build/build-$t.log"; then
    cat "$build/build-$t.log" >&2
    if grep -q 'clang_rt.fuzzer' "$build/build-$t.log"; then
      echo "run-fuzz.sh: libFuzzer's runtime is missing; as root: apt-get install libclang-rt-14-dev" >&2
    fi
    exit 2
  fi
done

# ---- Seeds: small valid files ----------------------------------------------------------------------
bytes() { head -c "$1" /dev/zero | tr '\000' "\\$(printf '%03o' "$2")"; }  # N copies of byte V
seed_idx() {
  local d="$build/seeds/idx"; mkdir -p "$d"
  { printf '\x00\x00\x08\x03\x00\x00\x00\x02\x00\x00\x00\x1c\x00\x00\x00\x1c'; bytes 784 0; bytes 784 255; } >"$d/images-2x28x28"
  gzip -n -c "$d/images-2x28x28" >"$d/images-2x28x28.gz"
  { printf '\x00\x00\x08\x01\x00\x00\x00\x03'; printf '\x07\x00\x09'; } >"$d/labels-3"
  { printf '\x00\x00\x08\x03\x00\x00\x00\x02\x00\x00\x00\x03\x00\x00\x00\x04'; bytes 24 7; } >"$d/array-2x3x4"
  printf '\x00\x00\x08\x00\x2a' >"$d/scalar"
}
seed_cifar10() {
  local d="$build/seeds/cifar10"; mkdir -p "$d"
  { printf '\x03'; bytes 1024 255; bytes 1024 128; bytes 1024 0; } >"$d/one-record"
  { cat "$d/one-record"; printf '\x09'; bytes 3072 17; } >"$d/two-records"
}
seed_csv() {
  local d="$build/seeds/csv"; mkdir -p "$d"
  printf '3,13,,,,,,,,,,,,\n"CRIM","ZN","INDUS","CHAS","NOX","RM","AGE","DIS","RAD","TAX","PTRATIO","B","LSTAT","MEDV"\n0.00632,18,2.31,0,0.538,6.575,65.2,4.09,1,296,15.3,396.9,4.98,24\n0.02731,0,7.07,0,0.469,6.421,78.9,4.9671,2,242,17.8,396.9,9.14,21.6\n0.02729,0,7.07,0,0.469,7.185,61.1,4.9671,2,242,17.8,392.83,4.03,34.7\n' >"$d/boston-3"
  printf '\xef\xbb\xbfa, "b ""x""" ,MEDV,c\r\n1,-1.5e-3, +2 ,4\r\n\r\n5,6,7,8' >"$d/quoted-crlf"
  printf 'x,y\n1,2\n3,4\n' >"$d/two-columns"
}
seed_safetensors() {
  local d="$build/seeds/safetensors"; mkdir -p "$d"
  # A file = 8-byte little-endian header size, the JSON header, the tensors' bytes.
  st_file() {  # st_file NAME HEADER DATA-BYTES
    local n=${#2} i le=""
    for ((i = 0; i < 8; i++)); do le+=$(printf '\\x%02x' $(((n >> (8 * i)) & 255))); done
    { printf "$le"; printf '%s' "$2"; bytes "$3" 63; } >"$d/$1"
  }
  st_file two-tensors '{"__metadata__":{"epoch":"3","format":"pt"},"0.bias":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"0.weight":{"dtype":"F32","shape":[2,3],"data_offsets":[8,32]}}' 32
  st_file half-and-int '{"a":{"dtype":"F16","shape":[3],"data_offsets":[0,6]},"b":{"dtype":"I64","shape":[],"data_offsets":[6,14]},"c":{"dtype":"BF16","shape":[0,4],"data_offsets":[14,14]}} ' 14
  st_file empty '{}      ' 0
}

# ---- Run ---------------------------------------------------------------------------------------------
declare -A max_len=([idx]=8192 [cifar10]=9300 [csv]=4096 [safetensors]=4096)
export TMPDIR="$build/tmp"
mkdir -p "$TMPDIR"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
found=()
for t in "${targets[@]}"; do
  "seed_$t"
  corpus="$build/corpus/$t" artifacts="$build/artifacts/$t"
  mkdir -p "$corpus" "$artifacts" "$build/logs" "$regressions/$t"
  rm -f "$artifacts"/*
  dirs=("$corpus" "$build/seeds/$t" "$regressions/$t")
  log="$build/logs/$t.log"
  echo "run-fuzz.sh: fuzzing $t for $seconds s (log: $log)"
  set +e
  "$build/fuzz_$t" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -max_len="${max_len[$t]}" \
    -use_value_profile=1 -print_final_stats=1 -artifact_prefix="$artifacts/" "${dirs[@]}" >"$log" 2>&1
  rc=$?
  set -e
  grep -E '^(#[0-9]+[[:space:]]+DONE|Done [0-9]+ runs)' "$log" | sed "s/^/run-fuzz.sh: $t: /" || true
  if ((rc != 0)); then
    tail -n 60 "$log" >&2
    shopt -s nullglob
    inputs=("$artifacts"/{crash,leak,timeout,oom}-*)
    shopt -u nullglob
    ((${#inputs[@]})) || { echo "run-fuzz.sh: $t exited with $rc and left no input; see $log" >&2; found+=("$log"); continue; }
    for input in "${inputs[@]}"; do
      kept=""
      for old in "$regressions/$t"/*; do
        if [[ -f "$old" ]] && cmp -s "$old" "$input"; then kept="$old"; break; fi
      done
      if [[ -z "$kept" ]]; then
        kept="$regressions/$t/$(basename "$input")"
        cp "$input" "$kept"
      fi
      echo "run-fuzz.sh: $t: FOUND $kept (replay: $build/fuzz_$t $kept)" >&2
      found+=("$kept")
    done
  fi
done

if ((${#found[@]})); then
  echo "run-fuzz.sh: ${#found[@]} finding(s):" >&2
  printf '  %s\n' "${found[@]}" >&2
  exit 1
fi
echo "run-fuzz.sh: no findings in ${targets[*]} ($seconds s each)"
