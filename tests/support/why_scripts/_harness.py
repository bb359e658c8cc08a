"""What the tutorial-style scripts beside this file share for their tests and for
benchmarks/why_overhead.py, apart from the training itself: the command line (``--seconds``,
``--steps``, ``--batch-size``, ``--progress``) and the per-step bookkeeping (``ready`` once the
loop runs, one ``progress T STEP CPU`` line per step, the end of the run).

A script run as ``python tests/support/why_scripts/NAME.py`` finds this module beside it.
"""

import argparse
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
            print("ready", flush=True)
        if self.show:
            print("progress", time.monotonic(), self.steps, time.process_time(), flush=True)
        return bool((self.limit and self.steps >= self.limit)
                    or (self.seconds and time.monotonic() - self.started >= self.seconds))
