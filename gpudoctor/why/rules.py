"""What each sampled stack was doing: the rules, readable and pure (no I/O).

A stack is put in the first category whose rule matches, in this order:

============  ==============================================================================
category      rule (frames are outermost first; "torch/x" means a file under torch's package)
============  ==============================================================================
data_wait     a training process inside ``DataLoader.__next__`` (torch/utils/data/dataloader.py):
              waiting for workers (a queue get) or, with no workers, loading in the main process
data_loading  a DataLoader worker (``_worker_loop``) fetching a batch: the dataset's
              ``__getitem__``, decode (PIL, cv2, image libraries), transforms, disk reads
startup       start-up, not the loop: an import (importlib's frames, or the user's own module-level
              ``import`` line), torch.compile compiling (torch/_dynamo/convert_frame.py,
              torch/_inductor/compile_fx.py), building a model, optimizer or dataset (an ``__init__``
              in torch/nn, torch/optim or torch/utils/data; a function of the script's top level or
              ``main`` named for it: ``make_corpus``, ``build_model``, ``load_dataset``), loading a
              checkpoint (``torch.load``)
collective    a torch.distributed collective (torch/distributed/distributed_c10d.py, c10d): waiting
              for the other ranks, not computing
host_sync     the innermost user line calls ``.item()``, ``.tolist()``, ``.cpu()``/``.numpy()``,
              ``synchronize()``, ``nonzero``-like ops or a blocking ``.to(device)`` (the line's text,
              named by the hooks' ``classify_sync_line``), or the stack is in ``torch.cuda``'s
              ``synchronize``, an event/stream wait, or formatting a tensor (torch/_tensor_str.py)
idle          the innermost frame waits: ``sleep``, a lock, a condition, a barrier, a join,
              ``select``/``poll``/``accept``/``recv``, a queue get; or a worker waiting for work
checkpoint_io torch/serialization.py (``torch.save``/``torch.load``), pickle, or file writes
evaluation    a user function whose name says evaluation (eval, valid, test_), or a module's forward
              run under ``torch.no_grad()``/``torch.inference_mode()`` (a ``with`` block or decorator
              around the user's line, read from its source)
backward      torch/autograd or ``Tensor.backward``      } the innermost of these three wins: the
optimizer     torch/optim                                } forward inside ``optimizer.step(closure)``
forward       torch/nn/modules (a module's ``forward``)  } (LBFGS, Lightning) is forward
other         anything else (the user's Python, the framework's)
============  ==============================================================================
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Callable, Sequence

from gpudoctor.hooks.torch_support import classify_sync_line
from gpudoctor.why.stacks import Frame, CallStack
from gpudoctor.why.wording import phrase

DATA_WAIT = "data_wait"
DATA_LOADING = "data_loading"
STARTUP = "startup"
COLLECTIVE = "collective"
HOST_SYNC = "host_sync"
IDLE = "idle"
CHECKPOINT_IO = "checkpoint_io"
EVALUATION = "evaluation"
BACKWARD = "backward"
OPTIMIZER = "optimizer"
FORWARD = "forward"
OTHER = "other"
CATEGORIES = (DATA_WAIT, DATA_LOADING, STARTUP, COLLECTIVE, HOST_SYNC, IDLE, CHECKPOINT_IO, EVALUATION, BACKWARD,
              OPTIMIZER, FORWARD, OTHER)

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
_COMPILING = ("torch/_dynamo/convert_frame.py", "torch/_inductor/compile_fx.py")
#: What an ``__init__`` under each package builds (the name of its words in why.wording's PHRASES).
_BUILDING = (("torch/nn/", "detail_the_model"), ("torch/optim/", "detail_the_optimizer"),
             ("torch/utils/data/", "detail_the_dataset"), ("torchvision/datasets/", "detail_the_dataset"),
             ("torchaudio/datasets/", "detail_the_dataset"), ("torchtext/datasets/", "detail_the_dataset"))
_NO_GRAD_MARKS = ("no_grad(", "inference_mode(")
NO_GRAD_LOOKBACK = 120      # source lines read upward from a frame's line for an enclosing no_grad block
_BUILDER_RE = re.compile(r"^(make|build|prepare|create|generate|load|setup|init)_?(\w*_)?"
                         r"(corpus|dataset|data|vocab\w*|tokenizer|model|network|net)s?$", re.IGNORECASE)
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


def user_frames(stack: CallStack, own: Sequence[str] = ()) -> list[Frame]:
    return [f for f in stack.frames if f.file and not is_library(f.file, own)]


def is_worker(stack: CallStack) -> bool:
    return any(f.function.endswith("_worker_loop") and _in(f, "torch/utils/data/") for f in stack.frames)


def is_launcher(stack: CallStack) -> bool:
    return any(_in(f, "torch/distributed/elastic/") or _in(f, "torch/distributed/run.py")
               for f in stack.frames)


_HELPERS = ("multiprocessing/resource_tracker.py", "multiprocessing/forkserver.py",
            "multiprocessing/semaphore_tracker.py")


def is_helper(stack: CallStack) -> bool:
    """multiprocessing's own helper processes (the resource tracker, the forkserver): never trainers."""
    return any(_in(f, part) for f in stack.frames[:3] for part in _HELPERS)


