"""mypy over gpudoctor/ and probes/ as they are installed, with the project's ``[tool.mypy]``::

    python -m gpudoctor.tools.typecheck                     # the whole tree (tests/project/test_lint.py runs it)
    python -m gpudoctor.tools.typecheck probes/health.py    # one file (its imports followed, not reported)

setup.py installs the folder probes/ as the package gpudoctor.probes (a ``package_dir`` entry), a
mapping mypy cannot follow: run on the source tree, mypy knows the probes as a top-level ``probes``
and cannot find ``gpudoctor.probes``, so the calls the runner and the commands make into the probes
would go unchecked. This command builds the installed tree in a temporary folder (a ``gpudoctor/``
whose entries link to the source's, and ``gpudoctor/probes`` linking to probes/), runs mypy there
(every module once, under its installed name) and prints mypy's output with each path as the
source's (``gpudoctor/probes/health.py`` reads ``probes/health.py``). mypy's options (``--name``
or ``--name=value``) are passed to it. The exit status is mypy's (0: no finding, 1: findings, 2:
mypy's usage error); 2 (exitcodes.USAGE) also when mypy is not installed (the ``dev`` extra brings
it) or a path is outside gpudoctor/ and probes/; 1 (exitcodes.INTERNAL), with one line, when mypy
cannot start, runs past its limit or prints without end (it is ended with its tree). Run from a
source checkout.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Sequence

ROOT = Path(__file__).resolve().parents[2]
#: Each installed package folder (relative to the tree) and the source folder it is, as setup.py's
#: ``package_dir`` maps them; the longest first (a path is mapped by the first that holds it).
PACKAGE_DIRS = (("gpudoctor/probes", "probes"), ("gpudoctor", "gpudoctor"))
SKIPPED = {"__pycache__"}
#: What mypy may print before its run is ended as runaway (its whole-tree report is a few KiB).
MAX_OUTPUT = 16 * 1024 * 1024


def build_tree(dest: Path, root: Path = ROOT) -> Path:
    """Make ``dest/gpudoctor``: a symlink per entry of ``root/gpudoctor`` (caches aside) and
    ``gpudoctor/probes`` to ``root/probes``; return it. The sources are read, never copied."""
    package = dest / "gpudoctor"
    package.mkdir()
    for entry in sorted((root / "gpudoctor").iterdir()):
        if entry.name not in SKIPPED:
            (package / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())
    probes = package / "probes"
    if probes.exists():
        raise FileExistsError(f"{root / 'gpudoctor' / 'probes'} exists: probes/ is installed under that name")
    probes.symlink_to(root / "probes", target_is_directory=True)
    return package


def to_installed(path: str, root: Path = ROOT) -> str | None:
    """A source path (relative to the current folder, or absolute: ``probes/health.py``) as its
    path in the tree (``gpudoctor/probes/health.py``); None for a path outside gpudoctor/ and probes/."""
    try:
        posix = Path(path).resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return None
    for installed, source in PACKAGE_DIRS:
        if posix == source or posix.startswith(source + "/"):
            return installed + posix[len(source):]
    return None


def to_source(text: str, tree: Path, root: Path = ROOT) -> str:
    """mypy's output with every path in the tree (relative to it, or absolute) as the source's:
    ``gpudoctor/probes/x.py`` becomes ``probes/x.py``, the tree's folder the checkout's."""
    for installed, source in PACKAGE_DIRS:
        text = text.replace(f"{tree / installed}/", f"{root / source}/")
    for installed, source in PACKAGE_DIRS:
        if installed != source:
            text = re.sub(rf"(?m)^{re.escape(installed)}/", f"{source}/", text)
    return text


def run_mypy(tree: Path, targets: Sequence[str], options: Sequence[str] = (), root: Path = ROOT,
             timeout_s: float = 240) -> subprocess.CompletedProcess[str]:
    """mypy on ``targets`` (paths relative to ``tree``) with ``root``'s pyproject.toml, run in
    ``tree`` with no incremental cache (the run never depends on, or leaves behind, an earlier one),
    through the bounded starter (its own group, ended with its tree; ChildTimeout past ``timeout_s``);
    stdout and stderr as the source's paths."""
    from gpudoctor.system import _proc

    argv = [sys.executable, "-m", "mypy", "--config-file", str(root / "pyproject.toml"), "--no-incremental",
            "--cache-dir", "/dev/null", *options, "--", *targets]
    code, out, err = _proc.run_bounded(argv, timeout_s=timeout_s, max_output=MAX_OUTPUT, cwd=tree)
    return subprocess.CompletedProcess(argv, code, to_source(out.decode(errors="replace"), tree, root),
                                       to_source(err.decode(errors="replace"), tree, root))


def main(argv: list[str] | None = None, root: Path = ROOT) -> int:
    from gpudoctor.core import exitcodes

    args = sys.argv[1:] if argv is None else argv
    options = [arg for arg in args if arg.startswith("-")]
    paths = [arg for arg in args if not arg.startswith("-")]
    targets = [to_installed(path, root) for path in paths] or ["gpudoctor"]
    if importlib.util.find_spec("mypy") is None:
        print("gpudoctor.tools.typecheck: mypy is not installed (pip install -e '.[dev]' brings it)", file=sys.stderr)
        return exitcodes.USAGE
    if None in targets or not (root / "probes").is_dir():
        print(f"gpudoctor.tools.typecheck: give paths under gpudoctor/ or probes/ of a source checkout ({root})",
              file=sys.stderr)
        return exitcodes.USAGE
    from gpudoctor.system._proc import ChildOutputTooLarge, ChildTimeout

    with tempfile.TemporaryDirectory(prefix="gpudoctor-typecheck-") as folder:
        try:
            build_tree(Path(folder), root)
        except FileExistsError as taken:
            print(f"gpudoctor.tools.typecheck: {taken}", file=sys.stderr)
            return exitcodes.USAGE
        try:
            done = run_mypy(Path(folder), [t for t in targets if t is not None], options, root)
        except (ChildTimeout, ChildOutputTooLarge, OSError) as failed:
            print(f"gpudoctor.tools.typecheck: mypy {failed}", file=sys.stderr)
            return exitcodes.INTERNAL
    sys.stdout.write(done.stdout)
    sys.stderr.write(done.stderr)
    return done.returncode


__all__ = ["PACKAGE_DIRS", "build_tree", "to_installed", "to_source", "run_mypy", "main"]

if __name__ == "__main__":
    sys.exit(main())
