"""Each finding code's words live in one wording table: gpudoctor/core/findings.py's WORDING, or a table
registered in its index (findings._TABLES: the probes' own, probes/_wording.py).

The guard scans the probes and the core modules that build findings for a finding whose summary,
why or fix is written where it is built (a ``Finding(...)``, ``ProbeResult.find/skip/error``, or
the measuring probes' ``NoDevice``, given text rather than a table's words), so a new inline
wording fails here with its file and line. The tables are checked both ways: every code a call
names has its words, and every table entry is named somewhere (no dead words).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from gpudoctor.core import findings
from gpudoctor.core.findings import Wording
from gpudoctor.core.model import ProbeResult, Status
from gpudoctor.probes import _wording
from gpudoctor.probes.distributed import assemble
from test_wording_twins import table_phrases, twins

ROOT = Path(__file__).resolve().parents[2]
TABLE_FILES = {ROOT / "gpudoctor" / "core" / "findings.py", ROOT / "probes" / "_wording.py"}
#: The modules that build findings and take their words from the tables.
GUARDED = sorted(p for p in (ROOT / "probes").glob("*.py") if p not in TABLE_FILES) + [
    ROOT / "gpudoctor" / name for name in ("backends/cuda_compat.py", "backends/cuda_driver.py", "report/baseline.py",
                                           "core/model.py", "report/runner.py")]
#: Calls whose text arguments are a finding's words: (the name called, the first positional
#: argument that is words, the keyword arguments that are words).
_BUILDERS = {"Finding": (2, {"summary", "why", "fix"}), "find": (2, {"summary", "why", "fix"}),
             "skip": (1, {"summary", "why", "fix"}), "error": (1, {"summary"}), "NoDevice": (1, {"summary", "why", "fix"}),
             # a table's template filled with words given in place: "{fix}" with fix="Run ..."
             "finding": (99, {"summary", "why", "fix"}), "skipped": (99, {"summary", "why", "fix"})}
#: The calls that name a code of the tables: (the argument that names it, what the call puts before it).
_LOOKUPS = {"finding": (0, ""), "words": (0, ""), "wording": (0, ""), "skipped": (1, ""),
            "errored": (1, "probe_error:"), "_no_device": (0, ""), "_said": (0, "work:")}


def _ways(call: ast.Call) -> list[str]:
    """busy._said(code, way): the ``:way`` suffixes its second argument can give ("" without one):
    a literal, or either literal of a choice (``"" if ... else "no_util"``)."""
    if len(call.args) < 2:
        return [""]
    way = call.args[1]
    choices = [way.body, way.orelse] if isinstance(way, ast.IfExp) else [way]
    return [f":{c.value}" if c.value else "" for c in choices if isinstance(c, ast.Constant) and isinstance(c.value, str)]


def _is_text(node: ast.AST) -> bool:
    """Written words: a string literal, an f-string, or a sum or choice with one in it."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str) and bool(node.value.strip())
    if isinstance(node, ast.JoinedStr):
        return True
    if isinstance(node, ast.BinOp):
        return _is_text(node.left) or _is_text(node.right)
    if isinstance(node, ast.IfExp):
        return _is_text(node.body) or _is_text(node.orelse)
    return False


def _called(node: ast.Call) -> str:
    return node.func.id if isinstance(node.func, ast.Name) else node.func.attr if isinstance(node.func, ast.Attribute) else ""


