#!/usr/bin/python3
"""PyTorch's side of bench_loader: one training epoch of the same LeNet (1 x 28 x 28, first conv padded by
2) on Fashion-MNIST, Adam(1e-3), batch 128, shuffled, Normalize(0.5, 0.5), eager mode on the CPU with the
given thread count (--threads, else torch's default) and batch (--batch). Prints one JSON object with the
epoch's seconds; with --serve (what bench_loader runs, bench/reference.hpp) it says what it built in one
JSON line and then times one epoch (a fresh shuffle each) per "epoch" line of stdin, so that the bench
takes its samples in the same rounds as kiln's (the first, its warm-up, too). Without torch, --serve
says {"skipped": ...} and exits 0.

--mode tensors (the default, PyTorch's fastest path): the whole split normalised once into one tensor,
batches gathered by shuffled index (no per-sample Python). --mode dataset: a torch Dataset that converts
each sample in __getitem__ and a DataLoader with --workers processes (the usual pattern; 10-30x slower
on 2 cores).

    OMP_NUM_THREADS=2 /usr/bin/python3 bench/loader/torch_epoch.py --data /usr/share/datasets/fashion-mnist
"""
import argparse
import gzip
import json
import os
import sys
import time

try:
    import numpy as np
    import torch
    import torch.nn as nn
except ImportError as e:  # Debian's python3-torch not installed: the bench skips its ratio
    if __name__ == "__main__" and "--serve" in sys.argv:
        print(json.dumps({"skipped": "no torch for %s (%s)" % (sys.executable, e)}), flush=True)
        sys.exit(0)
    raise

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train_step"))
from torch_step import serve  # noqa: E402  bench/reference.hpp's protocol


def idx(path, header):
    with gzip.open(path, "rb") as f:
        return np.frombuffer(f.read(), dtype=np.uint8, offset=header)


class FashionMnist(torch.utils.data.Dataset):
    def __init__(self, root, limit):
        self.x = torch.from_numpy(idx(f"{root}/train-images-idx3-ubyte.gz", 16).reshape(-1, 1, 28, 28).copy())
        self.y = torch.from_numpy(idx(f"{root}/train-labels-idx1-ubyte.gz", 8).astype(np.int64))
        if limit > 0:
            self.x, self.y = self.x[:limit], self.y[:limit]

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):  # ToTensor + Normalize(0.5, 0.5)
        return (self.x[i].float().div(255) - 0.5) / 0.5, self.y[i]


def lenet():
    return nn.Sequential(nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(6, 16, 5), nn.ReLU(),
                         nn.MaxPool2d(2), nn.Flatten(), nn.Linear(400, 120), nn.ReLU(), nn.Linear(120, 84),
                         nn.ReLU(), nn.Linear(84, 10))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--limit", type=int, default=-1)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: torch's default)")
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--mode", choices=["tensors", "dataset"], default="tensors")
    p.add_argument("--serve", action="store_true", help="time an epoch per request (bench/reference.hpp)")
    a = p.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    ds = FashionMnist(a.data, a.limit)
    x_all = (ds.x.float().div(255) - 0.5) / 0.5 if a.mode == "tensors" else None
    model = lenet()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()

    def epoch():
        if a.mode == "dataset":
            loader = torch.utils.data.DataLoader(ds, batch_size=a.batch, shuffle=True, num_workers=a.workers)
        else:
            order = torch.randperm(len(ds))
            loader = ((x_all[i], ds.y[i]) for i in order.split(a.batch))
        t0 = time.perf_counter()
        for x, y in loader:
            opt.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
        return time.perf_counter() - t0

    hello = {"torch": torch.__version__, "threads": torch.get_num_threads(), "samples": len(ds), "batch": a.batch,
             "workers": a.workers, "mode": a.mode}
    if a.serve:
        serve(hello, {"epoch": epoch}, {})
        return
    hello["epoch_s"] = epoch()
    print(json.dumps(hello))


if __name__ == "__main__":
    main()
