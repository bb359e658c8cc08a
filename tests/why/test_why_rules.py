"""The pure half of `gpudoctor why`: parsing py-spy's raw output, the classification rules, the
verdict's thresholds and the meaning of py-spy's errors (no process is sampled here)."""

from __future__ import annotations

import os
import time
from collections import Counter
from types import SimpleNamespace

import pytest

from gpudoctor.core import exitcodes
from gpudoctor.why import analysis, pyspy, rules
from gpudoctor.why.stacks import MAX_FRAMES, Frame, parse_line, parse_raw
from gpudoctor.why.wording import lines_of, words_of
from gpudoctor.core.model import Finding, Status

SITE = "/venv/lib/python3.11/site-packages"
STDLIB = "/usr/lib/python3.11"
DL = f"{SITE}/torch/utils/data/dataloader.py"


def stack_line(frames: list[str], count: int = 10, pids: tuple[int, ...] = (100,), tid: int | None = None,
               thread: str = "MainThread") -> str:
    procs = ";".join(f'process {p}:"python train.py"' for p in pids)
    return f"{procs};thread ({tid if tid is not None else pids[-1]}): {thread};" + ";".join(frames) + f" {count}"


def src(lines: dict[tuple[str, int], str]):
    return lambda file, line: lines.get((file, line), "")


LOOP = "<module> (/w/train.py:20)"
NEXT = [f"_BaseDataLoaderIter.__next__ ({DL}:725)", f"_MultiProcessingDataLoaderIter._next_data ({DL}:1507)"]
QUEUE_GET = f"Queue.get ({STDLIB}/multiprocessing/queues.py:122)"


def test_parse_a_raw_line_with_processes_thread_and_frames():
    s = parse_line(stack_line([LOOP, QUEUE_GET], 93, pids=(41, 57), tid=58, thread="MainThread"))
    assert s.pids == (41, 57) and s.pid == 57 and s.tid == 58 and s.thread == "MainThread" and s.count == 93
    assert s.frames[0] == Frame("<module>", "/w/train.py", 20) and s.frames[-1].function == "Queue.get"
    assert s.is_main_thread


def test_parse_keeps_records_whose_command_line_holds_newlines_and_bounds_frames():
    text = 'process 7:"python -c \nimport x\nx.run()";thread (7): MainThread;<module> (<string>:3) 5\n' \
           + stack_line(["f (/a.py:1)"] * (MAX_FRAMES + 50), 2, pids=(7,)) + "\n"
    stacks = list(parse_raw(text))
    assert [s.count for s in stacks] == [5, 2]
    assert "\n" not in stacks[0].cmdline and "\u240a" in stacks[0].cmdline
    assert len(stacks[1].frames) == MAX_FRAMES


def test_parse_skips_garbage():
    assert list(parse_raw("not a stack\n\x1b[2J 12x\n")) == []
    assert parse_line("process 1:\"x\";thread (1): MainThread;f (/a.py:1) notanumber") is None


def test_library_paths():
    assert rules.is_library(f"{SITE}/torch/nn/modules/module.py")
    assert rules.is_library(f"{STDLIB}/threading.py") and rules.is_library("<frozen importlib._bootstrap>")
    assert not rules.is_library("/home/me/project/train.py") and not rules.is_library("<string>")
    assert rules.is_library("/opt/gpudoctor/hooks/monitor.py", ("/opt/gpudoctor/",))


@pytest.mark.parametrize("frames, text, category, detail", [
    ([LOOP, *NEXT, QUEUE_GET], "", rules.DATA_WAIT, "waiting for workers"),
    ([LOOP, f"_BaseDataLoaderIter.__next__ ({DL}:725)", f"_SingleProcessDataLoaderIter._next_data ({DL}:1)",
      f"_MapDatasetFetcher.fetch ({SITE}/torch/utils/data/_utils/fetch.py:52)", "Data.__getitem__ (/w/data.py:9)"],
     "", rules.DATA_WAIT, "loading in the main process"),
    ([LOOP, "<module> (/w/train.py:21)"], "loss.item()", rules.HOST_SYNC, "item"),
    ([LOOP], "total += loss.cpu().numpy()", rules.HOST_SYNC, "cpu"),
    ([LOOP, f"synchronize ({SITE}/torch/cuda/__init__.py:985)"], "", rules.HOST_SYNC, "synchronize"),
    ([LOOP, f"Tensor.__repr__ ({SITE}/torch/_tensor.py:431)", f"_str ({SITE}/torch/_tensor_str.py:697)"], "",
     rules.HOST_SYNC, "print"),
    ([LOOP], "time.sleep(1)", rules.IDLE, "<module>"),
    ([LOOP, f"Event.wait ({STDLIB}/threading.py:629)"], "", rules.IDLE, "wait"),
    ([LOOP, f"save ({SITE}/torch/serialization.py:627)"], "", rules.CHECKPOINT_IO, "torch.save/load"),
    (["evaluate (/w/train.py:50)", f"Module._call_impl ({SITE}/torch/nn/modules/module.py:1527)"], "",
     rules.EVALUATION, ""),
    ([LOOP, f"Tensor.backward ({SITE}/torch/_tensor.py:522)"], "", rules.BACKWARD, ""),
    ([LOOP, f"SGD.step ({SITE}/torch/optim/sgd.py:80)"], "", rules.OPTIMIZER, ""),
    ([LOOP, f"Linear.forward ({SITE}/torch/nn/modules/linear.py:116)"], "", rules.FORWARD, ""),
    ([LOOP, "helper (/w/train.py:5)"], "x = x + 1", rules.OTHER, ""),
])
def test_the_rules(frames, text, category, detail):
    stack = parse_line(stack_line(frames))
    leaf = [f for f in stack.frames if not rules.is_library(f.file)][-1]
    verdict = rules.classify(stack, src({(leaf.file, leaf.line): text}))
    assert (verdict.category, verdict.detail) == (category, detail)


