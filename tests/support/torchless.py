"""gpudoctor run in a child where `import torch` fails as it does without torch installed."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Run in a child: make `import torch` fail as it does where torch is not installed.
BLOCK_TORCH = textwrap.dedent("""
    import sys
    class _NoTorch:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("torch", "torchvision"):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None
    sys.meta_path.insert(0, _NoTorch())
""")


def _gpudoctor(args: list[str], *, env_extra: dict[str, str] | None = None, prelude: str = "",
               python: str = sys.executable, timeout: float = 240) -> subprocess.CompletedProcess:
    code = prelude + "\nimport sys\nfrom gpudoctor.cli import main\nsys.exit(main(sys.argv[1:]))\n"
    env = dict(os.environ)
    env.update(env_extra or {})
    return subprocess.run([python, "-c", code, *args], capture_output=True, text=True, env=env,
                          timeout=timeout, cwd=ROOT)