def inline_wordings(source: str, name: str = "<source>") -> list[str]:
    """Where ``source`` builds a finding with words written in place: 'name:line: call'."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call) or _called(node) not in _BUILDERS:
            continue
        first, keywords = _BUILDERS[_called(node)]
        if _called(node) == "find" and len(node.args) < 3:
            continue  # str.find, bytes.find: not a finding
        texts = [a for a in node.args[first:] if _is_text(a)] + [k.value for k in node.keywords
                                                                 if k.arg in keywords and _is_text(k.value)]
        if texts:
            found.append(f"{name}:{node.lineno}: {_called(node)}(...) with words written in place")
    return found


def _sources() -> dict[Path, str]:
    return {path: path.read_text(encoding="utf-8")
            for folder in ("gpudoctor", "probes") for path in sorted((ROOT / folder).rglob("*.py"))}


def test_the_probes_and_the_core_modules_word_no_finding_in_place():
    inline = [hit for path in GUARDED for hit in inline_wordings(path.read_text(encoding="utf-8"),
                                                                 str(path.relative_to(ROOT)))]
    assert not inline, "findings worded outside the wording tables (move the words there):\n" + "\n".join(inline)



def test_a_key_lives_in_one_table_and_the_probes_table_is_in_the_index():
    tables = findings.tables()
    assert "gpudoctor.probes._wording" in tables and tables["gpudoctor.probes._wording"] is _wording.WORDING
    seen: dict[str, str] = {}
    for name, table in tables.items():
        for key, wording in table.items():
            assert key not in seen, f"{key} is worded in {seen[key]} and in {name}"
            seen[key] = name
            assert isinstance(wording, Wording) and isinstance(wording.status, Status) and wording.summary, key
    assert findings.wording("index_order_differs") is _wording.WORDING["index_order_differs"]
    with pytest.raises(KeyError):
        findings.wording("no_such_code")


def _pattern(node: ast.JoinedStr) -> re.Pattern[str] | None:
    """An f-string that builds a code (``f"throttle_{reason}"``) as a pattern; None for any other
    f-string (one of words, or ``f"{x}"``, would match every key)."""
    fixed = "".join(v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str))
    if not re.fullmatch(r"[a-z0-9_:]*[a-z][a-z0-9_:]*", fixed):
        return None
    parts = [re.escape(v.value) if isinstance(v, ast.Constant) else "[a-z0-9_]+" for v in node.values]
    return re.compile("".join(parts) + "$")


def _names_in_source() -> tuple[set[str], list[re.Pattern[str]], list[str]]:
    """Every string literal and code-building f-string of gpudoctor/ and probes/ but the tables' keys,
    and the codes the table lookups name as literals ('file:line: code')."""
    literals: set[str] = set()
    patterns: list[re.Pattern[str]] = []
    named: list[str] = []
    for path, source in _sources().items():
        tree = ast.parse(source)
        keys = {id(key) for node in ast.walk(tree) if isinstance(node, ast.AnnAssign)
                and isinstance(node.target, ast.Name) and node.target.id == "WORDING" and isinstance(node.value, ast.Dict)
                for key in node.value.keys}  # a table's own keys name nothing
        for node in ast.walk(tree):
            if id(node) in keys:
                continue
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                literals.add(node.value)
            elif isinstance(node, ast.JoinedStr) and (pattern := _pattern(node)) is not None:
                patterns.append(pattern)
            if isinstance(node, ast.Call) and _called(node) in _LOOKUPS and len(node.args) > _LOOKUPS[_called(node)][0]:
                at, prefix = _LOOKUPS[_called(node)]
                code = node.args[at]
                if isinstance(code, ast.Constant) and isinstance(code.value, str):
                    for way in _ways(node) if _called(node) == "_said" else [""]:
                        named.append(f"{path.relative_to(ROOT)}:{node.lineno}: {prefix}{code.value}{way}")
                        literals.add(prefix + code.value + way)
    return literals, patterns, named


def test_every_code_named_has_words_and_every_entry_is_named():
    keys = {key for table in findings.tables().values() for key in table}
    literals, patterns, named = _names_in_source()
    unworded = [site for site in named if site.rsplit(": ", 1)[1] not in keys]
    assert not unworded, "codes built from the tables without an entry there:\n" + "\n".join(unworded)
    dead = sorted(key for key in keys if key not in literals and not any(p.match(key) for p in patterns))
    assert not dead, "table entries no code names (dead words): " + ", ".join(dead)


def test_rewording_a_probe_code_in_its_table_changes_the_report(monkeypatch):
    monkeypatch.setitem(_wording.WORDING, "rank_failed",
                        Wording(Status.FAIL, "rank {rank} fell over: {text} (test words)", "Why (test words).",
                                "Fix (test words)."))
    result = assemble({}, {1: {"kind": "failed", "text": "exit code 1"}}, 2, "gloo", "local")
    said = next(f for f in result.to_dict()["findings"] if f["code"] == "rank_failed")
    assert (said["summary"], said["why"], said["fix"]) == ("rank 1 fell over: exit code 1 (test words)",
                                                           "Why (test words).", "Fix (test words).")


def test_rewording_a_core_code_changes_the_error_result(monkeypatch):
    monkeypatch.setitem(findings.WORDING, "probe_error", Wording(Status.ERROR, "{summary}", "Why (test words).",
                                                                 "Re-run {probe} (test words)."))
    said = findings.errored("memory", "timed_out", limit="30 s").findings[0]
    assert (said.code, said.summary, said.why, said.fix) == ("probe_error", "timed out after 30 s",
                                                             "Why (test words).", "Re-run memory (test words).")
    assert ProbeResult.error("memory", "gone").findings[0].why == "Why (test words)."


# --------------------------------------------------------------------------- sentences beside findings
# The words that fill a finding's fields or stand beside it (a fix helper's sentence, the hooks'
# advice on a host sync, the sweep's advice) live in the tables too: a module outside them keeps
# no table of words and returns no sentence written in place.
TABLE_FILES_ALL = TABLE_FILES | {ROOT / "gpudoctor" / "workload" / "wording.py", ROOT / "gpudoctor" / "why" / "wording.py"}
SENTENCE_GUARDED = sorted(set(GUARDED) | {ROOT / "gpudoctor" / name for name in (
    "hooks/summary.py", "workload/recommend.py", "backends/busy.py")})
#: why's modules that fill its verdicts' fields, and the sweep's runner (#39: their words in why/wording.py, workload/wording.py).
SENTENCE_GUARDED += [ROOT / "gpudoctor" / name for name in ("why/rules.py", "why/analysis.py", "why/views.py", "workload/run.py")]


def _words_of(node: ast.AST) -> str | None:
    """The text a node writes in place (a literal, an f-string's fixed parts, a sum of them); None for any other."""
    if isinstance(node, ast.Constant):
        return node.value if isinstance(node.value, str) else None
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else " {} " for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        parts = [_words_of(node.left), _words_of(node.right)]
        return " ".join(p for p in parts if p is not None) if any(p is not None for p in parts) else None
    return None


def _parts(node: ast.AST):
    """A value and, for a tuple or list, each of its items (a table's (what, fix) pairs)."""
    if isinstance(node, (ast.Tuple, ast.List)):
        for item in node.elts:
            yield from _parts(item)
    else:
        yield node


def _is_phrase(text: str) -> bool:
    return len(re.findall(r"[A-Za-z][A-Za-z'-]+", text)) >= 3 and " " in text.strip()


def word_tables(source: str, name: str = "<source>") -> list[str]:
    """Module-level dicts of phrases ('name:line: TABLE'): words kept in a table outside the wording tables."""
    found = []
    for node in ast.parse(source).body:
        target = node.targets[0] if isinstance(node, ast.Assign) else node.target if isinstance(node, ast.AnnAssign) else None
        if target is None or not isinstance(node.value, ast.Dict):
            continue
        if any(_is_phrase(text) for value in node.value.values for part in _parts(value)
               if (text := _words_of(part)) is not None):
            found.append(f"{name}:{node.lineno}: {getattr(target, 'id', '?')} holds words")
    return found


def returned_sentences(source: str, name: str = "<source>") -> list[str]:
    """Where a function returns a whole sentence written in place ('name:line'): a helper wording a
    finding's fix or reason itself (capitalised, five words or more, a final period)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Return) or node.value is None:
            continue
        for part in _parts(node.value):
            text = (_words_of(part) or "").strip()
            if len(text.split()) >= 5 and text[:1].isupper() and text.endswith("."):
                found.append(f"{name}:{node.lineno}: a sentence returned")
    return found


def test_no_words_outside_the_tables_beside_the_findings():
    hits = []
    for path in SENTENCE_GUARDED:
        if path in TABLE_FILES_ALL:
            continue
        source, name = path.read_text(encoding="utf-8"), str(path.relative_to(ROOT))
        hits += word_tables(source, name) + returned_sentences(source, name)
    assert not hits, "words kept outside the wording tables (move them to the package's table):\n" + "\n".join(hits)



def test_the_sweeps_advice_is_registered_in_the_index():
    from gpudoctor.workload import wording as workload_wording

    assert findings.tables()["gpudoctor.workload.wording"] is workload_wording.WORDING


def test_rewording_the_words_beside_findings_changes_what_is_said(monkeypatch):
    from gpudoctor.sampling import presentation
    from gpudoctor.core import xid
    from gpudoctor.backends import cuda_driver
    from gpudoctor.hooks import summary
    from gpudoctor.probes import environment
    from gpudoctor.workload import recommend, wording as workload_wording
    from gpudoctor.fleet.rows import FleetRow
    from gpudoctor.report import baseline

    monkeypatch.setitem(findings.WORDING, "work:idle", Wording(Status.PASS, "idle", short="idle", tag="resting"))
    assert presentation.work_tag("idle") == "resting"
    monkeypatch.setitem(findings.SYNC_PATTERNS, "item", ("an item (test words)", "Fix (test words)."))
    assert summary.sync_pattern_words("item") == ("an item (test words)", "Fix (test words).")
    monkeypatch.setitem(findings.CUDA_START_CAUSES, 34, ("a stub (test words)", "Fix the stub (test words)."))
    assert cuda_driver.cause_of_error_text("CUDA driver is a stub library") == (
        "a stub (test words)", "Fix the stub (test words).")
    monkeypatch.setitem(_wording.KERNEL_IMAGE_FIX, "dropped", "Install {sm} (test words).")
    assert environment.kernel_image_fix(["sm_80", "sm_90"], "7.0") == "Install sm_70 (test words)."
    monkeypatch.setitem(xid._NOT_IN_CATALOG, "unknown", ("unknown (test words)", "look it up: {url}"))
    assert xid.explain(99999).words == "unknown (test words)"
    monkeypatch.setitem(workload_wording.ADVICE, "oom", "no room at batch {sizes} (test words)")
    runs = [{"status": "ok", "device": "cpu", "mode": "resident", "batch_size": 64, "workers": None,
             "samples_per_s": 1000.0, "epoch_s": 1.0, "test_accuracy": 0.9},
            {"status": "oom", "device": "cpu", "mode": "resident", "batch_size": 4096, "workers": None}]
    assert "no room at batch 4096 (test words)" in recommend.recommend(runs)["reasons"]
    monkeypatch.setitem(findings.FLEET_PHRASES, "all_clear", "all quiet (test words)")
    row = FleetRow("node-a:9400", "0")
    row.settle()
    assert row.reason == "all quiet (test words)"
    monkeypatch.setitem(findings.BASELINE_PHRASES, "on_gpu", " on card {device} (test words)")
    assert baseline._label(("transfer", "h2d_bandwidth", 3)) == "h2d_bandwidth on card 3 (test words)"


#: Modules whose every phrase is in their package's table: no text of three words or more in place
#: but docstrings.
ALL_IN_TABLES = [ROOT / "gpudoctor" / "workload" / "recommend.py"]
#: why's analysis and views: every phrase in why/wording.py's PHRASES (#39).
ALL_IN_TABLES += [ROOT / "gpudoctor" / "why" / name for name in ("analysis.py", "views.py")]
#: why's text report: its lines' fixed phrases in PHRASES too (#39).
ALL_IN_TABLES += [ROOT / "gpudoctor" / "why" / "text.py"]


def phrases_in_place(source: str, name: str = "<source>") -> list[str]:
    """Every phrase written in place outside docstrings ('name:line')."""
    tree = ast.parse(source)
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                  and node.body and isinstance(node.body[0], ast.Expr)}
    inner = {id(v) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for v in node.values}
    return [f"{name}:{node.lineno}: {text.strip()[:40]!r}" for node in ast.walk(tree)
            if id(node) not in docstrings and id(node) not in inner and isinstance(node, (ast.Constant, ast.JoinedStr))
            and (text := _words_of(node)) is not None and _is_phrase(text)]


def guard_hits(paths, check) -> list[str]:
    """What ``check(source, name)`` finds in each of ``paths`` (name: the path from the repository's root)."""
    return [hit for path in paths for hit in check(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))]


def test_the_sweeps_advice_is_worded_only_in_its_table():
    hits = guard_hits(ALL_IN_TABLES, phrases_in_place)
    assert not hits, "advice worded in place (move it to gpudoctor/workload/wording.py's ADVICE):\n" + "\n".join(hits)


def test_the_phrase_guard_finds_a_reason_written_in_place():
    assert phrases_in_place('reasons.append(f"out of memory at batch size {sizes}")')
    assert not phrases_in_place('def f():\n    """Docstring words are not advice."""\n    return _advice("oom")')


# --------------------------------------------------------------------------- the report layer, the live views, fleet
# What the front ends share (sampling/presentation.py: a fault, the no-GPU sentence, the events, the
# report's verdict), the report layer (the runner, report --baseline, the baseline comparison) and fleet
# take their words from the tables too (issue 39): no table of words kept there, no finding worded at
# the call, and in the modules that build findings or results no field of one filled with a phrase
# written in place.
WIDENED = [ROOT / "gpudoctor" / name for name in ("sampling/presentation.py", "report/runner.py", "commands/report.py",
                                                  "report/baseline.py")] + sorted((ROOT / "gpudoctor" / "fleet").glob("*.py"))
#: Of those, the modules that build findings or results (fleet's client, idle rules and text write
#: queries and layout, not findings).
FILLS_FINDINGS = [ROOT / "gpudoctor" / name for name in ("report/runner.py", "commands/report.py", "report/baseline.py",
                                                         "fleet/gather.py", "fleet/rules.py", "fleet/rows.py")]
#: The keyword arguments that hold a finding's or a result's words, whatever is called (Tolerance(why=...)).
_WORD_KEYWORDS = {"summary", "why", "fix"}


def _phrases(node: ast.AST) -> list[ast.AST]:
    """The phrases written in ``node`` (a literal, an f-string, a sum, either side of a choice or an ``or``)."""
    if isinstance(node, ast.IfExp):
        return _phrases(node.body) + _phrases(node.orelse)
    if isinstance(node, ast.BoolOp):
        return [p for value in node.values for p in _phrases(value)]
    return [part for part in _parts(node) if (text := _words_of(part)) is not None and _is_phrase(text)]


def filled_in_place(source: str, name: str = "<source>") -> list[str]:
    """Where a finding's field or a result's summary is a phrase written in place ('name:line: words'):
    a field of a code looked up in the tables (``finding("gpu_not_exported", since=f" (last seen {age} ago)")``),
    a summary, why or fix given to any call, a result settled or a row's reason set with words, or a
    phrase a function returns (the runner's account of a probe process that failed)."""
    found: dict[str, None] = {}
    for node in ast.walk(ast.parse(source)):
        hits: list[ast.AST] = []
        if isinstance(node, ast.Call):
            hits += [p for k in node.keywords if _called(node) in _LOOKUPS or k.arg in _WORD_KEYWORDS
                     for p in _phrases(k.value)]
            if _called(node) == "settle":
                hits += [p for arg in node.args for n in ast.walk(arg) for p in _phrases(n)]
        elif isinstance(node, ast.Return) and node.value is not None:
            hits += _phrases(node.value)
        elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Attribute) and t.attr in ("reason", "summary")
                                                  for t in node.targets):
            hits += _phrases(node.value)
        found.update((f"{name}:{node.lineno}: {(_words_of(hit) or '').strip()[:40]!r}", None) for hit in hits)
    return list(found)