def in_distributed(stack: CallStack) -> bool:
    """A torch.distributed frame (not torchrun's launcher) or DistributedDataParallel's: the
    process joined a process group."""
    return any((_in(f, "torch/distributed/") and not _in(f, "torch/distributed/elastic/")
                and not _in(f, "torch/distributed/run.py")) or _in(f, "torch/nn/parallel/distributed.py")
               for f in stack.frames)


def _in_dataloader_next(stack: CallStack) -> bool:
    return any(_in(f, "torch/utils/data/dataloader.py") and _leaf_name(f) in ("__next__", "_next_data")
               for f in stack.frames)


def _is_waiting(stack: CallStack, text: str, own: Sequence[str]) -> bool:
    leaf = stack.frames[-1] if stack.frames else None
    if leaf is None:
        return False
    if is_library(leaf.file, own) and _leaf_name(leaf) in _WAIT_LEAVES:
        return True
    return not is_library(leaf.file, own) and any(mark in text.replace(" ", "") for mark in _WAIT_TEXT)


def _loading_detail(stack: CallStack) -> str:
    files = " ".join(_norm(f.file) + " " + f.function for f in stack.frames)
    if any(mark in files for mark in _TRANSFORM_MARKS):  # transforms call PIL's functions: not a decode
        return "transforms"
    if any(mark in files for mark in _DECODE_MARKS):
        return "decode"
    leaf = stack.frames[-1].function.lower() if stack.frames else ""
    if any(mark in leaf for mark in _READ_MARKS):
        return phrase("detail_disk_read")
    return "dataset"


def _sync(stack: CallStack, users: list[Frame], source: SourceLine, own: Sequence[str]) -> Verdict | None:
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


def classify(stack: CallStack, source: SourceLine, *, worker: bool | None = None,
             own: Sequence[str] = ()) -> Verdict:
    """The category of one stack (the table in this module's docstring, first match wins)."""
    users = user_frames(stack, own)
    user = users[-1] if users else None
    worker = is_worker(stack) if worker is None else worker
    if worker:
        if any(f.function.endswith("__getitem__") or f.function.endswith("__getitems__")
               or _in(f, "torch/utils/data/_utils/fetch.py") for f in stack.frames):
            fetcher = next((i for i, f in enumerate(stack.frames) if _in(f, "torch/utils/data/")), 0)
            inner = [f for f in stack.frames[fetcher:] if f in users]
            return Verdict(DATA_LOADING, _loading_detail(stack), inner[-1] if inner else _getitem(stack))
        return Verdict(IDLE, phrase("detail_worker_idle"), user)
    if _in_dataloader_next(stack):
        # with no workers everything in the iterator is loading: the fetch, and the sampler too
        loading = any(_in(f, "torch/utils/data/_utils/fetch.py") or "_SingleProcessDataLoaderIter" in f.function
                      for f in stack.frames)
        if loading:  # no workers: the dataset's line (inside the loader), not the loop's `for` line
            first = next(i for i, f in enumerate(stack.frames) if _in(f, "torch/utils/data/dataloader.py"))
            inner = [f for f in stack.frames[first:] if f in users]
            # none inside (the sampler, collate): no line, not the caller's (a `for` line, or
            # `trainer.fit(...)` when a framework runs the loop)
            return Verdict(DATA_WAIT, phrase("detail_loading_main"), inner[-1] if inner else _getitem(stack))
        return Verdict(DATA_WAIT, phrase("waiting_for_workers"), None)  # the workers' lines say where, not the caller's
    leaf_text = source(user.file, user.line) if user is not None and user.line is not None else ""
    starting = startup_detail(stack, source, own)
    if starting:
        return Verdict(STARTUP, starting, user)
    if any(_in(f, "torch/distributed/distributed_c10d.py") or _in(f, "torch/distributed/c10d")
           for f in stack.frames):
        name = next((_leaf_name(f) for f in reversed(stack.frames)
                     if _in(f, "torch/distributed/distributed_c10d.py")), "collective")
        return Verdict(COLLECTIVE, name, user)
    sync = _sync(stack, users, source, own)
    if sync is not None:
        return sync
    if _is_waiting(stack, leaf_text, own):
        return Verdict(IDLE, _leaf_name(stack.frames[-1]), user)
    if any(_in(f, "torch/serialization.py") or _in(f, "pickle.py") for f in stack.frames):
        return Verdict(CHECKPOINT_IO, "torch.save/load", user)
    if any(_EVAL_RE.search(f.function) for f in users):
        return Verdict(EVALUATION, "", user)
    torch_part = _innermost_torch_part(stack)
    if torch_part == FORWARD and any(_under_no_grad(f, source) for f in users):
        return Verdict(EVALUATION, "no_grad", user)
    if torch_part is not None:
        return Verdict(torch_part, "", user)
    return Verdict(OTHER, "", user)


