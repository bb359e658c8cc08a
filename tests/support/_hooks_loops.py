"""Real CPU training loops for the hooks tests: the MNIST-shaped MLP on learnable synthetic data;
and a scalar that syncs the way torch says it does, with a sync counter around a block."""

from __future__ import annotations

import contextlib
import time
import warnings
from typing import Any, Iterator

import torch
from torch import nn
from torch.utils.data import BatchSampler, DataLoader, Dataset, RandomSampler

from gpudoctor.hooks.torch_support import SYNC_WARNING_TEXT, SyncCounter


class FakeCudaScalar:
    """Warns like torch does in sync debug mode "warn": from the Python line that synced."""

    def item(self) -> float:
        warnings.warn(SYNC_WARNING_TEXT, UserWarning, stacklevel=2)
        return 0.0


@contextlib.contextmanager
def counting_syncs(**options: Any) -> Iterator[SyncCounter]:
    """A SyncCounter without torch.cuda (it counts the warnings alone) installed for the block and
    uninstalled after it, whatever happens in it; ``options`` go to SyncCounter."""
    counter = SyncCounter(torch=None, **options)
    counter.install()
    try:
        yield counter
    finally:
        counter.uninstall()


def mnist_mlp() -> nn.Module:
    """The reference network: 784-512-256-128-64-10 with ReLU."""
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(),
                         nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 10))


class SyntheticDigits(Dataset):
    """Learnable MNIST-shaped data: each class is a fixed random 28x28 pattern plus noise.

    Indexed by a list of indices (a whole batch at once), the usual fast path for
    in-memory data with ``DataLoader(batch_size=None, sampler=BatchSampler(...))``.
    """

    def __init__(self, n: int = 4096, seed: int = 0) -> None:
        g = torch.Generator().manual_seed(seed)
        prototypes = torch.randn(10, 1, 28, 28, generator=g)
        self.targets = torch.randint(0, 10, (n,), generator=g)
        self.images = prototypes[self.targets] + 0.5 * torch.randn(n, 1, 28, 28, generator=g)

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, index: Any) -> tuple[torch.Tensor, torch.Tensor]:
        return self.images[index], self.targets[index]


def slow_collate(batch: Any, delay_s: float = 0.05) -> Any:
    """A collate step that is slow for the size of the model (decoding, augmentation...)."""
    time.sleep(delay_s)
    return batch


def fast_collate(batch: Any) -> Any:
    return batch


LEAP_S = 1000.0  # far beyond any real wait or step, however loaded the machine


class LeapingClock:
    """A monitor's or callback's clock: real time plus LEAP_S at each leap. Collating through
    :meth:`collate` makes each batch's data wait last 1000 s by this clock; a model with
    :meth:`leap_in_forward` makes each step last 1000 s. A diagnosis then shows by three orders
    of magnitude, whatever the machine's load, where 50 ms sleeps against a step slowed by a busy
    CPU did not."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.perf_counter() + self.offset

    def collate(self, batch: Any) -> Any:
        self.offset += LEAP_S
        return batch

    def leap_in_forward(self, model: nn.Module) -> nn.Module:
        def leap(_module: nn.Module, _inputs: Any) -> None:
            self.offset += LEAP_S

        model.register_forward_pre_hook(leap)
        return model


def make_loader(collate: Any, batch_size: int = 128, n: int = 4096, seed: int = 0,
                pin_memory: bool = False) -> DataLoader:
    data = SyntheticDigits(n, seed)
    sampler = BatchSampler(RandomSampler(data, generator=torch.Generator().manual_seed(seed)), batch_size, drop_last=True)
    return DataLoader(data, batch_size=None, sampler=sampler, collate_fn=collate, pin_memory=pin_memory)


class single_thread:
    """One intra-op thread while a test loop runs: on a busy 2-core CI machine, OpenMP threads
    spinning against other processes make step times swing by 100x; one thread keeps them steady."""

    def __enter__(self) -> None:
        self._saved = torch.get_num_threads()
        torch.set_num_threads(1)

    def __exit__(self, *exc: Any) -> None:
        torch.set_num_threads(self._saved)


def train_epoch(monitor: Any, loader: Any, model: nn.Module | None = None, device: str = "cpu",
                sync_every_step: bool = False) -> tuple[Any, list[float]]:
    """One epoch of the seeds' loop (SGD lr 0.1, momentum 0.5).

    Returns (accuracy as a 0-d tensor on ``device``, losses); reading the accuracy is left
    to the caller so that nothing in here synchronises unless ``sync_every_step``.
    """
    torch.manual_seed(0)
    model = (model or mnist_mlp()).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.5)
    losses: list[float] = []
    running = torch.zeros((), device=device)
    correct = torch.zeros((), device=device, dtype=torch.long)
    total = 0
    for inputs, targets in monitor.wrap(loader):
        with monitor.step():
            inputs = inputs.to(device, non_blocking=True)
            targets = targets.to(device, non_blocking=True)
            opt.zero_grad(set_to_none=True)
            out = model(inputs)
            loss = nn.functional.cross_entropy(out, targets)
            loss.backward()
            opt.step()
            if sync_every_step:
                losses.append(loss.item())  # the tutorial's habit: one host sync per step
            else:
                running += loss.detach()
            correct += (out.argmax(1) == targets).sum()
            total += len(targets)
    return correct / max(total, 1), losses


_SUMMARY_VALIDATOR = None


def validate_summary(data: dict) -> dict:
    """Check a Summary.to_dict() against docs/training-summary.schema.json (and strict JSON)."""
    global _SUMMARY_VALIDATOR
    import json
    from pathlib import Path

    import jsonschema

    if _SUMMARY_VALIDATOR is None:
        schema_path = Path(__file__).resolve().parents[2] / "docs" / "training-summary.schema.json"
        schema = json.loads(schema_path.read_text(encoding="utf-8"))
        jsonschema.Draft202012Validator.check_schema(schema)
        _SUMMARY_VALIDATOR = jsonschema.Draft202012Validator(schema)
    errors = sorted(_SUMMARY_VALIDATOR.iter_errors(data), key=lambda e: list(e.path))
    if errors:
        raise AssertionError(f"summary does not match schema at {list(errors[0].path)}: {errors[0].message}")
    json.dumps(data, allow_nan=False)
    return data
