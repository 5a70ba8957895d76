#!/usr/bin/python3
"""scripts/safetensors_torch.py: save_file lays a file out as the committed fixture
tests/parity/fixtures/lenet_state.safetensors is laid out (which kiln's tests load; it came from the
same layout, written by hand after the format's description, so this guards the script against
drifting, not against the reference writer), every dtype and shape round-trips with its metadata and a
UTF-8 name, a damaged header is refused naming what is wrong, and the command converts a torch.save'd
state_dict to safetensors and back. Exit 77 (CTest: skipped) without torch."""
import json
import struct
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "scripts"))
try:
    import torch
except ImportError:
    print("skipped: torch is not importable by", sys.executable, "(Debian: python3-torch)")
    sys.exit(77)
from safetensors_torch import load_file, read_header, save_file  # noqa: E402

failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


with tempfile.TemporaryDirectory() as tmp:
    fixture = os.path.join(ROOT, "tests", "parity", "fixtures", "lenet_state.safetensors")
    state = load_file(fixture)
    check(sorted(state) == sorted(f"{i}.{p}" for i in (0, 3, 7, 9, 11) for p in ("weight", "bias")),
          "the fixture's LeNet names")
    check(tuple(state["0.weight"].shape) == (6, 3, 5, 5) and state["0.weight"].dtype == torch.float32,
          "0.weight is F32 [6, 3, 5, 5]")
    again = os.path.join(tmp, "again.safetensors")
    save_file(state, again)
    with open(fixture, "rb") as a, open(again, "rb") as b:
        check(a.read() == b.read(), "save_file(load_file(fixture)) is the fixture, byte for byte")

    g = torch.Generator().manual_seed(0)
    tensors = {
        "f32": torch.randn(2, 3, generator=g),
        "f64": torch.randn(4, generator=g, dtype=torch.float64),
        "f16": torch.randn(3, 1, generator=g).half(),
        "bf16": torch.randn(5, generator=g).bfloat16(),
        "i64": torch.tensor([3, -1, 2**40]),
        "i32": torch.tensor([[7, -8]], dtype=torch.int32),
        "u8": torch.tensor([0, 255], dtype=torch.uint8),
        "i8": torch.tensor([-128, 127], dtype=torch.int8),
        "i16": torch.tensor([[-32768], [32767]], dtype=torch.int16),
        "poids.é": torch.ones(2),  # a UTF-8 name, written as such (not \u00e9)
        "bool": torch.tensor([True, False, True]),
        "scalar": torch.tensor(2.5),
        "empty": torch.zeros(0, 4),
        "strided": torch.arange(12.0).reshape(3, 4).t(),  # not contiguous: written as its values
    }
    path = os.path.join(tmp, "all.safetensors")
    save_file(tensors, path, metadata={"epoch": 3})
    back = load_file(path)
    check(sorted(back) == sorted(tensors), "every name comes back")
    for name, t in tensors.items():
        check(back[name].dtype == t.dtype and back[name].shape == t.shape and torch.equal(back[name], t),
              f"{name}: dtype, shape and values")
    _, header, metadata = read_header(path)
    check(metadata == {"epoch": "3"}, "metadata as strings")
    check(list(header)[:4] == ["i64", "f64", "empty", "f32"],
          "by dtype, widest first, then name, as the reference writer")
    with open(path, "rb") as f:
        raw = f.read()
    check("poids.é".encode() in raw, "a name in UTF-8")
    empty_meta = os.path.join(tmp, "empty_meta.safetensors")
    save_file({"x": torch.ones(1)}, empty_meta, metadata={})
    with open(empty_meta, "rb") as f:
        check(b'"__metadata__":{}' in f.read(), "metadata {} is written, as the reference writer writes it")

    def damaged(name, header, data=b"\0" * 16):
        text = json.dumps(header).encode()
        bad = os.path.join(tmp, name + ".safetensors")
        with open(bad, "wb") as f:
            f.write(struct.pack("<Q", len(text)) + text + data)
        try:
            load_file(bad)
        except ValueError as e:
            return str(e)
        return "loaded"

    f32 = lambda offsets, shape=(4,): {"dtype": "F32", "shape": list(shape), "data_offsets": list(offsets)}
    for name, header, says in [
        ("negative_offset", {"x": f32([-8, 8], (4,))}, "expected [begin, end] with 0 <= begin <= end"),
        ("past_the_end", {"x": f32([0, 100], (25,))}, "the tensors end at byte 100 of the data, which has 16"),
        ("negative_shape", {"x": f32([0, 16], (-1,))}, "expected a list of whole numbers >= 0"),
        ("wrong_size", {"x": f32([0, 16], (3,))}, "hold 16 bytes; F32 [3] needs 12"),
        ("overlap", {"x": f32([0, 16]), "y": f32([0, 16])}, "data starts at 0, expected 16"),
        ("trailing", {"x": f32([0, 8], (2,))}, "the tensors end at byte 8 of the data, which has 16"),
        ("not_an_object", ["x"], "the header is a JSON list, expected an object"),
        ("bad_dtype", {"x": {"dtype": "F128", "shape": [1], "data_offsets": [0, 16]}}, "dtype 'F128' is not one of"),
        ("metadata_list", {"__metadata__": [], "x": f32([0, 16])}, "__metadata__ must map names to strings"),
        ("metadata_zero", {"__metadata__": 0, "x": f32([0, 16])}, "__metadata__ must map names to strings"),
        ("metadata_null", {"__metadata__": None, "x": f32([0, 16])}, "loaded"),
    ]:
        message = damaged(name, header)
        check(says in message, f"{name}: {message}")

    pt, st, pt2 = (os.path.join(tmp, n) for n in ("model.pt", "model.safetensors", "back.pt"))
    net = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.ReLU(), torch.nn.Linear(2, 1))
    torch.save({"epoch": 1, "model_state_dict": net.state_dict()}, pt)
    script = os.path.join(ROOT, "scripts", "safetensors_torch.py")
    r = subprocess.run([sys.executable, script, pt, st], capture_output=True, text=True)
    check(r.returncode == 0 and "taking its 'model_state_dict'" in r.stderr,
          "a training checkpoint's state_dict is found")
    r = subprocess.run([sys.executable, script, st, pt2], capture_output=True, text=True)
    loaded = torch.load(pt2)
    check(r.returncode == 0 and all(torch.equal(loaded[k], v) for k, v in net.state_dict().items()),
          ".pt -> .safetensors -> .pt keeps every tensor")
    r = subprocess.run([sys.executable, script, "--list", st], capture_output=True, text=True)
    check(r.returncode == 0 and "0.weight  F32  [2, 3]" in r.stdout, "--list names dtypes and shapes")
    r = subprocess.run([sys.executable, script, st, os.path.join(tmp, "copy.safetensors")],
                       capture_output=True, text=True)
    check(r.returncode == 2 and "exactly one of the two must end in .safetensors" in r.stderr,
          "the direction is checked")
    torch.save({"epoch": 1}, pt)
    r = subprocess.run([sys.executable, script, pt, st], capture_output=True, text=True)
    check(r.returncode != 0 and "neither a module, a dict of tensors" in r.stderr, "no state_dict: said so")

print(f"{len(failures)} failed")
sys.exit(1 if failures else 0)
