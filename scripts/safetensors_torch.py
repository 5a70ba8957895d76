#!/usr/bin/python3
"""safetensors files from PyTorch without the `safetensors` package (Debian 12 packages none): torch
state_dicts and kiln checkpoints move both ways. Laid out as safetensors.torch.save_file lays a file
out: an 8-byte little-endian header size, a JSON header (`__metadata__` first, then the tensors by
dtype, widest first, then name; names in UTF-8), padded with spaces to 8 bytes, then the raw
little-endian tensors (with several metadata keys the reference writer's order is its hash map's, so
only the bytes of the header's metadata may differ). Reading checks the header as kiln's reader does:
offsets in order, contiguous, inside the file; every shape the size of its bytes.

As a module (scripts/ on sys.path, or a copy of this file beside your script):
    from safetensors_torch import save_file, load_file
    save_file(model.state_dict(), "model.safetensors")                # safetensors.torch.save_file
    model.load_state_dict(load_file("model.safetensors"), strict=False)  # strict=False: kiln's optimizer state

As a command (Debian's python3-torch is /usr/bin/python3's):
    scripts/safetensors_torch.py model.pt model.safetensors   # a torch.save'd state_dict (or module)
    scripts/safetensors_torch.py model.safetensors model.pt   # back, for torch.load
    scripts/safetensors_torch.py --list model.safetensors     # names, dtypes, shapes, metadata
"""
import json
import struct
import sys

import torch

# safetensors' dtype names, and their rank in its Dtype enum (the header lists the highest first).
DTYPES = {
    torch.bool: ("BOOL", 0), torch.uint8: ("U8", 1), torch.int8: ("I8", 2), torch.int16: ("I16", 5),
    torch.float16: ("F16", 7), torch.bfloat16: ("BF16", 8), torch.int32: ("I32", 9),
    torch.float32: ("F32", 11), torch.float64: ("F64", 12), torch.int64: ("I64", 13),
}
BY_NAME = {name: dtype for dtype, (name, _) in DTYPES.items()}