def _getitem(stack: CallStack) -> Frame | None:
    """The dataset's ``__getitem__`` frame (a library's dataset, e.g. torchvision's, has no user
    line inside the loader): where the per-sample work is."""
    return next((f for f in reversed(stack.frames) if f.function.endswith(("__getitem__", "__getitems__"))
                 and not _in(f, "torch/utils/data/")), None)


def _outside_torch(frame: Frame) -> bool:
    """Code that is neither torch's nor the standard library's: the user's, or a framework's
    (Lightning's closure, its logging)."""
    path = _norm(frame.file)
    if not path or path.startswith("<frozen") or "/torch/" in path:
        return False
    return "/site-packages/" in path or "/dist-packages/" in path or not is_library(path)


def _innermost_torch_part(stack: CallStack) -> str | None:
    """backward, optimizer or forward: whichever torch frame is innermost (the forward pass inside
    ``optimizer.step(closure)`` is forward; the optimizer's own update is optimizer). A torch.optim
    frame that called into the user's or a framework's code, other than an optimizer's own
    ``step`` written outside torch, called the closure: what runs inside it (a ``training_step``'s
    metrics, Lightning's logging and closure plumbing) is the closure's, not the update's."""
    inner: Frame | None = None
    closure = False
    for f in reversed(stack.frames):
        if (_in(f, "torch/autograd/grad_mode.py") or _in(f, "torch/utils/_contextlib.py")
                or _in(f, "torch/autograd/profiler.py")):
            continue  # a no_grad/enable_grad decorator's wrapper or a profiler range, not autograd's work
        if _in(f, "torch/autograd/") or (_in(f, "torch/_tensor.py") and _leaf_name(f) == "backward"):
            return BACKWARD
        if _in(f, "torch/optim/"):
            closure = closure or (inner is not None and _outside_torch(inner) and _leaf_name(inner) != "step")
            if closure:
                continue  # the closure's work, called from the optimizer's step and its wrappers
            return OPTIMIZER
        inner = f
        if _in(f, "torch/nn/modules/"):
            return FORWARD
    return None


_GRAD_OFF = ("no_grad", "inference_mode")
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)


def _turns_grad_off(expr: ast.expr) -> bool:
    """``torch.no_grad()``, ``no_grad``, ``torch.inference_mode()``, ``torch.set_grad_enabled(False)``."""
    call = expr if isinstance(expr, ast.Call) else None
    func = call.func if call is not None else expr
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    if name == "set_grad_enabled" and call is not None and call.args:
        first = call.args[0]
        return isinstance(first, ast.Constant) and first.value is False
    return name in _GRAD_OFF


def _spans(node: ast.AST, line: int) -> bool:
    first = getattr(node, "lineno", None)
    return first is not None and first <= line <= (getattr(node, "end_lineno", None) or first)


