#!/usr/bin/python3
"""How far torch's own optimizer results move between OpenBLAS's kernels: for each fixture named, writes
it again under each OPENBLAS_CORETYPE (into a temporary folder; the checked-in files stay as they are)
and prints, per optimizer run, the parity metric of test_parity_mlp.cpp against the checked-in file:
max |a - b| / max(|b|, floor * the tensor's largest |b|).

    /usr/bin/python3 tests/parity/blas_spread.py mlp_param_groups.json mlp_freeze_schedule.json
    /usr/bin/python3 tests/parity/blas_spread.py --floor 0.01 mlp.json

A kernel the CPU cannot run (SkylakeX needs AVX-512) is left out by OpenBLAS, which then runs its own
choice: compare on a CPU that has them all. Debian 12's OpenBLAS 0.3.21 falls back to Prescott (SSE3)
on CPUs newer than it, so all three occur on machines that run kiln's tests.
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CORES = ["Prescott", "Haswell", "SkylakeX"]


def written_under(core, name, folder):
    out = os.path.join(folder, core)
    os.makedirs(out, exist_ok=True)
    code = (f"import sys; sys.path.insert(0, {HERE!r}); import make_fixtures as mf; mf.OUT = {out!r}; "
            f"sys.exit(mf.main([{name!r}]))")
    subprocess.run([sys.executable, "-c", code], env=dict(os.environ, OPENBLAS_CORETYPE=core), check=True,
                   stdout=subprocess.DEVNULL)
    with open(os.path.join(out, name)) as f:
        return json.load(f)


def values(t):
    return t["values"] if isinstance(t, dict) else t


def metric(got, want, floor):
    worst = 0.0
    for k, w in want.items():
        a, b = values(got[k]), values(w)
        scale = floor * max(abs(v) for v in b)
        worst = max(worst, max(abs(x - y) / max(abs(y), scale, 1e-30) for x, y in zip(a, b)))
    return worst


def main(args):
    floor = 0.1
    if args[:1] == ["--floor"]:
        floor, args = float(args[1]), args[2:]
    if not args:
        print(__doc__, file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as folder:
        for name in args:
            with open(os.path.join(HERE, "fixtures", name)) as f:
                checked_in = json.load(f)
            runs = {core: written_under(core, name, folder) for core in CORES}
            for i, run in enumerate(checked_in["optimizers"]):
                cells = [f"{core}={metric(runs[core]['optimizers'][i]['parameters'], run['parameters'], floor):.2e}"
                         for core in CORES]
                print(f"{name} {run['name']:36s} {' '.join(cells)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
