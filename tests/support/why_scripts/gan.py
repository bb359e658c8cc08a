"""Train a small GAN on synthetic data: a generator and a discriminator, each with its own optimizer.

Written the way the DCGAN tutorial writes its loop: per batch, a discriminator step (real and
fake batches, ``optimizer_d.step()``), then a generator step (``optimizer_g.step()``), with
Adam for both. The designed bottleneck is computing on the CPU: the data is a tensor already in
memory (no loader to wait for), so the time is forward, backward and the two optimizers' updates;
both ``step()`` calls must be attributed to the optimizer, not to the forward pass.

    python gan.py [--seconds 0] [--steps 0] [--progress]

``--seconds``/``--steps``: stop after that long or that many steps (0: run until killed).
Prints ``ready`` once the loop runs; with ``--progress`` one ``progress T STEP CPU`` line per
step (monotonic time, steps done, the process's CPU seconds) for benchmarks/why_overhead.py.
"""

import torch
from torch import nn

from _harness import StepClock, parser as harness_parser

LATENT = 64
IMAGE = 28 * 28


class Generator(nn.Module):
    def __init__(self, width=512):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(LATENT, width), nn.LeakyReLU(0.2),
            nn.Linear(width, width), nn.BatchNorm1d(width), nn.LeakyReLU(0.2),
            nn.Linear(width, IMAGE), nn.Tanh(),
        )

    def forward(self, z):
        return self.net(z)


class Discriminator(nn.Module):
    def __init__(self, width=512):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(IMAGE, width), nn.LeakyReLU(0.2),
            nn.Linear(width, width // 2), nn.LeakyReLU(0.2),
            nn.Linear(width // 2, 1),
        )

    def forward(self, x):
        return self.net(x)


def real_images(n, generator):
    """Synthetic "real" data: blurred blobs, made once, kept in memory."""
    centres = torch.rand(n, 2, generator=generator) * 20 + 4
    grid = torch.stack(torch.meshgrid(torch.arange(28.0), torch.arange(28.0), indexing="ij"), -1).reshape(-1, 2)
    distance = ((grid[None] - centres[:, None]) ** 2).sum(-1)
    return torch.exp(-distance / 18.0) * 2 - 1


def main():
    parser = harness_parser(__doc__, batch_size=32)
    args = parser.parse_args()

    torch.set_num_threads(1)
    data = real_images(4096, torch.Generator().manual_seed(0))
    netG, netD = Generator(), Discriminator()
    criterion = nn.BCEWithLogitsLoss()
    optimizer_d = torch.optim.Adam(netD.parameters(), lr=2e-4, betas=(0.5, 0.999))
    optimizer_g = torch.optim.Adam(netG.parameters(), lr=2e-4, betas=(0.5, 0.999))
    ones = torch.ones(args.batch_size, 1)
    zeros = torch.zeros(args.batch_size, 1)

    clock = StepClock(args)
    while True:
        for real in data.split(args.batch_size):
            if len(real) < args.batch_size:
                continue
            # (1) the discriminator: real images towards 1, generated ones towards 0
            netD.zero_grad()
            fake = netG(torch.randn(args.batch_size, LATENT))
            loss_d = criterion(netD(real), ones) + criterion(netD(fake.detach()), zeros)
            loss_d.backward()
            optimizer_d.step()  # D STEP LINE
            # (2) the generator: make the discriminator call its images real
            netG.zero_grad()
            loss_g = criterion(netD(fake), ones)
            loss_g.backward()
            optimizer_g.step()  # G STEP LINE
            if clock.tick():
                return


if __name__ == "__main__":
    main()
