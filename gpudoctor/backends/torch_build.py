"""Which torch an interpreter would import, and what it was built for, read as text.

``report --quick``, the exporter and the TUI header must not import torch (seconds of
start-up, and a CUDA context in the monitoring process), yet the most common broken
stack, a driver too old for torch's CUDA build, is visible without it: torch writes its
build into ``torch/version.py`` (``__version__ = '2.14.1+cu130'``, ``cuda = '13.0'``).
This module finds that file with the import system's finders (as ``importlib.util.find_spec``
does, without running the package) and parses it as text.

For another environment (``report --python PATH``) the interpreter is asked where its
torch lies, with a few lines of Python that import nothing but ``importlib``; the file
is then read here.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from gpudoctor.system import fileio

# Interpreters older than this cannot load gpudoctor's probes (pyproject's requires-python).
MIN_PYTHON = (3, 10)
# Seconds another interpreter gets to start and answer (it imports nothing heavy).
INSPECT_TIMEOUT_S = 30.0
INSPECT_MAX_OUTPUT = 1 << 20  # what the inspecting child may print (its answer is one short line)
# version.py is a few hundred bytes; anything far larger is not torch's.
MAX_VERSION_FILE_BYTES = 64 * 1024

# What a user can run today to get torch where gpudoctor runs (gpudoctor's own `[torch]` extra
# installs the same two packages, from a checkout or wheel: `pip install "./gpudoctor[torch]"`).
TORCH_EXTRA_HINT = "pip install torch torchvision"
CHECK_ANOTHER_ENV_HINT = ("Check the environment you train with: `gpudoctor report --python "
                          "/path/to/train-env/bin/python`, or install torch where gpudoctor runs: "
                          f"`{TORCH_EXTRA_HINT}`.")


class InterpreterError(ValueError):
    """``--python PATH`` does not name a usable Python interpreter (a usage error)."""


class TorchBuild:
    """What one interpreter's torch is, read without importing it.

    ``location``: the torch package folder (None: torch is not installed there).
    ``version``/``cuda``/``hip``: from torch/version.py (None when absent or a CPU build).
    ``error``: why version.py could not be read although torch is there.
    ``source``: "text" (version.py) or "recording" (a replayed session).
    (A plain class: a dataclass costs milliseconds of `report --quick`'s start-up.)
    """

    __slots__ = ("python", "python_version", "location", "version", "cuda", "hip", "error", "source")

    def __init__(self, python: str, python_version: str, location: str | None = None,
                 version: str | None = None, cuda: str | None = None, hip: str | None = None,
                 error: str | None = None, source: str = "text") -> None:
        self.python = python
        self.python_version = python_version
        self.location = location
        self.version = version
        self.cuda = cuda
        self.hip = hip
        self.error = error
        self.source = source

    def __repr__(self) -> str:
        return "TorchBuild(" + ", ".join(f"{k}={getattr(self, k)!r}" for k in self.__slots__) + ")"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TorchBuild) and all(
            getattr(self, k) == getattr(other, k) for k in self.__slots__)

    @property
    def installed(self) -> bool:
        return self.location is not None

    def describe(self) -> str:
        """'torch 2.14.1+cu130 (CUDA 13.0)' or 'no torch'."""
        if not self.installed:
            return "no torch"
        if self.version is None:
            return "torch (version unreadable)"
        build = f"CUDA {self.cuda}" if self.cuda else (f"ROCm {self.hip}" if self.hip else "CPU-only build")
        return f"torch {self.version} ({build})"


_FIELDS = {"__version__": "version", "cuda": "cuda", "hip": "hip"}


def parse_version_file(text: str) -> dict[str, str | None]:
    """``{"version": ..., "cuda": ..., "hip": ...}`` from the text of torch/version.py.

    Reads lines of the form ``name = 'text'``, ``name: Optional[str] = 'text'`` or
    ``name = None`` (torch's generated layout); the first of each name counts.
    """
    found: dict[str, str | None] = {"version": None, "cuda": None, "hip": None}
    seen: set[str] = set()
    for line in text.splitlines():
        head, sep, value = line.partition("=")
        if not sep:
            continue
        name = head.split(":", 1)[0].strip()
        key = _FIELDS.get(name)
        if key is None or key in seen:
            continue
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            inner = value[1:-1]
            if inner and not any(q in inner for q in "'\"\n"):
                found[key] = inner[:64]  # data from a file: bounded
                seen.add(key)
        elif value == "None":
            seen.add(key)
    return found


def read_build(location: str | None, python: str, python_version: str) -> TorchBuild:
    """TorchBuild for the torch package at ``location`` (None: not installed)."""
    if location is None:
        return TorchBuild(python=python, python_version=python_version)
    path = os.path.join(location, "version.py")
    try:  # through the regular-file opener: a FIFO or a device there is refused, never waited on
        fd, _info = fileio.open_regular(path)
        with os.fdopen(fd, "rb") as fh:
            raw = fh.read(MAX_VERSION_FILE_BYTES)
    except OSError as exc:
        return TorchBuild(python=python, python_version=python_version, location=location,
                          error=f"cannot read {path}: {exc.strerror or type(exc).__name__}")
    fields = parse_version_file(raw.decode("utf-8", "replace"))
    if fields["version"] is None:
        return TorchBuild(python=python, python_version=python_version, location=location,
                          error=f"{path} names no __version__")
    return TorchBuild(python=python, python_version=python_version, location=location, version=fields["version"],
                      cuda=fields["cuda"], hip=fields["hip"])


def _this_python_version() -> str:
    return sys.version.split()[0]


def _find_top_level_spec(name: str) -> Any:
    """What ``importlib.util.find_spec(name)`` answers for a top-level name not yet imported:
    the first meta-path finder's spec (importlib.util costs `report --quick` its import)."""
    for finder in sys.meta_path:
        find_spec = getattr(finder, "find_spec", None)
        if find_spec is None:
            continue
        spec = find_spec(name, None, None)
        if spec is not None:
            return spec
    return None


def find_local_torch() -> str | None:
    """The folder of the torch this process would import (no import), or None."""
    loaded = sys.modules.get("torch")
    loaded_file = getattr(loaded, "__file__", None) if loaded is not None else None
    if loaded_file:
        return os.path.dirname(loaded_file)
    try:
        spec = _find_top_level_spec("torch")
    except (ImportError, ValueError):  # blocked (sys.modules['torch'] = None) or a broken finder
        return None
    if spec is None:
        return None
    if spec.submodule_search_locations:
        return list(spec.submodule_search_locations)[0]
    if spec.origin and spec.origin not in ("built-in", "frozen"):
        return os.path.dirname(spec.origin)
    return None


def local_build() -> TorchBuild:
    """The torch of this interpreter, read as text."""
    return read_build(find_local_torch(), sys.executable, _this_python_version())


# Run by the other interpreter: where is its torch? Imports only importlib.util, json, sys.
_INSPECT_SCRIPT = r"""
import importlib.util, json, os, sys
location = None
try:
    spec = importlib.util.find_spec("torch")
except Exception:
    spec = None
if spec is not None:
    if spec.submodule_search_locations:
        location = list(spec.submodule_search_locations)[0]
    elif spec.origin:
        location = os.path.dirname(spec.origin)
sys.stdout.write("GPUDOCTOR-INSPECT " + json.dumps({
    "executable": sys.executable, "version": sys.version.split()[0],
    "version_info": list(sys.version_info[:2]), "torch": location}) + "\n")
"""


def inspect_interpreter(python: str) -> TorchBuild:
    """Ask the interpreter ``python`` where its torch lies and read its build.

    Raises :class:`InterpreterError` with a one-line reason when ``python`` is not a Python
    interpreter gpudoctor can use.
    """
    if not python:
        raise InterpreterError("--python needs the path of a Python interpreter")
    path = os.path.abspath(os.path.expanduser(python))
    if os.path.isdir(path):
        raise InterpreterError(f"--python {python}: is a directory; give the interpreter, e.g. "
                               f"{os.path.join(python, 'bin', 'python')}")
    if not os.path.exists(path):
        raise InterpreterError(f"--python {python}: no such file")
    if not os.access(path, os.X_OK):
        raise InterpreterError(f"--python {python}: not executable")
    from gpudoctor.system import _proc

    try:  # its own group, ended with its tree; output kept up to INSPECT_MAX_OUTPUT (a site hook may print)
        returncode, stdout, _ = _proc.run_bounded([path, "-c", _INSPECT_SCRIPT], timeout_s=INSPECT_TIMEOUT_S,
                                                  max_output=INSPECT_MAX_OUTPUT)
    except _proc.ChildTimeout:
        raise InterpreterError(f"--python {python}: did not answer within {INSPECT_TIMEOUT_S:.0f} s") from None
    except _proc.ChildOutputTooLarge:
        raise InterpreterError(f"--python {python}: printed more than {INSPECT_MAX_OUTPUT >> 10} KiB where one "
                               "line was asked for; not a Python interpreter gpudoctor can use") from None
    except OSError as exc:
        raise InterpreterError(f"--python {python}: cannot run it ({exc.strerror or type(exc).__name__})") from None
    answer = None
    for line in stdout.decode("utf-8", "replace").splitlines():
        if line.startswith("GPUDOCTOR-INSPECT "):
            try:
                answer = json.loads(line[len("GPUDOCTOR-INSPECT "):])
            except ValueError:
                answer = None
    if returncode != 0 or not isinstance(answer, dict):
        raise InterpreterError(f"--python {python}: not a Python interpreter gpudoctor can use "
                               f"(exit {returncode})")
    version_info = tuple(answer.get("version_info") or ())
    if version_info < MIN_PYTHON:
        raise InterpreterError(f"--python {python}: Python {answer.get('version')} is too old; gpudoctor's "
                               f"probes need Python {'.'.join(map(str, MIN_PYTHON))} or newer")
    location = answer.get("torch") if isinstance(answer.get("torch"), str) else None
    return read_build(location, str(answer.get("executable") or path), str(answer.get("version")))


def build_from_facts(facts: object, python: str = "(recorded)") -> TorchBuild:
    """TorchBuild from recorded torch facts (a replay); not installed when torch was absent."""
    if not isinstance(facts, dict) or not facts.get("importable"):
        return TorchBuild(python=python, python_version=str((facts or {}).get("python") or "?")
                          if isinstance(facts, dict) else "?", source="recording")
    return TorchBuild(python=python, python_version=str(facts.get("python") or "?"),
                      location="(recorded)", version=facts.get("version"), cuda=facts.get("cuda_build"),
                      hip=facts.get("hip_build"), source="recording")


__all__ = ["TorchBuild", "InterpreterError", "parse_version_file", "read_build", "local_build",
           "find_local_torch", "inspect_interpreter", "build_from_facts", "TORCH_EXTRA_HINT",
           "CHECK_ANOTHER_ENV_HINT"]