def save_file(tensors, path, metadata=None):
    """Writes a dict of name -> tensor (any device, contiguous or not) as a safetensors file."""
    order = []
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name}: a {type(t).__name__}, not a tensor")
        if t.dtype not in DTYPES:
            raise TypeError(f"{name}: dtype {t.dtype} has no safetensors name here ({', '.join(BY_NAME)})")
        order.append(name)
    order.sort(key=lambda n: (-DTYPES[tensors[n].dtype][1], n))
    header, blobs, offset = {}, [], 0
    if metadata is not None:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name in order:
        t = tensors[name].detach().to("cpu").contiguous()
        b = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": DTYPES[t.dtype][0], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(b)]}
        offset += len(b)
        blobs.append(b)
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def read_header(path):
    """The file's bytes, its header (name -> dtype, shape, data_offsets) and its metadata."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError(f"{path}: {len(data)} bytes; a safetensors file starts with an 8-byte header size")
    (n,) = struct.unpack("<Q", data[:8])
    if n > len(data) - 8:
        raise ValueError(f"{path}: header size {n} does not fit the file ({len(data)} bytes): not safetensors")
    try:
        header = json.loads(data[8:8 + n])
    except ValueError as e:
        raise ValueError(f"{path}: the header is not JSON ({e})") from None
    if not isinstance(header, dict):
        raise ValueError(f"{path}: the header is a JSON {type(header).__name__}, expected an object")
    metadata = header.pop("__metadata__", None)
    if metadata is None:  # absent, or null (kiln's reader and safetensors' take both as none)
        metadata = {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise ValueError(f"{path}: __metadata__ must map names to strings")
    data = data[8 + n:]
    end_of_last = 0
    for name, e in sorted(header.items(), key=lambda kv: _offsets(path, kv[0], kv[1])):
        begin, end = _offsets(path, name, e)
        if e.get("dtype") not in BY_NAME:
            raise ValueError(f"{path}: {name}: dtype {e.get('dtype')!r} is not one of {', '.join(BY_NAME)}")
        shape = e.get("shape")
        if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                                  for d in shape):
            raise ValueError(f"{path}: {name}: shape {shape!r}, expected a list of whole numbers >= 0")
        count = 1
        for d in shape:
            count *= d
        size = count * torch.empty(0, dtype=BY_NAME[e["dtype"]]).element_size()
        if end - begin != size:
            raise ValueError(f"{path}: {name}: data_offsets [{begin}, {end}] hold {end - begin} bytes; "
                             f"{e['dtype']} {shape} needs {size}")
        if begin != end_of_last:
            raise ValueError(f"{path}: {name}: data starts at {begin}, expected {end_of_last} "
                             f"(the tensors' data is contiguous, in offset order)")
        end_of_last = end
    if end_of_last != len(data):
        raise ValueError(f"{path}: the tensors end at byte {end_of_last} of the data, which has {len(data)}")
    return data, header, metadata


def _offsets(path, name, e):
    offsets = e.get("data_offsets") if isinstance(e, dict) else None
    if not (isinstance(offsets, list) and len(offsets) == 2 and
            all(isinstance(o, int) and not isinstance(o, bool) for o in offsets) and 0 <= offsets[0] <= offsets[1]):
        raise ValueError(f"{path}: {name}: data_offsets {offsets!r}, expected [begin, end] with 0 <= begin <= end")
    return offsets


def load_file(path):
    """A dict of name -> CPU tensor (safetensors.torch.load_file)."""
    data, header, _ = read_header(path)
    out = {}
    for name, e in header.items():
        begin, end = e["data_offsets"]
        dtype = BY_NAME[e["dtype"]]
        raw = bytearray(data[begin:end])
        t = torch.frombuffer(raw, dtype=torch.uint8).view(dtype) if raw else torch.empty(0, dtype=dtype)
        out[name] = t.reshape(e["shape"])
    return out


def state_dict_of(obj, path):
    """A state_dict from what torch.load returned: a module, a dict of tensors, or a training checkpoint
    holding one under "state_dict", "model_state_dict" or "model"."""
    if isinstance(obj, torch.nn.Module):
        return obj.state_dict()
    if isinstance(obj, dict):
        if obj and all(isinstance(v, torch.Tensor) for v in obj.values()):
            return obj
        for key in ("state_dict", "model_state_dict", "model"):
            inner = obj.get(key)
            if isinstance(inner, dict) and inner and all(isinstance(v, torch.Tensor) for v in inner.values()):
                print(f"{path}: taking its '{key}'", file=sys.stderr)
                return inner
    raise ValueError(f"{path}: neither a module, a dict of tensors nor a checkpoint with a 'state_dict', "
                     f"'model_state_dict' or 'model' of tensors (a {type(obj).__name__})")


def main(argv):
    if argv in (["--help"], ["-h"]):
        print(__doc__.split("\n\n")[-1])
        return 0
    if len(argv) == 2 and argv[0] == "--list":
        _, header, metadata = read_header(argv[1])
        for name, e in sorted(header.items()):
            print(f"{name}  {e['dtype']}  {e['shape']}")
        for k, v in sorted(metadata.items()):
            print(f"metadata {k} = {v}")
        return 0
    if len(argv) != 2 or argv[0].startswith("-"):
        print(__doc__.split("\n\n")[-1], file=sys.stderr)
        return 2
    src, dst = argv
    if src.endswith(".safetensors") == dst.endswith(".safetensors"):
        print(f"{src} -> {dst}: exactly one of the two must end in .safetensors (the direction)", file=sys.stderr)
        return 2
    if src.endswith(".safetensors"):
        torch.save(load_file(src), dst)
    else:
        save_file(state_dict_of(torch.load(src, map_location="cpu"), src), dst)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except (OSError, ValueError) as e:  # a missing or malformed file: one line, not a traceback
        print(f"safetensors_torch.py: {e}", file=sys.stderr)
        sys.exit(1)
