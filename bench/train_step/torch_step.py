#!/usr/bin/python3
"""PyTorch's side of bench_train_step: the same models, batch, optimizer and thread count, eager mode.

--serve (what bench_train_step runs, bench/reference.hpp): prints what it built as one JSON line, then
times one sample of the case each line of stdin names (mlp: 20 steps, as kiln's sample; lenet,
lenet_bn, lenet_gn, resnet20: one step) and prints its seconds, so that the bench interleaves these
samples with kiln's; "info lenet_activation_bytes" answers the bytes a LeNet training forward keeps for
backward (the tensors autograd saves, parameters and the input not counted) plus the logits, what
kiln's activation_bytes() counts. Without torch it says {"skipped": ...} and exits 0.

Without --serve: one JSON object of median seconds per step, each model timed in a block of its own
(--device cuda: LeNet, and with --amp the autocast steps, as bench_train_step_cuda runs it).

    /usr/bin/python3 bench/train_step/torch_step.py --threads 2 --batch 128 --repeat 30 --warmup 5
"""
import argparse
import json
import statistics
import sys
import time

try:
    import torch
    import torch.nn as nn
except ImportError as e:  # Debian's python3-torch not installed: the bench skips its ratios
    if __name__ == "__main__":
        print(json.dumps({"skipped": "no torch for %s (%s)" % (sys.executable, e)}), flush=True)
        sys.exit(0)
    raise


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


def median_seconds(step, warmup, repeat, inner=1, sync=lambda: None):
    """Median seconds per call of `step()` over `repeat` samples after `warmup` untimed calls; a sample is
    `inner` calls back to back, then `sync()` (the GPU's queue drained once per sample, as kiln's side
    records its CUDA events around `inner` steps)."""
    for _ in range(max(warmup, 1)):
        step()
    sync()
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(inner):
            step()
        sync()
        samples.append((time.perf_counter() - t0) / inner)
    return statistics.median(samples)


def activation_bytes(model, x):
    """Bytes a training forward keeps for backward: the storages autograd saves (each once; the
    parameters and the input, which kiln's activation count does not hold either, left out), and the
    logits."""
    saved = {}

    def pack(t):
        s = t.storage()
        saved[s.data_ptr()] = s.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(x)
    held = {p.storage().data_ptr() for p in model.parameters()} | {x.storage().data_ptr()}
    return sum(b for ptr, b in saved.items() if ptr not in held) + out.numel() * out.element_size()


def serve(hello, cases, infos):
    """bench/reference.hpp's protocol: `hello` as one JSON line, then per line of stdin the seconds of one
    sample of that case (or the JSON of "info NAME"). An unknown request raises: the traceback goes to
    stderr, the process exits 1, and the bench ends naming it."""
    print(json.dumps(hello), flush=True)
    for line in sys.stdin:
        request = line.strip()
        if request.startswith("info "):
            print(json.dumps(infos[request[5:]]()), flush=True)
        else:
            print(repr(cases[request]()), flush=True)


def adam_step(model, x, y, loss_fn):
    """One training step of `model` on (x, y): forward, loss, backward, Adam(lr 1e-3)."""
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step():
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()

    return step


def one_step_timer(model, x, y, loss_fn, steps=1):
    """A sample of `steps` training steps (Adam, lr 1e-3) of `model`: their mean seconds, after one untimed
    step. The bench pauses around each of this side's samples (bench/reference.hpp), so its threads have
    gone to sleep and the caches are the other side's: the untimed step wakes them, as kiln's cases,
    timed one after another, find their threads awake (kiln's MLP sample takes an untimed step too)."""
    step = adam_step(model, x, y, loss_fn)

    def sample():
        step()
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        return (time.perf_counter() - t0) / steps

    return sample


