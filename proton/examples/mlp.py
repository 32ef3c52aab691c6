"""The bundled example: a small MLP's training steps with scopes (GPU if present, else CPU).

    proton -n example proton/examples/mlp.py --steps 5
    proton-viewer example.hatchet
"""
from __future__ import annotations

import argparse

import torch

import proton


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--width", type=int, default=1024)
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = torch.nn.Sequential(torch.nn.Linear(args.width, 4 * args.width), torch.nn.GELU(),
                                torch.nn.Linear(4 * args.width, args.width)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(256, args.width, device=device)
    proton.start("example")  # a no-op under the `proton` command, which already profiles
    for _ in range(args.steps):
        with proton.scope("forward", {"tokens": x.shape[0]}):
            loss = model(x).square().mean()
        with proton.scope("backward"):
            loss.backward()
        with proton.scope("optimizer"):
            opt.step()
            opt.zero_grad()
    proton.finalize()
    print(f"{args.steps} steps on {device}, final loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
