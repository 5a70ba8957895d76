#!/usr/bin/python3
"""Writes tests/parity/fixtures/lenet_state.safetensors: a PyTorch LeNet's state_dict in the
safetensors format (written here by hand, byte for byte what safetensors.torch.save_file writes:
an 8-byte little-endian header size, a JSON header in the reference writer's order (by dtype, then
name: every tensor here is F32, so by name), then the raw tensors), and
lenet_output.json: the logits of that model for a fixed input. kiln's tests load the file into
kiln's LeNet and must reproduce the logits (weights moving from PyTorch to kiln).

Run with Debian's python3-torch:  /usr/bin/python3 tests/parity/make_checkpoint.py
"""
import json
import os
import struct

import torch
import torch.nn as nn

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")


def save_file(tensors, path):
    header, offset, blobs = {}, 0, []
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous().to(torch.float32)
        b = t.numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(b)]}
        offset += len(b)
        blobs.append(b)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def main():
    torch.manual_seed(0)
    lenet = nn.Sequential(nn.Conv2d(3, 6, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(6, 16, 5), nn.ReLU(),
                          nn.MaxPool2d(2), nn.Flatten(), nn.Linear(400, 120), nn.ReLU(), nn.Linear(120, 84),
                          nn.ReLU(), nn.Linear(84, 10))
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        y = lenet(x)
    save_file(lenet.state_dict(), os.path.join(HERE, "lenet_state.safetensors"))
    with open(os.path.join(HERE, "lenet_output.json"), "w") as f:
        json.dump({"torch": torch.__version__, "input_shape": list(x.shape), "input": x.flatten().tolist(),
                   "output": y.flatten().tolist()}, f)


if __name__ == "__main__":
    main()