def no_grad_in_scope(tree: ast.Module, line: int) -> bool:
    """Whether ``line`` runs with autograd off in its own scope: inside a ``with no_grad()`` block
    of the function (or module) that holds the line, or in a function decorated with one. The
    innermost function spanning the line is the frame's own code object: blocks of other
    functions, before or around it, do not count."""
    node: ast.AST = tree
    off = False
    while True:
        child = next((c for c in ast.iter_child_nodes(node) if _spans(c, line)), None)
        if child is None:
            return off
        if isinstance(child, _SCOPES):
            decorators = getattr(child, "decorator_list", [])
            off = not isinstance(child, (ast.ClassDef, ast.Lambda)) and any(_turns_grad_off(d) for d in decorators)
        elif isinstance(child, (ast.With, ast.AsyncWith)) and child.body and line >= child.body[0].lineno:
            off = off or any(_turns_grad_off(item.context_expr) for item in child.items)
        node = child


def _under_no_grad(frame: Frame, source: SourceLine) -> bool:
    """Whether the user's line runs inside ``with torch.no_grad():``/``inference_mode()`` or in a
    function decorated with one. From the file's syntax tree when the source reader parses it
    (``source.tree(file)``: the frame's own function only); else read upward from the line,
    block by block, up to its ``def``."""
    if frame.line is None or frame.line <= 1:
        return False
    parse = getattr(source, "tree", None)
    tree = parse(frame.file) if callable(parse) else None
    if isinstance(tree, ast.Module):
        return no_grad_in_scope(tree, frame.line)
    raw = source(frame.file, frame.line)
    if not raw:
        return False
    # the source reader strips indentation, so the enclosing block is the nearest `with` above the
    # line within the same function (read up to its `def`)
    for number in range(frame.line - 1, max(0, frame.line - NO_GRAD_LOOKBACK), -1):
        text = source(frame.file, number)
        if not text:
            continue
        if text.startswith("with ") and any(mark in text.replace(" ", "") for mark in _NO_GRAD_MARKS):
            return True
        if text.startswith(("def ", "async def ")):
            above = source(frame.file, number - 1) if number > 1 else ""
            return above.startswith("@") and any(mark in above.replace(" ", "") for mark in _NO_GRAD_MARKS)
        if text.startswith("class "):
            return False
    return False


def startup_detail(stack: CallStack, source: SourceLine, own: Sequence[str] = ()) -> str:
    """What start-up work the stack does ("import", "torch.compile", "building the model", ...),
    or "" when it is not start-up."""
    for f in stack.frames:
        if f.file.startswith("<frozen importlib._bootstrap") or _in(f, "importlib/__init__.py"):
            return "import"
        if any(_in(f, part) for part in _COMPILING):
            return "torch.compile"
        if _in(f, "torch/serialization.py") and _leaf_name(f) == "load":
            return phrase("detail_loading_checkpoint")
    users = user_frames(stack, own)
    for f in reversed(stack.frames):
        if _leaf_name(f) != "__init__" or "LoaderIter." in f.function:
            continue  # a DataLoader iterator's __init__ starts the workers each epoch: the loop's cost
        for part, what in _BUILDING:
            if _in(f, part):
                return phrase("detail_building", what=phrase(what))
        if f in users and re.search(r"(Dataset|Data|Set)\.__init__$", f.function):
            return phrase("detail_building", what=phrase("detail_the_dataset"))
    for outer, f in zip(stack.frames, stack.frames[1:]):  # an object built at the top of the script
        if f in users and _leaf_name(f) == "__init__" and outer.function in ("<module>", "main"):
            return phrase("detail_building", what=f.function.rpartition('.')[0] or phrase("detail_an_object"))
        # a function of the script's top level that builds the data or the model once
        # (make_corpus(), build_model(), load_dataset()): named so, and not per batch or step
        if f in users and outer.function in ("<module>", "main") and _BUILDER_RE.search(_leaf_name(f)):
            return phrase("detail_building", what=f"{_leaf_name(f)}()")
    if users and stack.frames[-1] == users[-1] and users[-1].function == "<module>" and users[-1].line:
        if source(users[-1].file, users[-1].line).startswith(("import ", "from ")):
            return "import"
    return ""


__all__ = ["CATEGORIES", "DATA_WAIT", "DATA_LOADING", "STARTUP", "COLLECTIVE", "startup_detail", "HOST_SYNC", "IDLE", "CHECKPOINT_IO", "EVALUATION",
           "BACKWARD", "OPTIMIZER", "FORWARD", "OTHER", "SYNC_PATTERNS", "Verdict", "classify", "is_library",
           "is_worker", "is_launcher", "user_frames"]