def test_worker_stacks_load_data_or_wait_for_work():
    worker = [f"_worker_loop ({SITE}/torch/utils/data/_utils/worker.py:308)"]
    fetch = worker + [f"_MapDatasetFetcher.fetch ({SITE}/torch/utils/data/_utils/fetch.py:52)",
                      "Images.__getitem__ (/w/data.py:41)", f"open ({SITE}/PIL/Image.py:3200)"]
    loading = rules.classify(parse_line(stack_line(fetch, pids=(1, 2))), src({}))
    assert loading == rules.Verdict(rules.DATA_LOADING, "decode", Frame("Images.__getitem__", "/w/data.py", 41))
    waiting = rules.classify(parse_line(stack_line(worker + [QUEUE_GET], pids=(1, 2))), src({}))
    assert waiting.category == rules.IDLE


def _views(lines: list[str]):
    stacks = list(parse_raw("\n".join(lines) + "\n"))
    return analysis.build_views(stacks, src({})), stacks


def test_input_bound_names_the_workers_dataset_line_and_the_idle_cpus():
    worker = [f"_worker_loop ({SITE}/torch/utils/data/_utils/worker.py:308)",
              f"_MapDatasetFetcher.fetch ({SITE}/torch/utils/data/_utils/fetch.py:52)",
              "Images.__getitem__ (/w/data.py:41)"]
    views, _ = _views([stack_line([LOOP, *NEXT, QUEUE_GET], 60, pids=(1,)),
                       stack_line([LOOP, f"Linear.forward ({SITE}/torch/nn/modules/linear.py:116)"], 40, pids=(1,)),
                       stack_line(worker, 95, pids=(1, 2)), stack_line(worker, 95, pids=(1, 3))])
    d = analysis.decide(views[1], views, src({}), gpu_util=28.0, on_gpu=True, idle_cpus=16.0)
    assert d.code == "input_bound" and words_of(d) == "input-bound"
    assert "60%" in d.summary and "2 workers" in d.summary and "data.py:41" in d.summary and "28%" in d.summary
    assert "more DataLoader workers" in d.fix and "16 CPUs idle" in d.fix and "2 of 2 workers busy" in d.fix
    assert lines_of(d)[0]["file"] == "/w/data.py" and lines_of(d)[0]["line"] == 41


def test_a_busy_gpu_is_gpu_bound_even_with_some_data_wait():
    views, _ = _views([stack_line([LOOP, *NEXT, QUEUE_GET], 30, pids=(1,)),
                       stack_line([LOOP, f"Linear.forward ({SITE}/torch/nn/modules/linear.py:116)"], 70, pids=(1,))])
    assert analysis.decide(views[1], views, src({}), gpu_util=97.0, on_gpu=True, idle_cpus=4).code == "gpu_bound"
    assert analysis.decide(views[1], views, src({}), gpu_util=None, on_gpu=False, idle_cpus=4).code == "input_bound"


def test_host_syncs_and_too_few_samples():
    source = src({("/w/train.py", 20): "running += loss.item()"})
    lines = [stack_line([LOOP], 50, pids=(1,)),
             stack_line(["<module> (/w/train.py:30)", f"Linear.forward ({SITE}/torch/nn/modules/linear.py:1)"], 50,
                        pids=(1,)),
             stack_line([LOOP], 3, pids=(2,))]
    views = analysis.build_views(list(parse_raw("\n".join(lines) + "\n")), source)
    d = analysis.decide(views[1], views, source, gpu_util=40.0, on_gpu=True, idle_cpus=1)
    assert d.code == "host_sync_bound" and "`.item()`" in d.summary and "train.py:20" in d.summary
    assert analysis.decide(views[2], views, source, gpu_util=None, on_gpu=False, idle_cpus=1).code == "unknown"


