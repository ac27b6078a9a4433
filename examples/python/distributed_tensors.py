"""Data-parallel training of a small MLP on 4 procs with distributed tensors.

Every proc builds the same model (the same seed on every worker), takes its
quarter of each synthetic batch, computes loss and gradients locally, and
averages the gradients with ``reduce("gpu", "avg")`` (worker to worker).
The controller checks each step's loss against training the same model in
this one process on the whole batch.
"""

import torch

from monarch import fetch_shard, remote
from monarch.actor import this_host

STEPS, BATCH, PROCS, LR = 20, 64, 4, 0.05


@remote(propagate=lambda seed: None)
def seed(s):
    torch.manual_seed(s)


def make_model():
    return torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))


def batches():
    g = torch.Generator().manual_seed(1)
    w = torch.randn(8, 1, generator=g)
    for _ in range(STEPS):
        x = torch.randn(BATCH, 8, generator=g)
        yield x, torch.sin(x @ w)


def train_locally():
    torch.manual_seed(0)
    model = make_model()
    losses = []
    for x, y in batches():
        loss = torch.nn.functional.mse_loss(model(x), y)
        model.zero_grad()
        loss.backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= LR * p.grad
        losses.append(loss.item())
    return losses


def train_distributed(mesh):
    losses = []
    data = list(batches())  # made here, outside activate(): local tensors
    with mesh.activate():
        seed.call(0).get()
        model = make_model()
        rank = mesh.rank("gpu")
        for x_all, y_all in data:
            # Each proc keeps its quarter of the batch.
            x = x_all.view(PROCS, -1, 8).index_select(0, rank.view(1)).squeeze(0)
            y = y_all.view(PROCS, -1, 1).index_select(0, rank.view(1)).squeeze(0)
            loss = torch.nn.functional.mse_loss(model(x), y)
            for p in model.parameters():
                p.grad = None
            loss.backward()
            with torch.no_grad():
                for p in model.parameters():
                    p -= LR * p.grad.reduce("gpu", "avg")
            losses.append(loss.reduce("gpu", "avg"))
    return [fetch_shard(v, gpu=0).result(timeout=120).item() for v in losses]


def main():
    mesh = this_host().spawn_procs(per_host={"gpu": PROCS})
    try:
        dist = train_distributed(mesh)
    finally:
        mesh.stop().get(timeout=30)
    local = train_locally()
    for step, (a, b) in enumerate(zip(dist, local)):
        print(f"step {step:2d}  loss {a:.6f}  one-process {b:.6f}")
        assert abs(a - b) <= 1e-5 * max(1.0, abs(b)), (step, a, b)
    assert dist[-1] < dist[0], "the loss did not go down"
    print("distributed training matches one-process training step by step")


if __name__ == "__main__":
    main()
