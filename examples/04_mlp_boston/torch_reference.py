#!/usr/bin/python3
"""mlp_boston's recipe in PyTorch, for comparison: the same 13-16-32-1 MLP, Adam(0.01), MSELoss, batch 128,
100 epochs, features standardized with the training rows' statistics, the test RMSE after every epoch.

The split is kiln's (random_split with the same seed: a Fisher-Yates permutation driven by std::mt19937_64,
reimplemented below; 405 + 101 rows for Boston), so both programs are scored on the same test rows and print
the same baseline_rmse. Initialisation and shuffling come from torch's generator, so the RMSE of one seed
differs from kiln's; compare the spread over several seeds.

Debian 12: apt-get install python3-torch python3-sklearn (the CSV comes with python3-sklearn).
  /usr/bin/python3 examples/04_mlp_boston/torch_reference.py --seed 0
  for s in 0 1 2; do /usr/bin/python3 examples/04_mlp_boston/torch_reference.py --seed $s | tail -1; done
"""
import argparse
import csv
import math
import time

import torch

DEFAULT_DATA = "/usr/lib/python3/dist-packages/sklearn/datasets/data/boston_house_prices.csv"
MASK = (1 << 64) - 1


class Mt19937_64:
    """std::mt19937_64 (C++11 [rand.predef]): the 10000th output for the default seed 5489 is
    9981545732273789042."""

    def __init__(self, seed):
        self.mt = [seed & MASK]
        for i in range(1, 312):
            prev = self.mt[-1]
            self.mt.append((6364136223846793005 * (prev ^ (prev >> 62)) + i) & MASK)
        self.index = 312

    def __call__(self):
        if self.index >= 312:
            for i in range(312):
                y = (self.mt[i] & 0xFFFFFFFF80000000) | (self.mt[(i + 1) % 312] & 0x7FFFFFFF)
                self.mt[i] = self.mt[(i + 156) % 312] ^ (y >> 1) ^ (0xB5026F5AA96619E9 if y & 1 else 0)
            self.index = 0
        y = self.mt[self.index]
        self.index += 1
        y ^= (y >> 29) & 0x5555555555555555
        y ^= (y << 17) & 0x71D67FFFEDA60000
        y ^= (y << 37) & 0xFFF7EEE000000000
        y ^= y >> 43
        return y & MASK


def kiln_split(n, seed):
    """kiln::data::random_split(d, {0.8, 0.2}, seed): the permutation and PyTorch's length rule."""
    order = list(range(n))
    g = Mt19937_64(seed)
    for i in range(n - 1, 0, -1):
        j = g() % (i + 1)
        order[i], order[j] = order[j], order[i]
    lengths = [math.floor(n * 0.8), math.floor(n * 0.2)]
    for k in range(n - sum(lengths)):
        lengths[k % 2] += 1
    return order[: lengths[0]], order[lengths[0]:]


def read_csv(path, target):
    with open(path, newline="") as f:
        rows = [r for r in csv.reader(f) if any(c.strip() for c in r)]
    if len(rows) > 1 and all(c == "" for c in rows[0][2:]) and rows[0][0].isdigit():
        rows = rows[1:]  # scikit-learn's count line
    header = [c.strip() for c in rows[0]]
    t = header.index(target)
    x = [[float(c) for k, c in enumerate(r) if k != t] for r in rows[1:]]
    y = [[float(r[t])] for r in rows[1:]]
    return torch.tensor(x), torch.tensor(y)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data", default=DEFAULT_DATA)
    p.add_argument("--target", default="MEDV")
    p.add_argument("--epochs", type=int, default=100)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    o = p.parse_args()
    if o.threads:
        torch.set_num_threads(o.threads)

    t_start = time.perf_counter()
    g = Mt19937_64(5489)
    for _ in range(9999):
        g()
    assert g() == 9981545732273789042, "Mt19937_64 does not match std::mt19937_64"

    x, y = read_csv(o.data, o.target)
    train_rows, test_rows = kiln_split(len(x), o.seed)
    mean = x[train_rows].double().mean(0)
    scale = x[train_rows].double().std(0, unbiased=False)  # StandardScaler: ddof 0, constant -> 1
    scale[scale == 0] = 1
    x = ((x.double() - mean) / scale).float()
    x_train, y_train, x_test, y_test = x[train_rows], y[train_rows], x[test_rows], y[test_rows]
    baseline = math.sqrt(((y_test.double() - y_train.double().mean()) ** 2).mean().item())

    torch.manual_seed(o.seed)
    model = torch.nn.Sequential(torch.nn.Linear(13, 16), torch.nn.ReLU(), torch.nn.Linear(16, 32), torch.nn.ReLU(),
                                torch.nn.Linear(32, 1))
    opt = torch.optim.Adam(model.parameters(), lr=o.lr)
    mse = torch.nn.MSELoss()
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x_train, y_train), batch_size=o.batch_size,
                                         shuffle=True, generator=torch.Generator().manual_seed(o.seed))
    print(f"torch {torch.__version__}: {len(train_rows)} train / {len(test_rows)} test rows of {o.data}, "
          f"{torch.get_num_threads()} threads; baseline (training mean) test RMSE {baseline:.4f}")
    train_loss = test_rmse = float("nan")
    finite = True
    for epoch in range(o.epochs):
        model.train()
        total, seen = 0.0, 0
        for xb, yb in loader:
            opt.zero_grad()
            loss = mse(model(xb), yb)
            loss.backward()
            opt.step()
            total += loss.item() * len(xb)
            seen += len(xb)
        train_loss = total / seen
        model.eval()
        with torch.no_grad():
            test_loss = mse(model(x_test), y_test).item()
        test_rmse = math.sqrt(test_loss)
        finite = finite and math.isfinite(train_loss) and math.isfinite(test_loss)
        if (epoch + 1) % 10 == 0 or epoch + 1 == o.epochs:
            print(f"epoch {epoch + 1}/{o.epochs}: train loss {train_loss:.4f}, test RMSE {test_rmse:.4f}")
    ok = finite and test_rmse < baseline
    print(f"result: test_rmse={test_rmse:.4f} baseline_rmse={baseline:.4f} train_loss={train_loss:.4f} "
          f"epochs={o.epochs} seconds={time.perf_counter() - t_start:.2f} ok={int(ok)}")


if __name__ == "__main__":
    main()