def test_the_straggler_is_the_rank_the_others_wait_for():
    ranks = []
    # DDP: fast ranks wait at the end of backward; rank 13 spends the time in its own Python
    for pid, waiting, other in ((11, 45, 10), (12, 47, 8), (13, 12, 43)):
        view = analysis.ProcessView(pid, main_samples=100, counts=Counter(
            {rules.BACKWARD: waiting, rules.OTHER: other, rules.FORWARD: 100 - waiting - other}))
        ranks.append((view, Finding(Status.WARN, "cpu_bound", "m", fix="f")))
    found = analysis.straggler(ranks)
    assert found["pid"] == 13 and found["code"] == "straggler"
    assert "works 88%" in found["message"] and "median rank works 55%" in found["message"]
    assert "in other (+34%)" in found["message"]
    assert analysis.straggler(ranks[:2]) is None


PERMISSION = "Permission Denied: Try running again with elevated permissions by going 'sudo env \"PATH=$PATH\" !!'"


@pytest.mark.parametrize("stderr, kind, code", [
    (PERMISSION, pyspy.NO_PERMISSION, exitcodes.CANNOT_ATTACH),
    ("Error: Operation not permitted (os error 1)", pyspy.NO_PERMISSION, exitcodes.CANNOT_ATTACH),
    ("Error: Unsupported version of Python: 3.99.0", pyspy.UNSUPPORTED_PYTHON, exitcodes.CANNOT_ATTACH),
    ("Error: Failed to find python version from target process", pyspy.NOT_PYTHON, exitcodes.USAGE),
    ("Error: No python processes found in process 5 or any of its subprocesses", pyspy.NOT_PYTHON, exitcodes.USAGE),
    ("Error: something new\n\nStack backtrace:\n   0: x", pyspy.FAILED, exitcodes.CANNOT_ATTACH),
])
def test_py_spy_errors_mean(stderr, kind, code):
    error = pyspy.error_from_stderr(stderr, 5)
    assert error.kind == kind and error.exit_code == code and "\n" not in str(error)
    if kind == pyspy.NO_PERMISSION:
        assert "SYS_PTRACE" in str(error) and "ptrace_scope" in str(error) and "process's user" in str(error)
    if kind == pyspy.UNSUPPORTED_PYTHON:
        assert "3.99.0" in str(error) and "pip install -U py-spy" in str(error)
    if kind == pyspy.FAILED:
        assert str(error).endswith("Error: something new")


def test_the_py_spy_binary_is_found():
    import os

    path = pyspy.find_py_spy()
    assert os.access(path, os.X_OK) and os.path.basename(path).startswith("py-spy")


def test_the_input_fix_depends_on_what_the_workers_do():
    worker = [f"_worker_loop ({SITE}/torch/utils/data/_utils/worker.py:308)",
              f"_MapDatasetFetcher.fetch ({SITE}/torch/utils/data/_utils/fetch.py:52)",
              "Images.__getitem__ (/w/data.py:41)"]
    views, _ = _views([stack_line([LOOP, *NEXT, QUEUE_GET], 90, pids=(1,)),
                       stack_line(worker, 95, pids=(1, 2)), stack_line(worker, 95, pids=(1, 3))])
    waiting = analysis.decide(views[1], views, src({}), gpu_util=None, on_gpu=False, idle_cpus=0,
                              cpu_by_pid={2: 3.0, 3: 4.0})
    assert "use little CPU (4% of a core at most)" in waiting.fix and "overlap the waits" in waiting.fix
    computing = analysis.decide(views[1], views, src({}), gpu_util=None, on_gpu=False, idle_cpus=0.2,
                                cpu_by_pid={2: 97.0, 3: 99.0})
    assert computing.fix.startswith("no CPU is idle for more workers (2 of 2 workers busy loading)")
    assert "data.py:41" in computing.fix