def test_the_report_layer_the_live_views_and_fleet_keep_no_words_in_place():
    hits = []
    for path in WIDENED:
        source, name = path.read_text(encoding="utf-8"), str(path.relative_to(ROOT))
        hits += inline_wordings(source, name) + word_tables(source, name) + returned_sentences(source, name)
        if path in FILLS_FINDINGS:
            hits += filled_in_place(source, name)
    assert not hits, "words kept outside the wording tables (move them to core/findings.py):\n" + "\n".join(hits)



#: The named phrases said through a function of findings, with their tables: fleet's and the baseline comparison's.
NAMED_PHRASES = {"fleet_phrase": findings.FLEET_PHRASES, "baseline_phrase": findings.BASELINE_PHRASES}


def test_every_named_phrase_said_is_in_its_table_and_every_one_is_said():
    said: dict[str, set[str]] = {function: set() for function in NAMED_PHRASES}
    for source in _sources().values():
        for node in ast.walk(ast.parse(source)):
            function = getattr(node, "func", None)
            function = getattr(function, "attr", getattr(function, "id", ""))
            if isinstance(node, ast.Call) and function in said:
                assert node.args and isinstance(node.args[0], ast.Constant), f"{function} takes a phrase's name as is"
                said[function].add(node.args[0].value)
    for function, table in NAMED_PHRASES.items():
        assert said[function] - set(table) == set(), f"{function}: names no phrase of its table"
        assert set(table) - said[function] == set(), f"{function}: phrases no module says"


