#!/usr/bin/python3
"""Writes tests/parity/fixtures/lenet_state.safetensors: a PyTorch LeNet's state_dict in the
safetensors format (scripts/safetensors_torch.py's save_file: byte for byte what
safetensors.torch.save_file writes), and lenet_output.json: the logits of that model for a fixed
input; the same for a small network with BatchNorm2d and BatchNorm1d (batchnorm_state.safetensors, with
its running statistics and int64 num_batches_tracked, and batchnorm_output.json: its evaluation output).
kiln's tests load the files into kiln's models and must reproduce the outputs (weights moving from
PyTorch to kiln).

Run with Debian's python3-torch:  /usr/bin/python3 tests/parity/make_checkpoint.py
(the last bits of lenet_output.json differ between torch builds: keep the committed one unless the
LeNet itself changes)
"""
import json
import os
import sys

import torch
import torch.nn as nn

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from safetensors_torch import save_file  # noqa: E402  (byte for byte the reference writer's files)


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

    # A network with BatchNorm: its running statistics (F32) and num_batches_tracked (I64) are buffers
    # in the state_dict; five training forwards move them off their initial values first.
    torch.manual_seed(1)
    bn = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten(), nn.Linear(64, 5),
                       nn.BatchNorm1d(5))
    with torch.no_grad():
        for _ in range(5):
            bn(torch.randn(8, 3, 6, 6) * 2 + 1)
    bn.eval()
    x = torch.randn(2, 3, 6, 6)
    with torch.no_grad():
        y = bn(x)
    save_file(bn.state_dict(), os.path.join(HERE, "batchnorm_state.safetensors"))
    with open(os.path.join(HERE, "batchnorm_output.json"), "w") as f:
        json.dump({"torch": torch.__version__, "input_shape": list(x.shape), "input": x.flatten().tolist(),
                   "output": y.flatten().tolist()}, f)


if __name__ == "__main__":
    main()
