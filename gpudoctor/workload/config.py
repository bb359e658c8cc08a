"""What a sweep runs: the configuration, its validation, and the list of runs it expands to.

No torch here: the CLI validates its input (exit 2 on bad values) before anything heavy
is imported, and the TUI can build a configuration in its own process.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable

from gpudoctor.core.errors import UsageError

MODES = ("dataloader", "tuned", "resident")
DEVICES = ("cpu", "cuda")

DEFAULT_BATCH_SIZES = (64, 1000, 10000, 20000)
DEFAULT_WORKERS = (0, 2, 4)

# --quick: a subset of the data and of the grid, for a <= 60 s look on a small machine.
QUICK_BATCH_SIZES = (64, 1000)
QUICK_WORKERS = (0, 2)
QUICK_TRAIN_SAMPLES = 5_000
QUICK_TEST_SAMPLES = 1_000

# --train-samples / --test-samples: a hard cap (160x MNIST's 60,000 training images), and for
# the synthetic set (made in memory) what fits: measured peak ~12.6 KB per sample while the
# set is drawn and normalised (200,000 samples, CPU, torch 2.14), counted as 16 KiB, and at
# most half of the memory available now.
MAX_SAMPLES = 10_000_000
SYNTHETIC_BYTES_PER_SAMPLE = 16 * 1024
SYNTHETIC_DEFAULT_SAMPLES = (60_000, 10_000)  # data.SYNTHETIC_TRAIN_SIZE, SYNTHETIC_TEST_SIZE
MEMORY_SHARE = 0.5

# NVML utilisation is polled this often during a run (20 Hz; the issue asks for >= 10 Hz).
UTIL_INTERVAL_S = 0.05


def cpu_count() -> int:
    """CPUs this process may use (affinity-aware where the OS says)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def available_memory() -> int | None:
    """Bytes of memory available to a new allocation now (psutil), None if unknown."""
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except Exception:  # psutil missing or unsupported here: no memory bound, the hard cap stays
        return None


def parse_int_list(text: str, option: str, minimum: int) -> list[int]:
    """'64,1000' -> [64, 1000]; a bad entry is a one-line UsageError naming the option."""
    values: list[int] = []
    for raw in str(text).split(","):
        token = raw.strip()
        if not token:
            raise UsageError(f"{option}: empty entry in {text!r}")
        try:
            value = int(token)
        except ValueError:
            raise UsageError(f"{option}: {token!r} is not an integer") from None
        if value < minimum:
            raise UsageError(f"{option}: {value} must be >= {minimum}")
        if value not in values:
            values.append(value)
    return values


def parse_choice_list(text: str, option: str, choices: Iterable[str]) -> list[str]:
    choices = tuple(choices)
    values: list[str] = []
    for raw in str(text).split(","):
        token = raw.strip().lower()
        if token not in choices:
            raise UsageError(f"{option}: unknown value {raw.strip()!r} (choose from {', '.join(choices)})")
        if token not in values:
            values.append(token)
    return values


@dataclass
class RunConfig:
    """One run of the sweep. ``workers`` is None for ``resident`` (no DataLoader)."""

    device: str
    mode: str
    batch_size: int
    workers: int | None

    def label(self) -> str:
        workers = "-" if self.workers is None else str(self.workers)
        return f"{self.device} {self.mode} batch={self.batch_size} workers={workers}"


