"""The NVML binding handed to another interpreter (``report --python``'s child): this interpreter's
``pynvml.py`` is found without being imported, and loaded as ``pynvml`` in an interpreter that has
none of its own; one that has its own keeps it."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gpudoctor.backends.nvml import binding_file

ROOT = Path(__file__).resolve().parents[2]


def _child(code: str) -> subprocess.CompletedProcess[str]:
    """``code`` in a Python started with -S (no site-packages: no pynvml of its own), gpudoctor on its path."""
    prelude = f"import sys\nsys.path.insert(0, {str(ROOT)!r})\n"
    return subprocess.run([sys.executable, "-S", "-c", prelude + textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=120)


def test_the_binding_is_found_as_a_source_file_and_not_imported():
    pytest.importorskip("pynvml")
    proc = _child(f"""
        sys.path.append({str(Path(binding_file()).parent)!r})
        from gpudoctor.backends.nvml import binding_file
        print(binding_file(), "pynvml" in sys.modules)
    """)
    assert proc.returncode == 0, proc.stderr
    path, imported = proc.stdout.split()
    assert path.endswith("pynvml.py") and Path(path).is_file() and imported == "False"


def test_an_interpreter_without_a_binding_loads_the_one_handed_to_it():
    pytest.importorskip("pynvml")
    path = binding_file()
    proc = _child(f"""
        try:
            import pynvml
        except ImportError:
            print("none of its own")
        from gpudoctor.backends.nvml import load_binding
        load_binding({path!r})
        import pynvml
        print(pynvml.__file__ == {path!r}, callable(pynvml.nvmlInit))
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:2] == ["none of its own", "True True"]


def test_an_interpreter_with_its_own_binding_keeps_it(tmp_path):
    own = tmp_path / "pynvml.py"
    own.write_text("OWN = True\n")
    proc = _child(f"""
        sys.path.append({str(tmp_path)!r})
        from gpudoctor.backends.nvml import load_binding
        load_binding("/nonexistent/pynvml.py")
        import pynvml
        print(getattr(pynvml, "OWN", False))
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "True"


def test_a_binding_file_gone_since_is_an_error_for_the_child_to_report():
    """The child's boot turns any exception into one line to the parent (runner._INTERPRETER_CHILD_BOOT)."""
    proc = _child("""
        from gpudoctor.backends.nvml import load_binding
        try:
            load_binding("/nonexistent/pynvml.py")
        except OSError as exc:
            print(type(exc).__name__)
    """)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "FileNotFoundError"