def test_the_why_package_never_imports_torch_or_textual():
    """It samples other processes: loading it (and the command) loads neither torch nor textual."""
    import subprocess
    import sys

    code = ("import sys, gpudoctor.why, gpudoctor.why.session, gpudoctor.why.metrics, gpudoctor.why.text, "
            "gpudoctor.commands.why; print(sorted(m for m in ('torch', 'textual', 'pynvml') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


class StandInNvml:
    """A boundary stand-in for the NVML backend: GPU 0 held by ``pid`` at a fixed utilisation
    (the fields and types of NvmlBackend's answers; hand-made, no GPU here)."""

    def __init__(self, pid: int, util: int, missing: str | None = None) -> None:
        self.pid, self.util, self.missing = pid, util, missing

    def status(self):
        from gpudoctor.backends.na import NA

        return NA(self.missing) if self.missing else None

    def device_count(self):
        return 2

    def processes(self, index):
        if index != 0:
            return []
        return [{"pid": self.pid, "type": "compute", "gpu_memory_bytes": 3 << 30, "sm_util_pct": self.util}]

    def utilization(self, index):
        return {"t": 0.0, "gpu_util_pct": self.util, "mem_util_pct": 10}

    def static(self, index):
        return {"index": index, "name": "NVIDIA H100 80GB HBM3"}


def test_readings_join_nvml_per_process_figures_for_the_sampled_tree():
    import os

    from gpudoctor.why.readings import Readings

    readings = Readings(os.getpid(), StandInNvml(os.getpid(), 31))
    readings.poll()
    gpu = readings.result()["gpu"]
    assert gpu["available"] is True and gpu["reason"] is None
    [device] = gpu["devices"]
    assert device["index"] == 0 and device["name"] == "NVIDIA H100 80GB HBM3"
    assert device["util_mean_pct"] == 31.0 and device["util_samples"] == 2
    assert device["processes"] == [{"pid": os.getpid(), "gpu_memory_bytes": 3 << 30, "sm_util_pct": 31}]
    missing = Readings(os.getpid(), StandInNvml(os.getpid(), 31, missing="LibraryNotFound")).result()["gpu"]
    assert missing == {"available": False, "reason": "NVML not available (LibraryNotFound)", "devices": []}


def _compute_readings(util: float) -> dict:
    return {"processes": {1: {"cpu_pct": 99.0, "threads_cpu_pct": {1: 99.0}}}, "host": {"cpus": 16, "idle_cpus": 12},
            "gpu": {"available": True, "reason": None, "devices": [
                {"index": 0, "name": "H100", "util_mean_pct": util, "util_samples": 20,
                 "processes": [{"pid": 1, "gpu_memory_bytes": 1 << 30, "sm_util_pct": None}]}]}}


def test_on_a_gpu_the_verdict_uses_nvml_busy_share():
    stacks = list(parse_raw(stack_line([LOOP, f"Linear.forward ({SITE}/torch/nn/modules/linear.py:116)"], 100,
                                       pids=(1,)) + "\n"))
    slow = analysis.diagnose(stacks, _compute_readings(30.0), src({}), pid=1)
    assert slow["verdict"]["code"] == "cpu_bound" and "the GPU is busy 30%" in slow["verdict"]["message"]
    assert "cannot keep the GPU busy" in slow["verdict"]["message"] and "torch.compile" in slow["verdict"]["fix"]
    assert slow["gpu"]["util_mean_pct"] == 30.0
    busy = analysis.diagnose(stacks, _compute_readings(96.0), src({}), pid=1)
    assert busy["verdict"]["code"] == "gpu_bound"


def test_a_program_still_importing_is_starting_up_not_idle():
    """`why -- python train.py` that samples while torch is imported: no idle verdict."""
    importing = ["<module> (/w/train.py:1)", "_find_and_load (<frozen importlib._bootstrap>:1176)",
                 f"<module> ({SITE}/torch/__init__.py:405)"]
    views, _ = _views([stack_line(importing, 80, pids=(1,)), stack_line([LOOP, *NEXT, QUEUE_GET], 20, pids=(1,))])
    source = src({("/w/train.py", 1): "import time, torch"})
    d = analysis.decide(views[1], views, source, gpu_util=None, on_gpu=False, idle_cpus=1, main_cpu_pct=11.0)
    # (the message is the "starting up: N% of the window was ...; sample again in N s")
    assert d.code == "unknown" and words_of(d) == "starting up" and "train.py:1 <module>" in d.summary
    assert "80%" in d.summary and "sample again" in d.fix
    # the same loop without the import: not start-up
    views, _ = _views([stack_line([LOOP, "helper (/w/train.py:5)"], 80, pids=(1,)),
                       stack_line([LOOP, *NEXT, QUEUE_GET], 20, pids=(1,))])
    training = analysis.decide(views[1], views, src({}), gpu_util=None, on_gpu=False, idle_cpus=1,
                               main_cpu_pct=11.0)
    assert training.code != "unknown"


OPT_INIT = ["<module> (/w/slow_loader.py:30)", f"SGD.__init__ ({SITE}/torch/optim/sgd.py:30)",
            f"Optimizer.__init__ ({SITE}/torch/optim/optimizer.py:380)"]
MODEL_INIT = ["<module> (/w/slow_loader.py:29)", "Net.__init__ (/w/slow_loader.py:12)",
              f"Linear.__init__ ({SITE}/torch/nn/modules/linear.py:100)",
              f"kaiming_uniform_ ({SITE}/torch/nn/init.py:500)"]
IMPORT = ["<module> (/w/slow_loader.py:1)", "_find_and_load (<frozen importlib._bootstrap>:1176)"]
COMPUTE = [LOOP, f"Linear.forward ({SITE}/torch/nn/modules/linear.py:116)"]


def test_start_up_is_recognised_and_a_window_of_it_gives_no_steady_state_verdict():
    """The issue's example: `import time, torch` 15% and `opt = torch.optim.SGD(...)` 14% were
    named as CPU-bound work; most of that window was start-up."""
    source = src({("/w/slow_loader.py", 1): "import time, torch", ("/w/train.py", 20): "out = model(x)"})
    views, _ = _views([stack_line(IMPORT, 40, pids=(1,)), stack_line(OPT_INIT, 15, pids=(1,)),
                       stack_line(MODEL_INIT, 10, pids=(1,)), stack_line(COMPUTE, 35, pids=(1,))])
    d = analysis.decide(views[1], views, source, gpu_util=None, on_gpu=False, idle_cpus=0, window_s=10.0)
    assert d.code == "unknown" and words_of(d) == "starting up"
    assert d.summary.startswith("starting up: 65% of the window was imports and building the optimizer/model")
    assert "sample again in 7 s" in d.summary
    # mostly the loop: the verdict judges the loop alone, and the start-up is reported apart
    views, _ = _views([stack_line(IMPORT, 20, pids=(1,)), stack_line(COMPUTE, 80, pids=(1,))])
    d = analysis.decide(views[1], views, source, gpu_util=None, on_gpu=False, idle_cpus=0, window_s=10.0)
    assert d.code == "cpu_bound" and "100% of the main thread's time is computing" in d.summary
    assert d.evidence["startup"]["share"] == 0.2 and d.evidence["startup"]["seconds"] == 2.0
    assert all(r["line"] != 1 for r in lines_of(d))


@pytest.mark.parametrize("frames, detail", [
    (["<module> (/w/t.py:3)", f"compile_inner ({SITE}/torch/_dynamo/convert_frame.py:700)",
      f"transform ({SITE}/torch/_dynamo/symbolic_convert.py:2000)"], "torch.compile"),
    (["<module> (/w/t.py:3)", f"load ({SITE}/torch/serialization.py:1000)", f"load ({STDLIB}/pickle.py:1)"],
     "loading a checkpoint"),
    (["<module> (/w/t.py:3)", "ImageDataset.__init__ (/w/t.py:9)", f"listdir ({STDLIB}/os.py:1)"],
     "building the dataset"),
])
def test_start_up_kinds(frames, detail):
    assert rules.classify(parse_line(stack_line(frames)), src({})) == rules.Verdict(
        rules.STARTUP, detail, [f for f in parse_line(stack_line(frames)).frames if f.file == "/w/t.py"][-1])


def test_a_data_wait_near_the_threshold_is_borderline_in_consecutive_windows():
    codes = set()
    for wait in (18, 20, 22):
        views, _ = _views([stack_line([LOOP, *NEXT, QUEUE_GET], wait, pids=(1,)),
                           stack_line(COMPUTE, 100 - wait, pids=(1,))])
        d = analysis.decide(views[1], views, src({}), gpu_util=None, on_gpu=False, idle_cpus=0)
        codes.add(d.code)
        assert words_of(d) == "borderline: input-bound / CPU-bound" and d.evidence["causes"] == ["input_bound", "cpu_bound"]
    assert codes == {"borderline"}


def test_no_more_workers_advised_when_no_cpu_is_free(tmp_path):
    views, _ = _views([stack_line([LOOP, f"_BaseDataLoaderIter.__next__ ({DL}:725)",
                                   f"_MapDatasetFetcher.fetch ({SITE}/torch/utils/data/_utils/fetch.py:52)",
                                   "Images.__getitem__ (/w/data.py:41)"], 90, pids=(1,))])
    d = analysis.decide(views[1], views, src({}), gpu_util=None, on_gpu=False, idle_cpus=0)
    assert d.code == "input_bound" and "num_workers" not in d.fix and "no CPU is free" in d.fix
    # free CPUs: the host's idle ones, capped by the job's own affinity/cgroup less what it uses
    assert analysis.free_cpus({"idle_cpus": 6.0, "usable_cpus": 2.0}, 190.0) == 0.1
    assert analysis.free_cpus({"idle_cpus": 0.3, "usable_cpus": 8.0}, 100.0) == 0.3
    from gpudoctor.why.readings import usable_cpus
    cg = tmp_path / "cg" / "job"
    cg.mkdir(parents=True)
    (cg / "cpu.max").write_text("150000 100000\n")
    (tmp_path / "proc" / str(os.getpid())).mkdir(parents=True)
    (tmp_path / "proc" / str(os.getpid()) / "cgroup").write_text("0::/job\n")
    assert usable_cpus(os.getpid(), str(tmp_path / "proc"), str(tmp_path / "cg")) == 1.5


def test_a_library_datasets_getitem_is_named_not_the_for_line():
    worker = [f"_worker_loop ({SITE}/torch/utils/data/_utils/worker.py:308)",
              f"_MapDatasetFetcher.fetch ({SITE}/torch/utils/data/_utils/fetch.py:52)",
              f"MNIST.__getitem__ ({SITE}/torchvision/datasets/mnist.py:142)", f"fromarray ({SITE}/PIL/Image.py:1)"]
    views, _ = _views([stack_line([LOOP, *NEXT, QUEUE_GET], 90, pids=(1,)), stack_line(worker, 95, pids=(1, 2))])
    d = analysis.decide(views[1], views, src({}), gpu_util=None, on_gpu=False, idle_cpus=0,
                        cpu_by_pid={2: 99.0})
    assert lines_of(d)[0]["function"] == "MNIST.__getitem__" and "mnist.py:142" in d.summary


def test_evaluation_under_no_grad_and_forward_inside_an_optimizer_closure():
    source = src({("/w/train.py", 40): "with torch.no_grad():", ("/w/train.py", 41): "for x in val:",
                  ("/w/train.py", 42): "out = model(x)", ("/w/train.py", 59): "def closure():",
                  ("/w/train.py", 60): "loss = model(x).sum()"})
    evaluating = ["<module> (/w/train.py:42)", f"Linear.forward ({SITE}/torch/nn/modules/linear.py:116)"]
    assert rules.classify(parse_line(stack_line(evaluating)), source).category == rules.EVALUATION
    views = analysis.build_views(list(parse_raw(stack_line(evaluating, 100, pids=(1,)) + "\n")), source)
    d = analysis.decide(views[1], views, source, gpu_util=None, on_gpu=False, idle_cpus=0)
    assert "evaluation 100%" in d.summary and "()" not in d.summary and lines_of(d)[0]["line"] == 42
    closure = [LOOP, f"LBFGS.step ({SITE}/torch/optim/lbfgs.py:330)",
               f"decorate_context ({SITE}/torch/utils/_contextlib.py:116)", "closure (/w/train.py:60)",
               f"Linear.forward ({SITE}/torch/nn/modules/linear.py:116)"]
    assert rules.classify(parse_line(stack_line(closure)), source).category == rules.FORWARD
    update = [LOOP, f"LBFGS.step ({SITE}/torch/optim/lbfgs.py:400)", f"_add_grad ({SITE}/torch/optim/lbfgs.py:1)"]
    assert rules.classify(parse_line(stack_line(update)), source).category == rules.OPTIMIZER


def test_a_ddp_rank_in_all_reduce_waits_in_a_collective():
    allreduce = [LOOP, "sync_grads (/w/train.py:70)",
                 f"all_reduce ({SITE}/torch/distributed/distributed_c10d.py:2500)",
                 f"wrapper ({SITE}/torch/distributed/c10d_logger.py:80)"]
    views, _ = _views([stack_line(allreduce, 70, pids=(1,)), stack_line(COMPUTE, 30, pids=(1,))])
    d = analysis.decide(views[1], views, src({}), gpu_util=None, on_gpu=True, idle_cpus=0)
    assert d.code == "idle" and words_of(d) == "waiting in a collective" and "all_reduce" in d.summary
    assert "computing" not in d.summary


def test_an_overloaded_host_qualifies_the_verdict():
    stacks = list(parse_raw(stack_line(COMPUTE, 100, pids=(1,)) + "\n"))
    host = {"cpus": 2, "idle_cpus": 0.0, "usable_cpus": 2.0, "load_1m": 4.2, "others_cpu_pct": 180.0,
            "others_count": 3, "others": [{"pid": 9, "name": "stress", "cpu_pct": 120.0},
                                          {"pid": 8, "name": "gzip", "cpu_pct": 40.0},
                                          {"pid": 7, "name": "make", "cpu_pct": 20.0}]}
    d = analysis.diagnose(stacks, {"host": host, "processes": {1: {"cpu_pct": 60.0}}}, src({}), pid=1)
    assert d["verdict"]["words"] == "CPU-bound, but the host is overloaded"
    assert "3 other processes use 180% of 2 cores" in d["verdict"]["message"] and "stress (pid 9)" in d["verdict"]["message"]
    quiet = dict(host, others_cpu_pct=20.0, others=host["others"][2:], others_count=1, idle_cpus=0.0)
    d = analysis.diagnose(stacks, {"host": quiet, "processes": {1: {"cpu_pct": 60.0}}}, src({}), pid=1)
    assert d["verdict"]["words"] == "CPU-bound" and "host_overloaded" not in d["verdict"]
    stolen = dict(quiet, steal_cpus=1.0)  # a KVM guest whose neighbours take a core
    d = analysis.diagnose(stacks, {"host": stolen, "processes": {1: {"cpu_pct": 60.0}}}, src({}), pid=1)
    assert "but the host is overloaded" in d["verdict"]["words"] and "100% of a core" in d["verdict"]["message"]


def test_a_quiet_main_thread_is_idle_and_its_breakdown_says_so():
    from gpudoctor.why.text import render_text
    stacks = list(parse_raw(stack_line(["<module> (/w/t.py:3)"], 100, pids=(1,)) + "\n"))
    readings = {"processes": {1: {"cpu_pct": 0.0, "threads_cpu_pct": {1: 0.0},
                                  "gpu_evidence": {"readable": True, "device_files": [], "libcuda": False}}}}
    d = analysis.diagnose(stacks, readings, src({("/w/t.py", 3): "signal.pause()"}), pid=1)
    assert d["verdict"]["code"] == "idle" and d["shares"]["idle"] == 1.0 and d["shares"]["other"] == 0
    assert "main thread: idle 100% (waiting outside Python)" in render_text(d)


def test_a_main_thread_starved_of_cpu_by_other_work_is_not_idle():
    """On a busy machine a thread computing in Python used 19% of a CPU and waited for one the rest of
    the window: it was called idle ("waits outside Python"). The time it waited to run counts as
    wanted CPU (/proc schedstat); a thread that neither ran nor waited to run is still idle."""
    stacks = list(parse_raw(stack_line(["<module> (/w/t.py:3)", "tokenize (/w/t.py:9)"], 100, pids=(1,)) + "\n"))
    evidence = {"readable": True, "device_files": [], "libcuda": False}
    starved = {"processes": {1: {"cpu_pct": 19.0, "threads_cpu_pct": {1: 19.0}, "threads_wanted_pct": {1: 98.0},
                                 "gpu_evidence": evidence}}}
    d = analysis.diagnose(stacks, starved, src({("/w/t.py", 9): "words = text.lower().split()"}), pid=1)
    assert d["verdict"]["code"] == "cpu_bound", d["verdict"]
    waiting = {"processes": {1: {"cpu_pct": 19.0, "threads_cpu_pct": {1: 19.0}, "threads_wanted_pct": {1: 20.0},
                                 "gpu_evidence": evidence}}}
    d = analysis.diagnose(stacks, waiting, src({("/w/t.py", 9): "words = text.lower().split()"}), pid=1)
    assert d["verdict"]["code"] == "idle", d["verdict"]


def test_readings_give_each_threads_wanted_cpu_with_its_run_queue_wait():
    from gpudoctor.why import readings as rd

    assert rd._wanted({1: 19.0, 2: 5.0}, {1: 10.0, 2: 3.0}, {1: 11.6, 2: 3.0}, 2.0) == {1: 99.0, 2: 5.0}
    assert rd._wanted({1: 19.0}, {}, {}, 2.0) == {}  # no schedstat: nothing is said, the CPU use stands
    here = rd._thread_waits(os.getpid())
    if os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/schedstat"):
        assert os.getpid() in here and all(w >= 0 for w in here.values())


def test_why_on_a_worker_names_the_parent_to_ask_about():
    worker = [f"_worker_loop ({SITE}/torch/utils/data/_utils/worker.py:308)",
              f"_MapDatasetFetcher.fetch ({SITE}/torch/utils/data/_utils/fetch.py:52)",
              "Images.__getitem__ (/w/data.py:41)"]
    stacks = list(parse_raw(stack_line(worker, 50, pids=(7,)) + "\n"))
    d = analysis.diagnose(stacks, {"processes": {7: {"ppid": 5}}}, src({}), pid=7)
    assert d["verdict"]["code"] == "dataloader_worker" and d["verdict"]["parent_pid"] == 5
    assert "gpudoctor why 5" in d["verdict"]["fix"]


def test_a_published_line_never_ends_in_an_unexplained_question_mark():
    from gpudoctor.why.text import _live_words
    words = _live_words({"verdict": "ok", "step_time_p50_s": 0.05, "data_wait_share": 0.1,
                         "samples_per_s": None, "host_syncs_per_step": None})
    assert "?" not in words and "host syncs not counted" in words


def test_busy_by_utilisation_is_gpu_bound_only_with_sm_evidence():
    """utilization.gpu 97% alone does not prove the GPU is the bottleneck: with SM activity 6% and no
    tensor work it is launch-bound (autocast would not help); with SM 90% and tensor 70% GPU-bound;
    without GPM the verdict says it judged by utilisation alone and gives both fixes."""
    views, _ = _views([stack_line([LOOP, f"Linear.forward ({SITE}/torch/nn/modules/linear.py:116)"], 100,
                                  pids=(1,))])

    def decide(**gpm):
        return analysis.decide(views[1], views, src({}), gpu_util=97.0, on_gpu=True, idle_cpus=4, gpm=gpm)

    small = decide(sm_active_mean_pct=6.0, tensor_active_mean_pct=0.0)
    assert small.code == "launch_bound" and words_of(small) == "launch-bound"
    assert "only 6% of SM cycles active" in small.summary and "CUDA graphs" in small.fix and "autocast" in small.fix
    full = decide(sm_active_mean_pct=90.0, tensor_active_mean_pct=70.0)
    assert full.code == "gpu_bound" and "tensor cores 70% active" in full.summary
    unknown = decide(gpm_note="needs Hopper or later")
    assert unknown.code == "gpu_bound" and words_of(unknown) == "GPU-bound (by utilisation alone)"
    assert "cannot be told without SM activity (GPM: needs Hopper or later)" in unknown.summary
    assert "CUDA graphs" in unknown.fix and "autocast" in unknown.fix


def test_readings_keep_gpm_of_a_gpu_the_job_holds(monkeypatch):
    """The why readings read GPM once a second for a GPU holding the job's processes, and the device
    entry carries SM and tensor activity (or the reason there is none)."""
    from gpudoctor.backends import NvmlBackend, NvmlGate
    from gpudoctor.backends import nvml as nvml_backend
    from gpudoctor.why.readings import Readings
    from support.nvml_fake import FakePynvml, hopper

    monkeypatch.setattr(nvml_backend, "GPM_MIN_INTERVAL_S", 0.0)
    me = os.getpid()
    fake = FakePynvml(readings=dict(hopper(sm=7.0, tensor=0.0), nvmlDeviceGetComputeRunningProcesses=lambda: [
        SimpleNamespace(pid=me, usedGpuMemory=1 << 30)]))
    readings = Readings(me, NvmlBackend(NvmlGate(fake)))
    readings._gpm_at.clear()
    readings.poll()
    readings._gpm_at.clear()
    readings.poll()
    [device] = readings.result()["gpu"]["devices"]
    assert device["sm_active_mean_pct"] == 7.0 and device["tensor_active_mean_pct"] == 0.0
    assert device["gpm_note"] is None


def test_the_scripts_own_python_in_the_loop_gets_its_own_fix_not_a_gpu():
    """A tokenizer run on each batch in the loop (rules.OTHER) is most of the computing: the fix
    names that line and the Dataset/workers, never 'train on a GPU'; a loop that computes in the
    model keeps the device advice."""
    tokenize = ["<module> (/w/lm.py:80)", "WordTokenizer.encode (/w/lm.py:31)"]
    views, _ = _views([stack_line(tokenize, 70, pids=(1,)),
                       stack_line([LOOP, f"Linear.forward ({SITE}/torch/nn/modules/linear.py:116)"], 30, pids=(1,))])
    d = analysis.decide(views[1], views, src({}), gpu_util=None, on_gpu=False, idle_cpus=0)
    assert d.code == "cpu_bound" and "own Python" in d.summary
    assert "train on a GPU" not in d.fix and "/w/lm.py:31" in d.fix and "__getitem__" in d.fix
    views, _ = _views([stack_line(tokenize, 20, pids=(1,)),
                       stack_line([LOOP, f"Linear.forward ({SITE}/torch/nn/modules/linear.py:116)"], 80, pids=(1,))])
    d = analysis.decide(views[1], views, src({}), gpu_util=None, on_gpu=False, idle_cpus=0)
    assert d.code == "cpu_bound" and "train on a GPU" in d.fix


def test_a_process_age_is_as_of_the_last_reading_not_the_first(monkeypatch):
    """The hang verdict caps a rank's wait by its age: that age must be the one at the window's end.
    Taken once when the process is first seen, a rank 2 s old when `why` began was said to have
    waited 2 s of a 3 s window it spent entirely in the collective."""
    import gpudoctor.why.readings as readings_module

    readings = readings_module.Readings(os.getpid())
    first = readings.names[os.getpid()]["age_s"]
    later = time.time() + 5.0
    monkeypatch.setattr(readings_module.time, "time", lambda: later)
    readings.poll()
    assert readings.names[os.getpid()]["age_s"] == pytest.approx(first + 5.0, abs=0.3)
