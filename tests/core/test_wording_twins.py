"""Words that fill a finding's fields live in the wording tables only (issue #39: rewording a finding
touches one line), and rewording them there changes what `why` and the training summary say.

The twin guard reads every phrase of the tables (the findings' templates, the named phrases beside
them: why's PHRASES, the probes' and the hooks' constants, the sweep's words) and fails where a
module outside the tables writes one of them again in place: the same words written twice, so a
rewording in the table would miss the copy. A literal counts when it is a table phrase (its fields
and an f-string's values read alike), or, for three words or more, a piece of one (``" Also every
step: " + sites + "."``).
"""

from __future__ import annotations

import ast
import importlib
import re
import string
from dataclasses import fields, is_dataclass
from pathlib import Path
from typing import Any, Iterator

from gpudoctor.core import findings
from gpudoctor.core.findings import Wording
from gpudoctor.core.model import Status

ROOT = Path(__file__).resolve().parents[2]
TABLE_MODULES = ("gpudoctor.core.findings", "gpudoctor.probes._wording", "gpudoctor.why.wording",
                 "gpudoctor.workload.wording")
TABLE_FILES = {ROOT / "gpudoctor" / "core" / "findings.py", ROOT / "probes" / "_wording.py",
               ROOT / "gpudoctor" / "why" / "wording.py", ROOT / "gpudoctor" / "workload" / "wording.py"}
#: A word (a path like /dev/nvidia* or libcuda.so counts as one).
_WORDS = re.compile(r"[A-Za-z][A-Za-z'*/.-]+")
#: A finding code (``driver_not_answering``, ``device_fault:nvml_unloaded``): a name, not words.
_CODE = re.compile(r"[a-z0-9]+(_[a-z0-9]+)*(:[a-z0-9_]+)?")


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _strings(item)
    elif is_dataclass(value) and isinstance(value, Wording):
        for f in fields(value):
            yield from _strings(getattr(value, f.name))


def _skeleton_of_template(text: str) -> str:
    """A template with each field as ``{}``: "{what} inside framework code" -> "{} inside framework code"."""
    try:
        parsed = list(string.Formatter().parse(text))
    except ValueError:
        return text
    return "".join(literal + ("{}" if name is not None else "") for literal, name, _spec, _conv in parsed)


def table_phrases() -> set[str]:
    """Every phrase of the wording tables, fields as ``{}``: module-level strings, dicts and Wordings."""
    found: set[str] = set()
    for name in TABLE_MODULES:
        module = importlib.import_module(name)
        for attr, value in vars(module).items():
            if attr.startswith("__") or callable(value) and not isinstance(value, Wording):
                continue
            found.update(_skeleton_of_template(text) for text in _strings(value))
    found = {p for p in found if not _CODE.fullmatch(p)}
    return {p for p in found if len(_WORDS.findall(p)) >= 2 or (" " in p.strip() and len(p.strip()) >= 6)}


def _skeleton(node: ast.AST) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
    return None


def twins(source: str, phrases: set[str], name: str = "<source>") -> list[str]:
    """Where ``source`` writes a table phrase, or a piece of one of three words or more ('name:line: text')."""
    tree = ast.parse(source)
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                  and node.body and isinstance(node.body[0], ast.Expr)}
    inner = {id(v) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for v in node.values}
    found = []
    for node in ast.walk(tree):
        if id(node) in docstrings or id(node) in inner:
            continue
        text = _skeleton(node)
        if text is None or _CODE.fullmatch(text) or len(_WORDS.findall(text)) < 2:
            continue  # a word alone ("decode", "GPU {}") names a thing; it is no phrase to word
        piece = len(_WORDS.findall(text)) >= 3 and " " in text.strip()
        if text in phrases or (piece and any(text in p for p in phrases)):
            found.append(f"{name}:{node.lineno}: {text.strip()[:50]!r}")
    return found