@dataclass
class SweepConfig:
    """A whole sweep. Plain data (picklable, JSON-able): safe to send to a spawned child."""

    batch_sizes: list[int] = field(default_factory=lambda: list(DEFAULT_BATCH_SIZES))
    workers: list[int] = field(default_factory=lambda: list(DEFAULT_WORKERS))
    modes: list[str] = field(default_factory=lambda: list(MODES))
    devices: list[str] | None = None  # None: cpu, plus cuda when torch sees a GPU
    cuda_index: int = 0               # which torch CUDA device "cuda" means
    epochs: int = 1
    quick: bool = False
    data_dir: str | None = None
    download: bool = False
    train_samples: int | None = None  # None: all (quick: QUICK_TRAIN_SAMPLES)
    test_samples: int | None = None
    seed: int = 0
    util_interval_s: float = UTIL_INTERVAL_S
    repeat: int = 1  # run the whole grid this many times (run-to-run variation, for the advice)

    @classmethod
    def quick_defaults(cls, **overrides: object) -> "SweepConfig":
        config = cls(batch_sizes=list(QUICK_BATCH_SIZES), workers=list(QUICK_WORKERS), quick=True)
        for key, value in overrides.items():
            setattr(config, key, value)
        return config

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "SweepConfig":
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})

    def validate(self) -> None:
        """Raise UsageError (one line) for anything a sweep cannot run."""
        if not self.batch_sizes:
            raise UsageError("--batch-sizes: give at least one batch size")
        for value in self.batch_sizes:
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise UsageError(f"--batch-sizes: {value!r} must be an integer >= 1")
        if not self.workers:
            raise UsageError("--workers: give at least one worker count")
        for value in self.workers:
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise UsageError(f"--workers: {value!r} must be an integer >= 0")
        if not self.modes:
            raise UsageError("--modes: give at least one mode")
        for mode in self.modes:
            if mode not in MODES:
                raise UsageError(f"--modes: unknown mode {mode!r} (choose from {', '.join(MODES)})")
        for device in self.devices or ():
            if device not in DEVICES:
                raise UsageError(f"--device: unknown device {device!r} (choose from {', '.join(DEVICES)})")
        if not isinstance(self.cuda_index, int) or self.cuda_index < 0:
            raise UsageError(f"cuda_index: {self.cuda_index!r} must be an integer >= 0")
        if not isinstance(self.epochs, int) or self.epochs < 1:
            raise UsageError(f"--epochs: {self.epochs!r} must be an integer >= 1")
        for name in ("train_samples", "test_samples"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise UsageError(f"{name}: {value!r} must be an integer >= 1")
        if not isinstance(self.repeat, int) or isinstance(self.repeat, bool) or self.repeat < 1:
            raise UsageError(f"--repeat: {self.repeat!r} must be an integer >= 1")
        self._check_samples_fit()
        if not self.util_interval_s > 0 or self.util_interval_s > 0.1:
            raise UsageError(f"util_interval_s must be in (0, 0.1] (>= 10 Hz), got {self.util_interval_s}")

    def _check_samples_fit(self) -> None:
        """--train-samples/--test-samples within the hard cap and, for the synthetic set, in memory."""
        for option, value in (("--train-samples", self.train_samples), ("--test-samples", self.test_samples)):
            if value is not None and value > MAX_SAMPLES:
                raise UsageError(f"{option}: {value} is more than the limit of {MAX_SAMPLES:,} samples")
        if self.data_dir is not None or self.download:
            return  # real MNIST: a fixed size on disk; a larger limit just means all of it
        if self.train_samples is None and self.test_samples is None:
            return  # the default size, as always
        train = self.train_samples or SYNTHETIC_DEFAULT_SAMPLES[0]
        test = self.test_samples or SYNTHETIC_DEFAULT_SAMPLES[1]
        need = (train + test) * SYNTHETIC_BYTES_PER_SAMPLE
        available = available_memory()
        if available is not None and need > available * MEMORY_SHARE:
            option, other = ("--train-samples", test) if self.train_samples is not None else ("--test-samples", train)
            fits = max(0, int(available * MEMORY_SHARE) // SYNTHETIC_BYTES_PER_SAMPLE - other)
            raise UsageError(f"{option}: the synthetic set of {train + test:,} samples needs about "
                             f"{need / 2**30:.1f} GiB, more than half of the {available / 2**30:.1f} GiB "
                             f"available; at most about {fits:,} fit")

    def effective_workers(self) -> tuple[list[int], list[int]]:
        """(worker counts to run, the ones dropped because they exceed the CPU count)."""
        cpus = cpu_count()
        kept: list[int] = []
        capped: list[int] = []
        for value in self.workers:
            if value > cpus:
                capped.append(value)
                value = cpus
            if value not in kept:
                kept.append(value)
        return kept, capped

    def sample_limits(self) -> tuple[int | None, int | None]:
        train, test = self.train_samples, self.test_samples
        if self.quick:
            train = train or QUICK_TRAIN_SAMPLES
            test = test or QUICK_TEST_SAMPLES
        return train, test

    def expand(self, devices: list[str]) -> list[RunConfig]:
        """Every run, in the order they execute: device, mode, batch size, workers; the whole
        grid ``repeat`` times (so slow drift on the machine reaches every configuration)."""
        workers, _ = self.effective_workers()
        runs: list[RunConfig] = []
        for device in [d for _ in range(self.repeat) for d in devices]:
            for mode in self.modes:
                for batch_size in self.batch_sizes:
                    if mode == "resident":
                        runs.append(RunConfig(device, mode, batch_size, None))
                    else:
                        runs.extend(RunConfig(device, mode, batch_size, w) for w in workers)
        return runs