def serve_cpu(a):
    mx, my = torch.randn(a.batch, 13), torch.randn(a.batch, 1)
    x, y = torch.randn(a.batch, 3, 32, 32), torch.randint(0, 10, (a.batch,))
    ce = nn.CrossEntropyLoss()
    cases = {"mlp": one_step_timer(mlp(), mx, my, nn.MSELoss(), steps=20),
             "lenet": one_step_timer(lenet(), x, y, ce),
             "lenet_bn": one_step_timer(lenet_bn(), x, y, ce),
             "lenet_gn": one_step_timer(lenet_gn(), x, y, ce),
             "resnet20": one_step_timer(resnet20(), x, y, ce)}
    infos = {"lenet_activation_bytes": lambda: activation_bytes(lenet(), x)}
    serve({"torch": torch.__version__, "threads": torch.get_num_threads(), "batch": a.batch,
           "cases": sorted(cases)}, cases, infos)


def time_amp_steps(model, x, y, dtype, warmup, repeat, inner=1):
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

    return median_seconds(step, warmup, repeat, inner, torch.cuda.synchronize)


def time_steps(model, x, y, loss_fn, warmup, repeat, sync=lambda: None, inner=1):
    return median_seconds(adam_step(model, x, y, loss_fn), warmup, repeat, inner, sync)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--amp", action="store_true", help="cuda: also LeNet and a 1024-wide MLP under autocast")
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: torch's default)")
    ap.add_argument("--inner", type=int, default=1, help="steps per timed sample (cuda: synchronised once)")
    ap.add_argument("--serve", action="store_true", help="time samples on request (bench/reference.hpp)")
    a = ap.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    if a.serve:
        serve_cpu(a)
        return
    if a.device == "cuda":  # LeNet (and the autocast steps), on the GPU, synchronised after --inner steps
        if not torch.cuda.is_available():
            print(json.dumps({"skipped": "torch %s has no CUDA device" % torch.__version__}))
            return
        dev = torch.device("cuda")
        x = torch.randn(a.batch, 3, 32, 32, device=dev)
        y = torch.randint(0, 10, (a.batch,), device=dev)
        out = {"torch": torch.__version__, "device": torch.cuda.get_device_name(), "batch": a.batch,
               "inner": a.inner,
               "lenet_step_s": time_steps(lenet().to(dev), x, y, nn.CrossEntropyLoss(), a.warmup, a.repeat,
                                          torch.cuda.synchronize, a.inner)}
        if a.amp:
            wx = torch.randn(1024, 1024, device=dev)
            wy = torch.randint(0, 10, (1024,), device=dev)
            for name, dtype in (("fp16", torch.float16), ("bf16", torch.bfloat16)):
                out["lenet_step_%s_s" % name] = time_amp_steps(lenet().to(dev), x, y, dtype, a.warmup, a.repeat,
                                                               a.inner)
                out["wide_mlp_step_%s_s" % name] = time_amp_steps(wide_mlp().to(dev), wx, wy, dtype, a.warmup,
                                                                  a.repeat, a.inner)
            out["wide_mlp_step_s"] = time_steps(wide_mlp().to(dev), wx, wy, nn.CrossEntropyLoss(), a.warmup,
                                                a.repeat, torch.cuda.synchronize, a.inner)
        print(json.dumps(out))
        return
    out = {"torch": torch.__version__, "threads": torch.get_num_threads(), "batch": a.batch}
    x = torch.randn(a.batch, 13)
    y = torch.randn(a.batch, 1)
    out["mlp_step_s"] = time_steps(mlp(), x, y, nn.MSELoss(), a.warmup, a.repeat)
    x = torch.randn(a.batch, 3, 32, 32)
    y = torch.randint(0, 10, (a.batch,))
    out["lenet_step_s"] = time_steps(lenet(), x, y, nn.CrossEntropyLoss(), a.warmup, a.repeat)
    out["lenet_activation_bytes"] = activation_bytes(lenet(), x)
    out["lenet_bn_step_s"] = time_steps(lenet_bn(), x, y, nn.CrossEntropyLoss(), a.warmup, a.repeat)
    out["lenet_gn_step_s"] = time_steps(lenet_gn(), x, y, nn.CrossEntropyLoss(), a.warmup, a.repeat)
    out["resnet20_step_s"] = time_steps(resnet20(), x, y, nn.CrossEntropyLoss(), a.warmup, a.repeat)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