def test_every_guarded_path_is_a_file():
    """A module renamed or moved must not drop out of a guard unseen (the guards test membership)."""
    guarded = set(GUARDED) | set(SENTENCE_GUARDED) | set(WIDENED) | set(FILLS_FINDINGS) | set(ALL_IN_TABLES) | set(
        BY_REASON_GUARDED)
    missing = sorted(str(p.relative_to(ROOT)) for p in guarded if not p.is_file())
    assert not missing, f"guarded modules that do not exist (renamed or moved?): {missing}"


# --------------------------------------------------------------------------- words by NVML's reason
#: The live views and the commands that say them: what a reading's n/a reason, a GPU's fault or a machine without
#: NVML means is worded in core/findings.py (NA_REASONS, DEVICE_FAULTS' and NO_GPU_CODES' entries), never in a
#: table of their own keyed by NVML's error (#39: presentation's n/a words, NO_GPU).
BY_REASON_GUARDED = [ROOT / "gpudoctor" / name for name in (
    "sampling/presentation.py", "tui/widgets.py", "commands/watch.py", "commands/record.py")] + [ROOT / "probes" / "environment.py"]


def reason_tables(source: str, name: str = "<source>") -> list[str]:
    """Module-level dicts keyed by an NVML error whose values hold text ('name:line: TABLE')."""
    reasons = set(findings.NA_REASONS) | set(findings.DEVICE_FAULTS) | set(findings.NO_GPU_CODES)
    found = []
    for node in ast.parse(source).body:
        target = node.targets[0] if isinstance(node, ast.Assign) else node.target if isinstance(node, ast.AnnAssign) else None
        if target is None or not isinstance(node.value, ast.Dict):
            continue
        keys = {k.value for k in node.value.keys if isinstance(k, ast.Constant)}
        if keys & reasons and any(_words_of(part) for value in node.value.values for part in _parts(value)):
            found.append(f"{name}:{node.lineno}: {getattr(target, 'id', '?')} words NVML's reasons")
    return found


