"""Data for the reference workload: a built-in synthetic MNIST-shaped set, or real MNIST.

Both give the same thing: uint8 images ``[N, 28, 28]`` and int64 labels ``[N]`` for a
training and a held-out split, wrapped in :class:`MnistData`.

The synthetic set needs no network and no files. Each class is drawn from a few
stroke "glyphs" (line segments with a soft pen), shifted by up to two pixels, scaled in
brightness and covered in noise, so a network has to learn something: the reference
network reaches >= 90 % held-out accuracy after one epoch at batch size 64 (a test
checks it), and a device whose arithmetic is wrong does not. It is seeded: the same
seed gives the same bytes on every machine.

Real MNIST is read from IDX files (plain or ``.gz``) through torchvision's ``MNIST``
dataset. The headers and sizes are checked first, because torchvision's reader fails on
a truncated or corrupt file with a bare ``AssertionError``; here the error names the
file and what is wrong with it. Nothing is downloaded unless ``download=True``.

torch is imported inside the functions: importing this module stays cheap.
"""

from __future__ import annotations

import os
import shutil
import struct
import tempfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpudoctor.system import fileio
from gpudoctor.core.errors import UsageError

if TYPE_CHECKING:
    import torch

# Normalisation constants every MNIST tutorial uses (mean and std of the MNIST pixels).
MNIST_MEAN = 0.1307
MNIST_STD = 0.3081

IMAGE_SIDE = 28
NUM_CLASSES = 10

# The four IDX files of MNIST, as torchvision expects them in <root>/MNIST/raw.
IDX_FILES = {
    ("train", "images"): "train-images-idx3-ubyte",
    ("train", "labels"): "train-labels-idx1-ubyte",
    ("test", "images"): "t10k-images-idx3-ubyte",
    ("test", "labels"): "t10k-labels-idx1-ubyte",
}
# IDX magic numbers: two zero bytes, type 0x08 (unsigned byte), number of dimensions.
IDX_MAGIC_IMAGES = 0x00000803
IDX_MAGIC_LABELS = 0x00000801

SYNTHETIC_TRAIN_SIZE = 60_000  # as MNIST
SYNTHETIC_TEST_SIZE = 10_000


class WorkloadDataError(UsageError):
    """The data set cannot be read (missing, corrupt or truncated IDX file): exit 2."""


@dataclass
class MnistData:
    """Images (uint8 [N, 28, 28]) and labels (int64 [N]) for both splits."""

    train_images: Any
    train_labels: Any
    test_images: Any
    test_labels: Any
    source: str  # "synthetic" or "mnist"
    description: str

    def limited(self, train: int | None, test: int | None) -> "MnistData":
        """The first ``train``/``test`` samples (None: all)."""
        return MnistData(self.train_images[:train], self.train_labels[:train],
                         self.test_images[:test], self.test_labels[:test], self.source,
                         self.description)

    def info(self) -> dict[str, Any]:
        return {"source": self.source, "description": self.description,
                "train_samples": int(self.train_labels.shape[0]),
                "test_samples": int(self.test_labels.shape[0])}


# --------------------------------------------------------------------------- synthetic
GLYPHS_PER_CLASS = 4
STROKES_PER_GLYPH = 3
MAX_SHIFT = 2
SHIFTS = (2 * MAX_SHIFT + 1) ** 2
PEN_WIDTH = 1.1      # pixels: the pen's Gaussian width
NOISE_STD = 0.35     # on the 0..1 pixel scale


def _glyphs(generator: torch.Generator) -> torch.Tensor:
    """[10, GLYPHS_PER_CLASS, 28, 28] float images in 0..1, drawn with line strokes."""
    import torch

    n = NUM_CLASSES * GLYPHS_PER_CLASS * STROKES_PER_GLYPH
    # Strokes stay inside the central 20x20 box, as MNIST digits do.
    start = 4 + torch.rand(n, 2, generator=generator) * 20
    end = 4 + torch.rand(n, 2, generator=generator) * 20
    coords = torch.arange(IMAGE_SIDE, dtype=torch.float32)
    yy, xx = torch.meshgrid(coords, coords, indexing="ij")
    points = torch.stack([yy, xx], dim=-1).reshape(1, -1, 2)  # [1, 784, 2]
    seg = (end - start).unsqueeze(1)                            # [n, 1, 2]
    rel = points - start.unsqueeze(1)                           # [n, 784, 2]
    t = ((rel * seg).sum(-1) / (seg * seg).sum(-1).clamp_min(1e-6)).clamp(0, 1)
    nearest = start.unsqueeze(1) + t.unsqueeze(-1) * seg
    dist2 = ((points - nearest) ** 2).sum(-1)                  # [n, 784]
    ink = torch.exp(-dist2 / (2 * PEN_WIDTH ** 2))
    ink = ink.reshape(NUM_CLASSES, GLYPHS_PER_CLASS, STROKES_PER_GLYPH, IMAGE_SIDE, IMAGE_SIDE)
    return ink.amax(dim=2)


