#!/usr/bin/python3
"""PyTorch's side of kiln-bench: the same built-in models (mlp, lenet, wide_mlp), batch sizes and
precisions, the same training step (forward, loss, backward, Adam; under fp16/bf16 autocast with
GradScaler for fp16) and inference step (torch.no_grad, eval), timed as medians after warm-up; in eager
mode and, where this torch has it, with torch.compile. With --elements N also the elementwise workloads
kiln-bench times alone: `chain` (y = relu(1.5 x - 0.25) 2 + 0.5 over N values of each precision's dtype;
eager runs it op by op, torch.compile fuses it) and `adam` (an Adam step over N fp32 parameters: torch's
default implementation as "eager", and fused=True as "fused" where this torch has it for the device).
Prints one JSON object; kiln-bench --torch yes runs it with the same arguments and puts the times next
to its own.

    /usr/bin/python3 bench/kiln_bench/torch_bench.py --threads 2 --models mlp,lenet --batches 32,128
"""
import argparse
import json
import os
import statistics
import sys
import time

try:
    import torch
    import torch.nn as nn
except ImportError as e:  # no torch for this interpreter: kiln-bench says so and skips its table
    if __name__ == "__main__":
        print(json.dumps({"skipped": "no torch for %s (%s)" % (sys.executable, e)}))
        sys.exit(0)
    raise

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train_step"))
from torch_step import grad_scaler, lenet, mlp, wide_mlp  # noqa: E402  the models bench_train_step compares with

MODELS = {  # name: (constructor, input shape after the batch, regression?)
    "mlp": (mlp, (13,), True),
    "lenet": (lenet, (3, 32, 32), False),
    "wide_mlp": (wide_mlp, (1024,), False),
}
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


def compile_mode(device):
    """torch.compile's mode: CUDA graphs on the GPU (as kiln's graph replays), the default on the CPU."""
    return "reduce-overhead" if device == "cuda" else None


def median_ms(step, warmup, repeat, sync):
    # At least three: first-call set-up, a compile, and "reduce-overhead"'s warm-up and recording runs
    # are not steps.
    for _ in range(max(warmup, 3)):
        step()
    sync()
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        step()
        sync()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples) * 1e3


def measure(name, batch, precision, mode, compiled, device, warmup, repeat):
    make, shape, regression = MODELS[name]
    model = make().to(device)
    if compiled:
        torch._dynamo.reset()  # a fresh compile per configuration (the recompile limit would fall back to eager)
        # On the GPU kiln's fused steps are CUDA graph replays: torch's own graphs are "reduce-overhead".
        model = torch.compile(model, dynamic=False, mode=compile_mode(device))
    x = torch.randn(batch, *shape, device=device)
    y = torch.randn(batch, 1, device=device) if regression else torch.randint(0, 10, (batch,), device=device)
    loss_fn = nn.MSELoss() if regression else nn.CrossEntropyLoss()
    dtype = DTYPES.get(precision)
    amp = (lambda: torch.autocast(device, dtype=dtype)) if dtype else None
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    if mode == "train":
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        scaler = grad_scaler(precision == "fp16" and device == "cuda")

        def step():
            opt.zero_grad()
            if amp:
                with amp():
                    loss = loss_fn(model(x), y)
            else:
                loss = loss_fn(model(x), y)
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
    else:
        model.eval()

        def step():
            with torch.no_grad():
                if amp:
                    with amp():
                        model(x)
                else:
                    model(x)
    return median_ms(step, warmup, repeat, sync)


def measure_elementwise(workload, n, precision, variant, device, warmup, repeat):
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    if workload == "adam":
        p = torch.nn.Parameter(torch.full((n,), 0.5, device=device))
        p.grad = torch.full((n,), 0.01, device=device)
        opt = torch.optim.Adam([p], lr=1e-3, **({"fused": True} if variant == "fused" else {}))
        step = opt.step
    else:
        x = (torch.arange(n, device=device) * 7919 % 2001).float().div(1000).sub(1).to(DTYPES.get(precision, torch.float32))

        def chain(x):
            return torch.relu(x * 1.5 - 0.25) * 2 + 0.5

        f = torch.compile(chain, mode=compile_mode(device)) if variant == "compile" else chain

        def step():
            f(x)
    with torch.no_grad():
        return median_ms(step, warmup, repeat, sync)


def elementwise_rows(a, out):
    n = a.elements
    cases = [("chain", p, v) for p in a.precisions.split(",") for v in ["eager"] + (["compile"] if hasattr(torch, "compile") else [])]
    cases += [("adam", "fp32", v) for v in ("eager", "fused")]
    for workload, precision, variant in cases:
        try:
            ms = measure_elementwise(workload, n, precision, variant, a.device, a.warmup, a.repeat)
        except Exception as e:  # fused Adam on a device this torch lacks it for, a compile that fails: say so
            out["skipped"].append("%s %s %d %s: %s" % (workload, precision, n, variant, str(e).splitlines()[0][:120]))
            continue
        out["rows"].append({"model": workload, "precision": precision, "batch": n, "mode": "pass", "variant": variant,
                            "median_ms": ms})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="mlp,lenet,wide_mlp")
    ap.add_argument("--batches", default="32,128,512")
    ap.add_argument("--precisions", default="fp32")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--elements", type=int, default=0)
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: torch's default)")
    a = ap.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    out = {"torch": torch.__version__, "threads": torch.get_num_threads(), "rows": [], "skipped": []}
    if a.device == "cuda" and not torch.cuda.is_available():
        out["error"] = "torch has no CUDA device"
        print(json.dumps(out))
        return
    variants = ["eager"] + (["compile"] if hasattr(torch, "compile") else [])
    if "compile" not in variants:
        out["skipped"].append("torch.compile: not in torch " + torch.__version__)
    for name in a.models.split(","):
        if name not in MODELS:
            out["skipped"].append(name + ": not a built-in model")
            continue
        for precision in a.precisions.split(","):
            if precision == "fp16" and a.device == "cpu":
                out["skipped"].append(name + " fp16: torch has no fp16 autocast on the CPU")
                continue
            for batch in (int(b) for b in a.batches.split(",")):
                for mode in ("train", "infer"):
                    for variant in variants:
                        try:
                            ms = measure(name, batch, precision, mode, variant == "compile", a.device, a.warmup,
                                         a.repeat)
                        except Exception as e:  # a torch.compile that cannot build here: say so, go on
                            out["skipped"].append("%s %s %d %s %s: %s" % (name, precision, batch, mode, variant,
                                                                         str(e).splitlines()[0][:120]))
                            continue
                        out["rows"].append({"model": name, "precision": precision, "batch": batch, "mode": mode,
                                            "variant": variant, "median_ms": ms})
    if a.elements > 0:
        elementwise_rows(a, out)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
