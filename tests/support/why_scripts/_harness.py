"""What the tutorial-style scripts beside this file share for their tests and for
benchmarks/why_overhead.py, apart from the training itself: the command line (``--seconds``,
``--steps``, ``--batch-size``, ``--progress``) and the per-step bookkeeping (``ready`` once the
loop runs, one ``progress T STEP CPU`` line per step, the end of the run).

A script run as ``python tests/support/why_scripts/NAME.py`` finds this module beside it.
"""

import argparse
import sys
import time


def parser(doc, batch_size, workers=None):
    """The scripts' common options; a script adds its own after them."""
    options = argparse.ArgumentParser(description=doc.splitlines()[0])
    options.add_argument("--seconds", type=float, default=0.0)
    options.add_argument("--steps", type=int, default=0)
    if workers is not None:
        options.add_argument("--workers", type=int, default=workers)
    options.add_argument("--batch-size", type=int, default=batch_size)
    options.add_argument("--progress", action="store_true")
    return options


def say(*words):
    """Print one line in a single write. ``print`` writes its words, separators and end one by one
    when stdout is unbuffered (PYTHONUNBUFFERED, as the tests run these scripts), so the lines of
    several trainers sharing one pipe interleave ("readyready" then an empty line); one write of a
    whole line under PIPE_BUF bytes reaches the pipe in one piece."""
    sys.stdout.write(" ".join(str(word) for word in words) + "\n")
    sys.stdout.flush()


class StepClock:
    """Counts training steps: prints ``ready`` after the third, a progress line after each with
    ``--progress`` (monotonic time, steps done, the process's CPU seconds), and says when
    ``--steps`` or ``--seconds`` is reached (0: never)."""

    def __init__(self, args):
        self.show, self.seconds, self.limit = args.progress, args.seconds, args.steps
        self.steps, self.started = 0, time.monotonic()

    def tick(self):
        """One step done; True when the run should end."""
        self.steps += 1
        if self.steps == 3:
            say("ready")
        if self.show:
            say("progress", time.monotonic(), self.steps, time.process_time())
        return bool((self.limit and self.steps >= self.limit)
                    or (self.seconds and time.monotonic() - self.started >= self.seconds))