def _shifted_glyphs(glyphs: torch.Tensor) -> torch.Tensor:
    """Every glyph at every shift: [10, G, SHIFTS, 28, 28] (a few MB)."""
    import torch

    side = 2 * MAX_SHIFT + 1
    padded = torch.nn.functional.pad(glyphs, (MAX_SHIFT,) * 4)
    views = [padded[:, :, dy:dy + IMAGE_SIDE, dx:dx + IMAGE_SIDE]
             for dy in range(side) for dx in range(side)]
    return torch.stack(views, dim=2)


def _synthetic_split(glyphs: torch.Tensor, count: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    import torch

    labels = torch.randint(0, NUM_CLASSES, (count,), generator=generator)
    variant = torch.randint(0, GLYPHS_PER_CLASS, (count,), generator=generator)
    shift = torch.randint(0, SHIFTS, (count,), generator=generator)
    images = _shifted_glyphs(glyphs)[labels, variant, shift]    # [count, 28, 28]
    brightness = 0.6 + 0.4 * torch.rand(count, 1, 1, generator=generator)
    images = images * brightness + NOISE_STD * torch.randn(images.shape, generator=generator)
    images = (images.clamp(0, 1) * 255).round().to(torch.uint8)
    return images, labels.to(torch.int64)


def synthetic_mnist(train_size: int = SYNTHETIC_TRAIN_SIZE, test_size: int = SYNTHETIC_TEST_SIZE,
                    seed: int = 0) -> MnistData:
    """The built-in learnable MNIST-shaped set (no files, no network), seeded."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    glyphs = _glyphs(generator)
    train_images, train_labels = _synthetic_split(glyphs, train_size, generator)
    test_images, test_labels = _synthetic_split(glyphs, test_size, generator)
    return MnistData(train_images, train_labels, test_images, test_labels, "synthetic",
                     f"built-in synthetic MNIST-shaped set (seed {seed})")


# --------------------------------------------------------------------------- real MNIST
def _find_idx(directory: Path, name: str) -> Path | None:
    for folder in (directory, directory / "MNIST" / "raw", directory / "raw"):
        for candidate in (folder / name, folder / (name + ".gz")):
            if candidate.is_file():
                return candidate
    return None


#: The most an IDX file is read or inflated to: MNIST's largest (60,000 training images)
#: is 47,040,016 bytes; a file beyond this bound is not MNIST, however small it is compressed.
MAX_IDX_BYTES = 64 << 20


def _read_bytes(path: Path) -> bytes:
    """An IDX file's bytes (inflated when it ends in .gz), bounded by :data:`MAX_IDX_BYTES` while
    read or inflated: a 0.8 MB gzip that inflates to gigabytes stops at the bound."""
    try:
        if path.suffix == ".gz":
            return fileio.read_gzip_regular(path, MAX_IDX_BYTES)
        return fileio.read_regular(path, MAX_IDX_BYTES)
    except fileio.TooLargeError as exc:
        raise WorkloadDataError(f"{path}: {exc.strerror}; not an MNIST IDX file") from None
    except (EOFError, zlib.error) as exc:
        raise WorkloadDataError(f"{path}: corrupt gzip file ({exc})") from None
    except OSError as exc:
        raise WorkloadDataError(f"{path}: cannot read ({exc.strerror or exc})") from None


def check_idx(path: Path, data: bytes, kind: str) -> int:
    """Validate an IDX file's header and size; return its item count.

    ``kind`` is "images" (magic 0x803, N x 28 x 28) or "labels" (magic 0x801, N).
    """
    expected_magic, ndim = (IDX_MAGIC_IMAGES, 3) if kind == "images" else (IDX_MAGIC_LABELS, 1)
    header_size = 4 + 4 * ndim
    if len(data) < header_size:
        raise WorkloadDataError(
            f"{path}: truncated: {len(data)} bytes, shorter than the {header_size}-byte IDX header")
    (magic,) = struct.unpack(">I", data[:4])
    if magic != expected_magic:
        raise WorkloadDataError(
            f"{path}: not an MNIST {kind} IDX file: magic number 0x{magic:08x}, "
            f"expected 0x{expected_magic:08x}")
    dims = struct.unpack(">" + "I" * ndim, data[4:header_size])
    if kind == "images" and dims[1:] != (IMAGE_SIDE, IMAGE_SIDE):
        raise WorkloadDataError(
            f"{path}: images are {dims[1]}x{dims[2]}, expected {IMAGE_SIDE}x{IMAGE_SIDE}")
    expected = header_size + (dims[0] * dims[1] * dims[2] if kind == "images" else dims[0])
    if len(data) < expected:
        raise WorkloadDataError(
            f"{path}: truncated: the header announces {dims[0]} {kind} ({expected} bytes) "
            f"but the file holds {len(data)} bytes")
    if len(data) > expected:
        raise WorkloadDataError(
            f"{path}: corrupt: {len(data) - expected} bytes after the {dims[0]} {kind} "
            f"the header announces")
    if kind == "labels":
        bad = max(data[header_size:], default=0)
        if bad >= NUM_CLASSES:
            raise WorkloadDataError(f"{path}: corrupt: label value {bad}, expected 0..9")
    return dims[0]


def download_mnist(root: str | os.PathLike[str]) -> None:
    """Fetch MNIST into ``root``/MNIST/raw with torchvision (only when the user asked)."""
    from torchvision.datasets import MNIST

    try:
        for train in (True, False):
            MNIST(str(root), train=train, download=True)
    except Exception as exc:
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        why = " ".join(lines)[:300] if lines else type(exc).__name__
        raise WorkloadDataError(
            f"downloading MNIST into {root} failed: {why} "
            "(no network? put the IDX files in --data-dir instead)") from None


def load_mnist(directory: str | os.PathLike[str], download: bool = False) -> MnistData:
    """Real MNIST from IDX files in ``directory`` (or its MNIST/raw), read by torchvision."""
    from torchvision.datasets import MNIST

    root = Path(directory).expanduser()
    if download:
        root.mkdir(parents=True, exist_ok=True)
        download_mnist(root)
    if not root.is_dir():
        raise WorkloadDataError(f"--data-dir {directory}: no such directory")
    found: dict[tuple[str, str], Path] = {}
    missing = []
    for key, name in IDX_FILES.items():
        path = _find_idx(root, name)
        if path is None:
            missing.append(name + "[.gz]")
        else:
            found[key] = path
    if missing:
        raise WorkloadDataError(
            f"--data-dir {directory}: missing {', '.join(missing)} (looked in the folder, "
            f"MNIST/raw and raw; use --download to fetch them)")

    # torchvision reads uncompressed files from <root>/MNIST/raw: stage checked copies there.
    staging = Path(tempfile.mkdtemp(prefix="gpudoctor-mnist-"))
    try:
        raw = staging / "MNIST" / "raw"
        raw.mkdir(parents=True)
        counts: dict[tuple[str, str], int] = {}
        for key, path in found.items():
            data = _read_bytes(path)
            counts[key] = check_idx(path, data, key[1])
            target = raw / IDX_FILES[key]
            if path.suffix == ".gz":
                target.write_bytes(data)
            else:
                try:
                    os.symlink(path.resolve(), target)
                except OSError:
                    shutil.copyfile(path, target)
        for split in ("train", "test"):
            if counts[(split, "images")] != counts[(split, "labels")]:
                raise WorkloadDataError(
                    f"{found[(split, 'images')]} holds {counts[(split, 'images')]} images but "
                    f"{found[(split, 'labels')]} holds {counts[(split, 'labels')]} labels")
        try:
            train = MNIST(str(staging), train=True, download=False)
            test = MNIST(str(staging), train=False, download=False)
        except Exception as exc:
            raise WorkloadDataError(f"--data-dir {directory}: torchvision could not read MNIST: "
                                    f"{type(exc).__name__}: {exc}") from None
        return MnistData(train.data.clone(), train.targets.clone(), test.data.clone(),
                         test.targets.clone(), "mnist", f"MNIST IDX files in {root}")
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def load_data(data_dir: str | None = None, download: bool = False, seed: int = 0,
              train_limit: int | None = None, test_limit: int | None = None) -> MnistData:
    """Real MNIST when ``data_dir`` (or ``download``) is given, else the synthetic set."""
    if data_dir is None and download:
        data_dir = str(Path.home() / ".cache" / "gpudoctor" / "mnist")
    if data_dir is not None:
        return load_mnist(data_dir, download=download).limited(train_limit, test_limit)
    return synthetic_mnist(train_limit or SYNTHETIC_TRAIN_SIZE, test_limit or SYNTHETIC_TEST_SIZE,
                           seed=seed)


# --------------------------------------------------------------------------- datasets
class MnistItems:
    """Per-item dataset as in the tutorials: each item normalised on its own ([1, 28, 28]).

    A torch ``Dataset`` by duck typing (``__getitem__``/``__len__``); picklable, so
    DataLoader workers can use it.
    """

    def __init__(self, images: torch.Tensor, labels: torch.Tensor) -> None:
        self.images = images
        self.labels = labels

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        import torch

        image = self.images[index].to(torch.float32).div_(255.0).sub_(MNIST_MEAN).div_(MNIST_STD)
        return image.unsqueeze(0), int(self.labels[index])


def normalised(images: torch.Tensor) -> torch.Tensor:
    """All images at once, flattened and normalised: float32 [N, 784]."""
    import torch

    return images.to(torch.float32).div(255.0).sub_(MNIST_MEAN).div_(MNIST_STD).reshape(
        images.shape[0], -1)
