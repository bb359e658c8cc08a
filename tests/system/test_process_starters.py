"""Every place in gpudoctor/ and probes/ that starts a process is a named starter that owns its
process group and ends its whole tree (issue 35, item 2; docs/reliability.md, "Child processes").

A guard, not a case: the sources are read (ast) for every call that starts a process
(subprocess's Popen/run/call/check_*, os.fork/forkpty/spawn*/posix_spawn/system/popen, a
multiprocessing Process or Pool, torch.multiprocessing's spawn/start_processes, asyncio's
create_subprocess_*, pty.spawn). Each must sit in a function of :data:`STARTERS`, which says how
that starter ends its tree and which test counts what it leaves. A new ``subprocess.run`` elsewhere
fails here until it goes through one of them (``_proc.run_bounded`` for a command whose output is
read) or is added with its reason and its test.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("gpudoctor", "probes")

#: (file, function) -> how it owns its group and ends its tree; the test that counts what is left.
STARTERS: dict[tuple[str, str], str] = {
    ("gpudoctor/system/_proc.py", "run_bounded"):
        "NEW_GROUP, tracked; stop_popen on its limit, its output bound and its end "
        "(test_child_trees.py::test_run_bounded_ends_the_tree_a_command_leaves, "
        "test_child_trees.py::test_memory_probe_child_on_its_limit_leaves_nothing)",
    ("gpudoctor/system/_fork.py", "_start"):
        "ForkedCall/ForkedParts: the fork leads its own group (own_group) and cancel() ends its tree "
        "(test_child_trees.py::test_cuda_start_child_past_its_limit_leaves_nothing[forked])",
    ("gpudoctor/report/runner.py", "_start_interpreter_child"):
        "report --python: NEW_GROUP, tracked, end_tree on stop and at exit (test_child_trees.py)",
    ("gpudoctor/report/runner.py", "_Child.__init__"):
        "the probe child: own_group first, tracked, end_tree on stop and at exit "
        "(test_child_trees.py::test_quitting_while_a_probe_runs_its_tree_leaves_nothing)",
    ("gpudoctor/tui/workload_runner.py", "WorkloadProcess.start"):
        "the TUI's workload child: own_group, tracked, end_tree on cancel (test_tui_workload_runner.py)",
    ("gpudoctor/sampling/recorder.py", "torch_facts_in_child"):
        "record's torch child: own_group, tracked, end_tree when answered, on its limit and at exit "
        "(test_child_trees.py::test_record_stopped_during_its_torch_step_leaves_nothing)",
    ("gpudoctor/backends/cuda_driver.py", "_Spawned.__init__"):
        "the CUDA start child (threaded parent): NEW_GROUP, tracked, stop_popen on its limit "
        "(test_child_trees.py::test_cuda_start_child_past_its_limit_leaves_nothing[spawned])",
    ("probes/distributed.py", "launch_local"):
        "the distributed probe's ranks: in the probe child's group (Ctrl-C reaches them), each ended "
        "with end_tree, and the probe child's own tree with it "
        "(test_child_trees.py::test_distributed_probe_with_a_hung_rank_leaves_nothing)",
    ("probes/_distributed_worker.py", "_start_helper"):
        "test hook only (fault hang-tree): a helper in its rank's group, ended with the rank's tree "
        "(test_child_trees.py::test_distributed_probe_with_a_hung_rank_leaves_nothing)",
    ("gpudoctor/commands/why.py", "_run_command"):
        "why -- CMD: in the terminal's group so that Ctrl-C reaches it as typed; gpudoctor is its "
        "subreaper and _stop_tree ends the command and all it left (test_why_jobs.py)",
    ("gpudoctor/why/pyspy.py", "start_record"):
        "py-spy record/dump: a single process that starts nothing; killed and reaped by why's session",
}

_SUBPROCESS = {"Popen", "run", "call", "check_call", "check_output", "getoutput", "getstatusoutput"}
_OS = {"fork", "forkpty", "system", "popen", "posix_spawn", "posix_spawnp"}
_MP_NAMES = {"Process", "Pool", "spawn", "start_processes", "ProcessPoolExecutor"}


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    if isinstance(node, ast.Call):
        return _dotted(node.func) + "()"
    return "?"


def _starts_a_process(call: ast.Call) -> bool:
    name = _dotted(call.func)
    parts = name.split(".")
    last, owner = parts[-1], ".".join(parts[:-1])
    if owner == "subprocess" and last in _SUBPROCESS or name == "Popen":
        return True
    if owner == "os" and (last in _OS or last.startswith("spawn")):
        return True
    if owner in ("asyncio", "loop") and last.startswith("create_subprocess"):
        return True
    if name == "pty.spawn":
        return True
    if last in _MP_NAMES and owner != "psutil":  # psutil.Process(pid) reads a process, starts none
        return owner != "" or last in ("Process", "Pool", "ProcessPoolExecutor")
    return False


def found_starters(root: Path = ROOT) -> list[tuple[str, str, int, str]]:
    """(file, enclosing function, line, call) for every call in gpudoctor/ and probes/ that starts a process."""
    found = []
    for top in SCANNED:
        for path in sorted((root / top).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            tree = ast.parse(path.read_text(), rel)

            def visit(node: ast.AST, scope: list[str], rel: str = rel) -> None:
                for child in ast.iter_child_nodes(node):
                    if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                        visit(child, scope + [child.name])
                        continue
                    if isinstance(child, ast.Call) and _starts_a_process(child):
                        found.append((rel, ".".join(scope) or "<module>", child.lineno, _dotted(child.func)))
                    visit(child, scope)

            visit(tree, [])
    return found


def test_every_process_start_is_a_named_starter():
    found = found_starters()
    print("\n".join(f"{f}:{line} {where}: {call}" for f, where, line, call in found))
    stray = [f"{f}:{line} in {where}: {call}" for f, where, line, call in found if (f, where) not in STARTERS]
    assert not stray, ("a process started outside the named starters (route it through _proc.run_bounded, or "
                       "add it to STARTERS with how it ends its tree and its test):\n" + "\n".join(stray))
    # the list holds no starter that is gone (a renamed one must be named again)
    gone = sorted(set(STARTERS) - {(f, where) for f, where, _, _ in found})
    assert not gone, gone


def test_the_scan_finds_a_stray_start(tmp_path):
    """The guard itself: a `subprocess.run` added in a copy of the sources is found as stray."""
    import shutil

    for top in SCANNED:
        shutil.copytree(ROOT / top, tmp_path / top, ignore=shutil.ignore_patterns("__pycache__"))
    with open(tmp_path / "gpudoctor" / "report" / "quick.py", "a") as fh:
        fh.write("\n\ndef _stray():\n    import subprocess\n    subprocess.run(['true'])\n")
    found = found_starters(tmp_path)
    assert ("gpudoctor/report/quick.py", "_stray") in {(f, where) for f, where, _, _ in found}
    assert len({(f, w) for f, w, _, _ in found} & set(STARTERS)) == len(STARTERS)