def test_no_module_words_nvmls_reasons_in_a_table_of_its_own():
    hits = guard_hits(BY_REASON_GUARDED, reason_tables)
    assert not hits, "NVML's reasons worded outside core/findings.py (use NA_REASONS or the reason's entry):\n" + \
        "\n".join(hits)



# --------------------------------------------------------------------------- the table's words as they are
#: Every module says a table's words as the table holds them: no re-capitalised fix (#39: the hooks' launch_bound
#: wrote the work verdict's fix with a capital; its entry now holds the form it says). Where words are joined into
#: another sentence, or begin one of their own, the case changes in one place: findings.clause and findings.sentence.
AS_THEY_ARE = sorted([*(ROOT / "gpudoctor").rglob("*.py"), *(ROOT / "probes").rglob("*.py")])
#: The functions allowed to change the case of words: (file, function).
RECASERS = {("gpudoctor/core/findings.py", "sentence"), ("gpudoctor/core/findings.py", "clause")}


def recased(source: str, name: str = "<source>") -> list[str]:
    """Where words change case in place ('name:line'): ``text[:1].upper()``, ``text[0].lower()``, ``.capitalize()``,
    outside the functions of :data:`RECASERS`."""
    tree = ast.parse(source)
    allowed = {id(inner) for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) and (name, node.name) in RECASERS
               for inner in ast.walk(node)}
    found = []
    for node in ast.walk(tree):
        if id(node) in allowed or not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        method, of = node.func.attr, node.func.value
        first = isinstance(of, ast.Subscript) and (
            (isinstance(of.slice, ast.Slice) and of.slice.lower is None and isinstance(of.slice.upper, ast.Constant)
             and of.slice.upper.value == 1) or (isinstance(of.slice, ast.Constant) and of.slice.value == 0))
        if method in ("capitalize", "title") or (method in ("upper", "lower") and first):
            found.append(f"{name}:{node.lineno}: {ast.unparse(node)[:50]}")
    return found


