"""A training script that dies during start-up, as one whose dataset download failed does: it
imports torch, builds its model, then the dataset raises before the first step.

    python dies_at_start.py
"""

import sys

import torch
from torch import nn

model = nn.Linear(8, 2)


class MissingDataset(torch.utils.data.Dataset):
    def __init__(self, root):
        print(f"Downloading into {root} failed: no network", file=sys.stderr)
        raise RuntimeError("Dataset not found. You can use download=True to download it")  # DATASET LINE


if __name__ == "__main__":
    MissingDataset("./data")
