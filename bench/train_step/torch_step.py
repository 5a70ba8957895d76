#!/usr/bin/python3
"""PyTorch's side of bench_train_step: the same two models, batch, optimizer and thread count, eager
mode on the CPU. Prints one JSON object: median seconds per training step and peak RSS growth.

    OMP_NUM_THREADS=2 /usr/bin/python3 bench/train_step/torch_step.py --repeat 30 --warmup 5
"""
import argparse
import json
import resource
import statistics
import time

import torch
import torch.nn as nn


def grad_scaler(enabled):
    """torch.amp.GradScaler("cuda") where this torch has it (2.3 and later, where torch.cuda.amp.GradScaler
    is deprecated); torch.cuda.amp.GradScaler before."""
    if hasattr(torch, "amp") and hasattr(torch.amp, "GradScaler"):
        return torch.amp.GradScaler("cuda", enabled=enabled)
    return torch.cuda.amp.GradScaler(enabled=enabled)


def mlp():
    return nn.Sequential(nn.Linear(13, 16), nn.ReLU(), nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))


def lenet():
    return nn.Sequential(nn.Conv2d(3, 6, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(6, 16, 5), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Flatten(), nn.Linear(400, 120), nn.ReLU(), nn.Linear(120, 84),
                         nn.ReLU(), nn.Linear(84, 10))


def lenet_bn():
    return nn.Sequential(nn.Conv2d(3, 6, 5), nn.BatchNorm2d(6), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(6, 16, 5),
                         nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(400, 120), nn.ReLU(),
                         nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, 10))


def lenet_gn():
    return nn.Sequential(nn.Conv2d(3, 6, 5), nn.GroupNorm(2, 6), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(6, 16, 5),
                         nn.GroupNorm(4, 16), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(400, 120),
                         nn.LayerNorm(120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, 10))


class BasicBlock(nn.Module):
    """torchvision's BasicBlock: the shortcut x itself, or a strided 1x1 convolution + BatchNorm."""

    def __init__(self, cin, cout, stride=1):
        super().__init__()
        self.main = nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
                                  nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout))
        self.shortcut = nn.Identity() if cin == cout and stride == 1 else nn.Sequential(
            nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        return torch.relu(self.main(x) + self.shortcut(x))


def resnet20():
    """bench/models.hpp's ResNet20 (He et al.'s CIFAR-10 ResNet-20 with projection shortcuts)."""
    blocks = [BasicBlock(16, 16), BasicBlock(16, 16), BasicBlock(16, 16), BasicBlock(16, 32, 2), BasicBlock(32, 32),
              BasicBlock(32, 32), BasicBlock(32, 64, 2), BasicBlock(64, 64), BasicBlock(64, 64)]
    return nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU(), *blocks,
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10))


def wide_mlp():
    return nn.Sequential(nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))


def median_seconds(step, warmup, repeat):
    """Median wall time of `step()` over `repeat` calls after `warmup` untimed ones."""
    for _ in range(warmup):
        step()
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        step()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def time_amp_steps(model, x, y, dtype, warmup, repeat):
    """The autocast training step: torch.autocast(dtype) around forward and loss; GradScaler for fp16."""
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    scaler = grad_scaler(dtype == torch.float16)
    loss_fn = nn.CrossEntropyLoss()

    def step():
        opt.zero_grad()
        with torch.autocast("cuda", dtype=dtype):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        torch.cuda.synchronize()

    return median_seconds(step, warmup, repeat)


def time_steps(model, x, y, loss_fn, warmup, repeat, sync=lambda: None):
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step():
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        sync()

    return median_seconds(step, warmup, repeat)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--amp", action="store_true", help="cuda: also LeNet and a 1024-wide MLP under autocast")
    a = ap.parse_args()
    torch.manual_seed(0)
    if a.device == "cuda":  # LeNet only, on the GPU, synchronised after each step
        if not torch.cuda.is_available():
            print(json.dumps({"error": "torch has no CUDA device"}))
            return
        dev = torch.device("cuda")
        x = torch.randn(a.batch, 3, 32, 32, device=dev)
        y = torch.randint(0, 10, (a.batch,), device=dev)
        out = {"torch": torch.__version__, "device": torch.cuda.get_device_name(),
               "lenet_step_s": time_steps(lenet().to(dev), x, y, nn.CrossEntropyLoss(), a.warmup, a.repeat,
                                          torch.cuda.synchronize)}
        if a.amp:
            wx = torch.randn(1024, 1024, device=dev)
            wy = torch.randint(0, 10, (1024,), device=dev)
            for name, dtype in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
                out["lenet_step_%s_s" % name] = time_amp_steps(lenet().to(dev), x, y, dtype, a.warmup, a.repeat)
                out["wide_mlp_step_%s_s" % name] = time_amp_steps(wide_mlp().to(dev), wx, wy, dtype, a.warmup,
                                                                  a.repeat)
            out["wide_mlp_step_s"] = time_steps(wide_mlp().to(dev), wx, wy, nn.CrossEntropyLoss(), a.warmup,
                                                a.repeat, torch.cuda.synchronize)
        print(json.dumps(out))
        return
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out = {"torch": torch.__version__, "threads": torch.get_num_threads()}
    x = torch.randn(a.batch, 13)
    y = torch.randn(a.batch, 1)
    out["mlp_step_s"] = time_steps(mlp(), x, y, nn.MSELoss(), a.warmup, a.repeat)
    x = torch.randn(a.batch, 3, 32, 32)
    y = torch.randint(0, 10, (a.batch,))
    rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out["lenet_step_s"] = time_steps(lenet(), x, y, nn.CrossEntropyLoss(), a.warmup, a.repeat)
    out["lenet_peak_rss_growth_bytes"] = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss1) * 1024
    out["lenet_bn_step_s"] = time_steps(lenet_bn(), x, y, nn.CrossEntropyLoss(), a.warmup, a.repeat)
    out["lenet_gn_step_s"] = time_steps(lenet_gn(), x, y, nn.CrossEntropyLoss(), a.warmup, a.repeat)
    out["resnet20_step_s"] = time_steps(resnet20(), x, y, nn.CrossEntropyLoss(), a.warmup, a.repeat)
    out["baseline_rss_bytes"] = rss0 * 1024
    print(json.dumps(out))


if __name__ == "__main__":
    main()