def test_no_module_recases_a_tables_words():
    hits = guard_hits(AS_THEY_ARE, recased)
    assert not hits, ("words re-cased in place (hold the form said in the table, or join them with findings.clause "
                      "or findings.sentence):\n" + "\n".join(hits))



def test_only_findings_clause_and_sentence_may_recase():
    source = (ROOT / "gpudoctor" / "core" / "findings.py").read_text(encoding="utf-8")
    assert recased(source, "gpudoctor/core/findings.py") == []
    assert len(recased(source, "gpudoctor/fleet/rules.py")) == 2  # the same functions anywhere else are found
    assert findings.sentence("reset the GPU") == "Reset the GPU" and findings.clause("Reset it.") == "reset it."


# --------------------------------------------------------------------------- the guards themselves
def _field_guard(source: str) -> list[str]:
    return filled_in_place(source) + word_tables(source)


def _twin_guard(source: str) -> list[str]:
    return twins(source, table_phrases())


#: Each guard of this file and of test_wording_twins, whether it must find (True) or let through (False) the source below.
GUARD_CASES = [
    # the inline guard: a finding worded where it is built
    (inline_wordings, True,
     'r.find(Status.WARN, "slow", f"{x} is slow.", why="Why.", fix="Fix.")'),
    (inline_wordings, True,
     'r.find(Status.PASS, "ok", "All good " + name)'),
    (inline_wordings, True,
     'Finding(Status.FAIL, "broken", summary, why="It broke.")'),
    (inline_wordings, True,
     'ProbeResult.skip("p", "no GPU here", code="no_gpu")'),
    (inline_wordings, True,
     'ProbeResult.error(probe.name, f"timed out after {s} s")'),
    (inline_wordings, True,
     'findings.finding("p2p_unreadable", label=label, fix="Run it on the host.")'),
    (inline_wordings, True,
     'NoDevice("quick_mode", "Not measured.", fix="Run it fully." if full else "Later.")'),
    (inline_wordings, False,
     'r.findings.append(findings.finding("slow", gpu=label, pct=pct))'),
    (inline_wordings, False,
     'ProbeResult.error(probe.name, why, duration_s=1.0)'),
    (inline_wordings, False,
     'ProbeResult.skip(probe, summary, code=code.partition(":")[0], why=why, fix=fix)'),
    (inline_wordings, False,
     'text.find("\\n")'),
    (inline_wordings, False,
     'Finding(Status.SKIP, devices.code, devices.summary + _wording.CPU_MEASURED, devices.why, devices.fix)'),
    # the word-table guard: a module's own table of words
    (word_tables, True,
     '_SYNC_ADVICE = {"item": ("a `.item()` on a CUDA tensor", "Keep running totals on the GPU.")}'),
    (word_tables, True,
     'WORK_WORDS: dict[str, str] = {"busy_small_kernels": "small kernels only"}'),
    (word_tables, True,
     '_CAUSES = {34: ("a stub libcuda was loaded", "Remove the stubs directory.")}'),
    (word_tables, False,
     'LIMITS = {"util": (0, 100), "temp": (0, 130)}'),
    (word_tables, False,
     'KEYS = {"sm": "sm_active_pct"}'),
    # the returned-sentence guard: a function that returns a sentence
    (returned_sentences, True,
     'def fix(sm):\n    return f"Install a torch build whose arch list includes {sm}."'),
    (returned_sentences, True,
     'def why(host):\n    return ("ACS on the path", "a VM", "Run `sudo gpudoctor report`, or " + X + ".")'),
    (returned_sentences, False,
     'def reason():\n    return "the NVIDIA driver is not answering"'),
    (returned_sentences, False,
     'def fix():\n    return _wording.KERNEL_IMAGE_FIX["dropped"].format(sm=sm)'),
    # the field guard: words filled into a finding's fields in place, or a table of them
    (_field_guard, True,
     'FAULT_WORDS: dict[str, str] = {"GpuIsLost": "GPU lost: it fell off the bus."}'),
    (_field_guard, True,
     'EVENT_WORDS = {"ecc_double_bit": "double-bit (uncorrectable) ECC error"}'),
    (_field_guard, True,
     'row.add(findings.finding("gpu_not_exported", since=f" (last seen {fmt_age(age)} ago)" if age else ""))'),
    (_field_guard, True,
     'row.add(findings.finding("nvml_down", reasons=", ".join(reasons) or "no reason given"))'),
    (_field_guard, True,
     'def wait():\n    return f"probe process {describe_exit(code)} while starting"'),
    (_field_guard, True,
     'def run():\n    return None, f"timed out after {late} (the probe process was stopped)"'),
    (_field_guard, True,
     'result = ProbeResult(probe=probe, status=Status.FAIL, summary="abandoned: the driver is not answering")'),
    (_field_guard, True,
     'Tolerance("transfer", "d2d_bandwidth", "higher", 10, 25, why="device memory bandwidth bounds most kernels")'),
    (_field_guard, True,
     'result.settle("; ".join(failures + [f"{judged} figure(s) compared with {n} baseline report(s)"]))'),
    (_field_guard, True,
     'self.reason = "; ".join(one_line(f) for f in ordered) if ordered else "no problem seen"'),
    (_field_guard, False,
     'row.add(findings.finding("gpu_not_exported", since=findings.fleet_phrase("last_seen", age=age) if age else ""))'),
    (_field_guard, False,
     'def wait():\n    return findings.words("probe_error:child_exited", exit=describe_exit(code))[0]'),
    (_field_guard, False,
     'self.reason = "; ".join(one_line(f) for f in ordered) if ordered else fleet_phrase("all_clear")'),
    (_field_guard, False,
     'result.measure(name, value, unit, note=f"baseline {base}; tolerance {warn} (warn)")'),
    # the reason guard: a table of words keyed by NVML's reasons
    (reason_tables, True,
     '_NA_SHORT = {"NotSupported": "n/a (not sup.)", "GpuIsLost": "n/a (lost)"}'),
    (reason_tables, True,
     'NVML_REASON_WORDS = {"DriverNotLoaded": ("the NVIDIA kernel module is not loaded", "Load it.")}'),
    (reason_tables, False,
     '_STYLE = {"GpuIsLost": 3}'),
    (reason_tables, False,
     'NO_NVML_REASONS = {"LibraryNotFound", "DriverNotLoaded"}'),
    # the case guard: words re-cased in place
    (recased, True,
     'worded(LAUNCH_BOUND, fix=f"{found.fix[:1].upper()}{found.fix[1:]}")'),
    (recased, True,
     'action = earlier.action[:1].upper() + earlier.action[1:] + "."'),
    (recased, True,
     'why = tol.why.capitalize()'),
    (recased, False,
     'label = row.status.upper()'),
    (recased, False,
     'key = name[0].isupper()'),
    (recased, False,
     'action = findings.sentence(earlier.action) + "."'),
    # the twin guard (test_wording_twins): a table's words written again in place
    (_twin_guard, True,
     'return Verdict(DATA_WAIT, "loading in the main process", None)'),
    (_twin_guard, True,
     'why = f"only {gpus} CUDA device{s} visible for {n} ranks on this node (NCCL needs one GPU per rank)"'),
    (_twin_guard, True,
     'others = " Also every step: " + "; ".join(sites) + "."'),
    (_twin_guard, True,
     'missing.append("no /dev/nvidia* device")'),
    (_twin_guard, False,
     'why = phrase("detail_loading_main")'),
    (_twin_guard, False,
     'key = "cuda"'),
    (_twin_guard, False,
     'def f():\n    """No problem found: the loop is not waiting on data."""'),
]


@pytest.mark.parametrize("guard, finds, source", GUARD_CASES)
def test_each_guard_finds_its_cases_and_nothing_else(guard, finds, source):
    assert bool(guard(source)) is finds