#: The modules whose words filling a finding's fields moved to the tables (#39): why's rules and
#: analysis, the training summary, the container, distributed and devices probes, the sweep's runner.
TWINS_GUARDED = [ROOT / "gpudoctor" / name for name in (
    "why/rules.py", "why/analysis.py", "why/views.py", "hooks/summary.py", "workload/run.py")] + [
    ROOT / "probes" / name for name in ("_stack.py", "distributed.py", "devices.py")]
#: The commands and the TUI's panel that say a machine has no usable NVML, and the live views' shared words (#39:
#: NVML's reasons in their entries, a reading's n/a reasons in findings.NA_REASONS).
TWINS_GUARDED += [ROOT / "gpudoctor" / name for name in ("commands/watch.py", "commands/record.py", "tui/widgets.py",
                                                         "sampling/presentation.py", "why/text.py")]
#: Literals that equal a table's words but are not words said: (file, text). torch's own error text
#: that marks an out-of-memory error.
NOT_WORDS = {("gpudoctor/workload/run.py", "out of memory")}


def test_no_module_writes_the_tables_words_again():
    phrases = table_phrases()
    hits = [hit for path in TWINS_GUARDED
            for hit in twins(path.read_text(encoding="utf-8"), phrases, str(path.relative_to(ROOT)))
            if (hit.split(":", 1)[0], hit.split(": ", 1)[1].strip("'")) not in NOT_WORDS]
    assert not hits, "words of the wording tables written again in place (use the table's name):\n" + "\n".join(hits)
    # What this guard must find and let through is in test_wording_tables' GUARD_CASES, with every guard's cases.


# --------------------------------------------------------------------------- rewording in the tables

SITE = "/venv/lib/python3.11/site-packages"


def _why(evidence: dict[str, Any], **gpu: Any) -> dict[str, Any]:
    """`why`'s diagnosis of a loop in forward on the main thread, as the command builds it."""
    from gpudoctor.why import analysis
    from gpudoctor.why.stacks import parse_raw

    line = (f'process 1:"python train.py";thread (1): MainThread;<module> (/w/train.py:20);'
            f"Linear.forward ({SITE}/torch/nn/modules/linear.py:116) 100")
    readings = {"processes": {1: {"cpu_pct": 99.0, "threads_cpu_pct": {1: 99.0}, "gpu_evidence": evidence}},
                "host": {"cpus": 16, "idle_cpus": 12},
                "gpu": {"available": True, "reason": "NVML lists none", "devices": [], **gpu}}
    return analysis.diagnose(list(parse_raw(line + "\n")), readings, lambda f, n: "", pid=1)


def test_rewording_a_why_phrase_changes_why_s_output(monkeypatch):
    """cpu_bound:gpu_unknown's {unknown} and the GPU line take why/wording.py's PHRASES."""
    from gpudoctor.why import wording
    from gpudoctor.why.text import render_text

    unreadable = {"readable": False, "device_files": [], "libcuda": False}
    before = _why(unreadable)
    assert "/proc of the process could not be read" in before["verdict"]["message"]
    monkeypatch.setitem(wording.PHRASES, "gpu_evidence_unknown", "no /proc to read (test words), and {nvml}")
    monkeypatch.setitem(wording.PHRASES, "gpu_evidence_files", "has {files} open (test words)")
    after = _why(unreadable, process_list_reason="NoPermission")
    assert after["verdict"]["code"] == "cpu_bound"
    assert "unknown (no /proc to read (test words), and NoPermission)" in after["verdict"]["message"]
    assert "no /proc to read (test words), and NoPermission" in render_text(after)
    held = _why({"readable": True, "device_files": ["/dev/nvidia0"], "libcuda": True})
    assert "has /dev/nvidia0 open (test words)" in render_text(held)


