"""Train a small classifier the way pytorch/examples' mnist, vae and imagenet scripts do: a
``train(epoch)`` function, then a ``test()`` that evaluates under ``torch.no_grad()``, and the
loop at module level under ``if __name__ == "__main__":``. All the sampled time is training:
``gpudoctor why`` must not call it evaluation because of ``test()``'s block above the loop.

    python epochs.py [--style functions|module] [--seconds 0] [--steps 0]

``--style functions``: ``train(epoch)`` called from the module's loop (the examples' style);
``--style module``: the forward, backward and step written at module level in the loop.
"""

import torch
from torch import nn

from _harness import StepClock, parser as harness_parser

model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
images, targets = torch.randn(64, 256), torch.randint(0, 10, (64,))


def train(epoch, clock):
    """One short epoch; True when the run should end."""
    model.train()
    for _ in range(10):
        optimizer.zero_grad()
        output = model(images)  # TRAIN FORWARD
        loss = nn.functional.cross_entropy(output, targets)
        loss.backward()
        optimizer.step()
        if clock.tick():
            return True
    return False


def test():
    model.eval()
    with torch.no_grad():
        output = model(images)
        return (output.argmax(1) == targets).float().mean().item()


if __name__ == "__main__":
    options = harness_parser(__doc__, 64)
    options.add_argument("--style", choices=("functions", "module"), default="functions")
    args = options.parse_args()
    torch.set_num_threads(1)
    clock = StepClock(args)
    if args.style == "functions":
        epoch = 1
        while not train(epoch, clock):
            epoch += 1
        test()
    else:
        while True:
            optimizer.zero_grad()
            output = model(images)  # MODULE FORWARD
            loss = nn.functional.cross_entropy(output, targets)
            loss.backward()
            optimizer.step()
            if clock.tick():
                break
        test()
