"""What each sampled stack was doing: the rules, readable and pure (no I/O).

A stack is put in the first category whose rule matches, in this order:

============  ==============================================================================
category      rule (frames are outermost first; "torch/x" means a file under torch's package)
============  ==============================================================================
data_wait     a training process inside ``DataLoader.__next__`` (torch/utils/data/dataloader.py):
              waiting for workers (a queue get) or, with no workers, loading in the main process
data_loading  a DataLoader worker (``_worker_loop``) fetching a batch: the dataset's
              ``__getitem__``, decode (PIL, cv2, image libraries), transforms, disk reads
host_sync     the innermost user line calls ``.item()``, ``.tolist()``, ``.cpu()``/``.numpy()``,
              ``synchronize()``, ``nonzero``-like ops or a blocking ``.to(device)`` (the line's text,
              named by the hooks' ``classify_sync_line``), or the stack is in ``torch.cuda``'s
              ``synchronize``, an event/stream wait, or formatting a tensor (torch/_tensor_str.py)
idle          the innermost frame waits: ``sleep``, a lock, a condition, a barrier, a join,
              ``select``/``poll``/``accept``/``recv``, a queue get; or a worker waiting for work
checkpoint_io torch/serialization.py (``torch.save``/``torch.load``), pickle, or file writes
evaluation    a user function whose name says evaluation (eval, valid, test_)
backward      torch/autograd or ``Tensor.backward``
optimizer     torch/optim
forward       torch/nn/modules (a module's ``forward``)
other         anything else (the user's Python, the framework's)
============  ==============================================================================
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Sequence

from gpudoctor.hooks.torch_support import classify_sync_line
from gpudoctor.why.stacks import Frame, Stack

DATA_WAIT = "data_wait"
DATA_LOADING = "data_loading"
HOST_SYNC = "host_sync"
IDLE = "idle"
CHECKPOINT_IO = "checkpoint_io"
EVALUATION = "evaluation"
BACKWARD = "backward"
OPTIMIZER = "optimizer"
FORWARD = "forward"
OTHER = "other"
CATEGORIES = (DATA_WAIT, DATA_LOADING, HOST_SYNC, IDLE, CHECKPOINT_IO, EVALUATION, BACKWARD, OPTIMIZER,
              FORWARD, OTHER)

# Patterns of classify_sync_line that make the host wait for the GPU (the others name any line).
SYNC_PATTERNS = ("item", "tolist", "cpu", "synchronize", "nonzero", "blocking_copy")

SourceLine = Callable[[str, int], str]  # (file, line) -> the line's text, "" when unknown

_WAIT_LEAVES = {"wait", "wait_for", "_wait_for_tstate_lock", "join", "acquire", "select", "poll", "_poll",
                "accept", "recv", "recv_into", "_recv", "_recv_bytes", "recv_bytes", "sleep", "barrier",
                "get", "_wait", "epoll", "readinto", "monitor"}
_WAIT_TEXT = ("sleep(", ".wait(", "barrier(", ".join(", ".acquire(", "input(")
_DECODE_MARKS = ("PIL/", "cv2", "imageio", "decode", "torchvision/io", "simplejpeg", "turbojpeg", "av/")
_TRANSFORM_MARKS = ("torchvision/transforms", "albumentations", "transforms")
_READ_MARKS = ("read", "open", "load", "np.load", "numpy/lib/npyio", "h5py", "zipfile", "tarfile")
_EVAL_RE = re.compile(r"(^|[._])(eval\w*|valid\w*|test_\w*|evaluate\w*)$", re.IGNORECASE)


def _norm(path: str) -> str:
    return path.replace("\\", "/")


def is_library(path: str, own_prefixes: Sequence[str] = ()) -> bool:
    """Whether ``path`` (a file in the sampled process) is library code rather than the user's:
    an installed package (site-packages, dist-packages), the standard library, frozen modules,
    or one of ``own_prefixes`` (gpudoctor's own files)."""
    p = _norm(path)
    if not p or p.startswith("<frozen") or p.startswith(tuple(_norm(x) for x in own_prefixes)):
        return True
    if "/site-packages/" in p or "/dist-packages/" in p:
        return True
    return bool(re.search(r"/lib/python\d+(\.\d+)?t?/", p)) or "/lib/pypy" in p


def _in(frame: Frame, part: str) -> bool:
    return f"/{part}" in _norm(frame.file)


def _leaf_name(frame: Frame) -> str:
    return frame.function.rpartition(".")[2]


@dataclass(frozen=True)
class Verdict:
    """What one stack was doing: its category, a detail word, and the user's line behind it."""

    category: str
    detail: str = ""
    user: Frame | None = None


def user_frames(stack: Stack, own: Sequence[str] = ()) -> list[Frame]:
    return [f for f in stack.frames if f.file and not is_library(f.file, own)]


def is_worker(stack: Stack) -> bool:
    return any(f.function.endswith("_worker_loop") and _in(f, "torch/utils/data/") for f in stack.frames)


def is_launcher(stack: Stack) -> bool:
    return any(_in(f, "torch/distributed/elastic/") or _in(f, "torch/distributed/run.py")
               for f in stack.frames)


def _in_dataloader_next(stack: Stack) -> bool:
    return any(_in(f, "torch/utils/data/dataloader.py") and _leaf_name(f) in ("__next__", "_next_data")
               for f in stack.frames)


def _is_waiting(stack: Stack, text: str, own: Sequence[str]) -> bool:
    leaf = stack.frames[-1] if stack.frames else None
    if leaf is None:
        return False
    if is_library(leaf.file, own) and _leaf_name(leaf) in _WAIT_LEAVES:
        return True
    return not is_library(leaf.file, own) and any(mark in text.replace(" ", "") for mark in _WAIT_TEXT)


def _loading_detail(stack: Stack) -> str:
    files = " ".join(_norm(f.file) + " " + f.function for f in stack.frames)
    if any(mark in files for mark in _DECODE_MARKS):
        return "decode"
    if any(mark in files for mark in _TRANSFORM_MARKS):
        return "transforms"
    leaf = stack.frames[-1].function.lower() if stack.frames else ""
    if any(mark in leaf for mark in _READ_MARKS):
        return "disk read"
    return "dataset"


def _sync(stack: Stack, users: list[Frame], source: SourceLine, own: Sequence[str]) -> Verdict | None:
    for f in stack.frames:
        if _in(f, "torch/cuda/") and _leaf_name(f) in ("synchronize", "wait_event", "wait_stream", "query"):
            return Verdict(HOST_SYNC, "synchronize", users[-1] if users else None)
        if _in(f, "torch/_tensor_str.py") or (_in(f, "torch/_tensor.py") and _leaf_name(f) in ("__repr__",
                                                                                          "__format__")):
            return Verdict(HOST_SYNC, "print", users[-1] if users else None)
    if users and stack.frames and stack.frames[-1] == users[-1] and users[-1].line is not None:
        pattern = classify_sync_line(source(users[-1].file, users[-1].line))
        if pattern in SYNC_PATTERNS:
            return Verdict(HOST_SYNC, pattern, users[-1])
    return None


def classify(stack: Stack, source: SourceLine, *, worker: bool | None = None,
             own: Sequence[str] = ()) -> Verdict:
    """The category of one stack (the table in this module's docstring, first match wins)."""
    users = user_frames(stack, own)
    user = users[-1] if users else None
    worker = is_worker(stack) if worker is None else worker
    if worker:
        if any(f.function.endswith("__getitem__") or f.function.endswith("__getitems__")
               or _in(f, "torch/utils/data/_utils/fetch.py") for f in stack.frames):
            return Verdict(DATA_LOADING, _loading_detail(stack), user)
        return Verdict(IDLE, "worker waiting for work", user)
    if _in_dataloader_next(stack):
        loading = any(_in(f, "torch/utils/data/_utils/fetch.py") for f in stack.frames)
        if loading:  # no workers: the dataset's line (inside the loader), not the loop's `for` line
            first = next(i for i, f in enumerate(stack.frames) if _in(f, "torch/utils/data/dataloader.py"))
            inner = [f for f in stack.frames[first:] if f in users]
            return Verdict(DATA_WAIT, "loading in the main process", inner[-1] if inner else user)
        return Verdict(DATA_WAIT, "waiting for workers", user)
    leaf_text = source(user.file, user.line) if user is not None and user.line is not None else ""
    sync = _sync(stack, users, source, own)
    if sync is not None:
        return sync
    if _is_waiting(stack, leaf_text, own):
        return Verdict(IDLE, _leaf_name(stack.frames[-1]), user)
    if any(_in(f, "torch/serialization.py") or _in(f, "pickle.py") for f in stack.frames):
        return Verdict(CHECKPOINT_IO, "torch.save/load", user)
    if any(_EVAL_RE.search(f.function) for f in users):
        return Verdict(EVALUATION, "", user)
    if any(_in(f, "torch/autograd/") or (_in(f, "torch/_tensor.py") and _leaf_name(f) == "backward")
           for f in stack.frames):
        return Verdict(BACKWARD, "", user)
    if any(_in(f, "torch/optim/") for f in stack.frames):
        return Verdict(OPTIMIZER, "", user)
    if any(_in(f, "torch/nn/modules/") for f in stack.frames):
        return Verdict(FORWARD, "", user)
    return Verdict(OTHER, "", user)


__all__ = ["CATEGORIES", "DATA_WAIT", "DATA_LOADING", "HOST_SYNC", "IDLE", "CHECKPOINT_IO", "EVALUATION",
           "BACKWARD", "OPTIMIZER", "FORWARD", "OTHER", "SYNC_PATTERNS", "Verdict", "classify", "is_library",
           "is_worker", "is_launcher", "user_frames"]