def test_rewording_a_why_detail_changes_what_a_stack_was_doing(monkeypatch):
    from gpudoctor.why import rules, wording
    from gpudoctor.why.stacks import parse_line

    monkeypatch.setitem(wording.PHRASES, "waiting_for_workers", "waiting on workers (test words)")
    dl = f"{SITE}/torch/utils/data/dataloader.py"
    line = (f'process 1:"python train.py";thread (1): MainThread;<module> (/w/train.py:20);'
            f"_BaseDataLoaderIter.__next__ ({dl}:725);_MultiProcessingDataLoaderIter._next_data ({dl}:1507);"
            f"Queue.get (/usr/lib/python3.11/multiprocessing/queues.py:122) 10")
    verdict = rules.classify(parse_line(line), lambda f, n: "")
    assert (verdict.category, verdict.detail) == (rules.DATA_WAIT, "waiting on workers (test words)")


def test_rewording_a_hooks_phrase_changes_the_training_summary(monkeypatch):
    from gpudoctor.hooks import summary

    monkeypatch.setitem(findings.WORDING, "training_all_clear",
                        Wording(Status.PASS, "All clear (test words){also}."))
    monkeypatch.setattr(findings, "ALL_CLEAR_ALSO_ON_GPU", " on the GPU too")
    monkeypatch.setattr(findings, "NOTE_NO_DEVICE_TIME", "{count} step(s) lacked device time (test words)")
    raw = summary.RawTimings(waits=[0.0] * 5, host_steps=[0.01] * 5, iter_starts=[i * 0.01 for i in range(5)],
                             ends=[(i + 1) * 0.01 for i in range(5)], passes=[1] * 5, device_steps=[0.01] * 3,
                             device="cuda:0")
    text = summary.render_text(summary.build_summary(raw))
    assert "All clear (test words) on the GPU too." in text
    assert "note: 1 step(s) lacked device time (test words)" in text


def test_the_launch_bound_fix_is_its_entrys_words_as_written(monkeypatch):
    """The training summary's launch_bound says its entry's fix as the table holds it (it once re-capitalised the
    work verdict's fix at the call); the text is the one it always said."""
    from gpudoctor.hooks import summary

    gpm = [{"gpu_util_pct": 98.0, "memory_used_bytes": 10 * 2**30, "memory_total_bytes": 80 * 2**30,
            "sm_active_pct": 7.0, "tensor_active_pct": 0.0} for _ in range(5)]
    raw = summary.RawTimings(waits=[0.001] * 50, host_steps=[0.01] * 50, iter_starts=[i * 0.011 for i in range(50)],
                             ends=[(i + 1) * 0.011 for i in range(50)], passes=[1] * 50, device_steps=[0.01] * 50,
                             device="cuda:0", gpu_samples=gpm)
    [item] = summary.build_summary(raw).diagnosis
    assert item.fix == ("Try larger batches, bf16/TF32 autocast or CUDA graphs; fuse small operations with "
                        "torch.compile.")
    monkeypatch.setitem(findings.WORDING, "launch_bound", Wording(Status.WARN, "{words}", "", "Fuse it (test words)."))
    [item] = summary.build_summary(raw).diagnosis
    assert item.fix == "Fuse it (test words)."


def test_rewording_a_why_text_phrase_changes_the_text_report(monkeypatch):
    """render_text's fixed phrases (the fix label, the main thread's line, the sampling line) are why/wording.py's."""
    from gpudoctor.why import wording
    from gpudoctor.why.text import render_text

    monkeypatch.setitem(wording.PHRASES, "text_fix", "do this (test words): ")
    monkeypatch.setitem(wording.PHRASES, "text_main_thread", "the main thread did (test words): {shares}")
    monkeypatch.setitem(wording.PHRASES, "text_sampled", "looked {seconds:.1f} s (test words){ended}{interrupted}")
    text = render_text(_why({"readable": True, "device_files": [], "libcuda": False}))
    assert "  do this (test words): " in text and "  the main thread did (test words): forward 100%" in text
    assert "looked 0.0 s (test words)" in text and "sampled " not in text and "  fix: " not in text, text
