"""Train a LightningModule with lightning.Trainer on the CPU, over a dataset that is slow to read.

Written the way the Lightning docs write a first model: a LightningModule with
``training_step`` and ``configure_optimizers`` (automatic optimisation: Lightning calls
``optimizer.step(closure)``, and the closure runs ``training_step`` and ``backward``), a
DataLoader over a map-style Dataset, and ``Trainer.fit``. The designed bottleneck is the
dataset: each sample is parsed from a text record in Python (as a CSV or JSON-lines reader
does), so the loop waits for its batches (input-bound), at the parsing line of ``__getitem__``.

    python lightning_module.py [--seconds 0] [--steps 0] [--workers 0] [--progress]

``--seconds``/``--steps``: stop after that long or that many steps (0: run until killed).
Prints ``ready`` once the loop runs; with ``--progress`` one ``progress T STEP CPU`` line per
step (monotonic time, steps done, the process's CPU seconds) for benchmarks/why_overhead.py.
Nothing is written to the working directory: no logger, no checkpoints, and Lightning's root
directory is a temporary one.
"""

import tempfile

import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from _harness import StepClock, parser as harness_parser


class RecordDataset(Dataset):
    """Each sample is a text record of 1024 comma-separated numbers (a wide CSV row), parsed per access."""

    def __init__(self, size=100_000, features=1024):
        self.size = size
        self.features = features
        self.record = ",".join(f"{(i * 37 % 101) / 101:.6f}" for i in range(features))

    def __len__(self):
        return self.size

    def __getitem__(self, index):
        fields = [float(value) * (1 + index % 7) for value in self.record.split(",")]  # PARSE LINE
        x = torch.tensor(fields)  # TO TENSOR LINE
        return x, index % 2


class Classifier(L.LightningModule):
    def __init__(self, features=1024):
        super().__init__()
        self.model = nn.Sequential(nn.Linear(features, 64), nn.ReLU(), nn.Linear(64, 2))
        self.loss = nn.CrossEntropyLoss()

    def forward(self, x):
        return self.model(x)  # MODEL LINE

    def training_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)  # FORWARD LINE
        loss = self.loss(logits, y)
        accuracy = (logits.argmax(dim=1) == y).float().mean()  # METRIC LINE
        self.log_dict({"train_loss": loss, "train_acc": accuracy})
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


class Progress(L.Callback):
    def __init__(self, clock):
        self.clock = clock

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if self.clock.tick():
            trainer.should_stop = True


def main():
    parser = harness_parser(__doc__, batch_size=32, workers=0)
    args = parser.parse_args()

    torch.set_num_threads(1)
    loader = DataLoader(RecordDataset(), batch_size=args.batch_size, shuffle=True, num_workers=args.workers)
    with tempfile.TemporaryDirectory(prefix="lightning-") as root:
        trainer = L.Trainer(accelerator="cpu", devices=1, max_epochs=-1, max_steps=args.steps or -1,
                            logger=False, enable_checkpointing=False, enable_progress_bar=False,
                            enable_model_summary=False, default_root_dir=root,
                            callbacks=[Progress(StepClock(args))])
        trainer.fit(Classifier(), loader)


if __name__ == "__main__":
    main()
