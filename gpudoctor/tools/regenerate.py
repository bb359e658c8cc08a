"""The files made from the reading catalogue (gpudoctor.backends.catalogue), and the one command
that rewrites them after a reading is added or changed there::

    python -m gpudoctor.tools.regenerate           # rewrite every generated file (or part of one)
    python -m gpudoctor.tools.regenerate --check   # exit 4 (exitcodes.FAIL) naming those that are not current

What it writes, whole or between its markers:

- docs/recording.schema.json: the recording schema (gpudoctor.backends.recording.schema_text), its
  samples' and its static facts' properties from the catalogue;
- docs/fleet.schema.json: the rows' reading properties (those with the catalogue's ``$comment``);
- docs/fleet.md: the per-GPU metric table (``gpu-metrics``, ``gpudoctor_gpu_info``'s labels included), the MIG table (``mig-metrics``) and the
  DCGM name table (``dcgm-names``), from gpudoctor.fleet.text;
- deploy/prometheus/gpudoctor-held-idle.rules.yml (gpudoctor.fleet.idle.rule_file);
- gpudoctor/backends/base.py: the fields of ``GpuSample`` (``gpu-sample``), the sample type for
  type checkers, the reading fields of ``MigDeviceReading`` (``mig-reading``) and the fields of
  ``DeviceStatic`` (``device-static``), the static facts' type.

tests/backends/test_catalogue.py fails while one of them is not current. Run from a source checkout: the
paths are the repository's.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[2]
#: The ``$comment`` that marks a fleet schema property made from the catalogue.
FROM_CATALOGUE = "generated from gpudoctor.backends.catalogue: python -m gpudoctor.tools.regenerate"
#: The Python type of a sample's field, by the reading's recorded JSON type.
_PY_TYPES = {"number": "FloatOrNA", "integer": "IntOrNA", "flag": "Union[int, bool, NA]", "index": "int",
             "text": "TextOrNA", "optional_text": "OptionalTextOrNA"}


def between(text: str, name: str, body: str, comment: str = "<!-- {} -->") -> str:
    """``text`` with what lies between its markers ``name:begin`` and ``name:end`` (each on a line
    of its own, written as ``comment`` formats them) replaced by ``body``."""
    begin, end = comment.format(f"{name}:begin"), comment.format(f"{name}:end")
    found = re.search(rf"^([ \t]*){re.escape(begin)}\n.*?^[ \t]*{re.escape(end)}$", text, re.S | re.M)
    if found is None:
        raise ValueError(f"the markers {begin} ... {end} are missing")
    return text[:found.start()] + f"{found.group(1)}{begin}\n{body}{found.group(1)}{end}" + text[found.end():]


def fleet_row_properties() -> dict[str, Any]:
    """The fleet schema's property of each reading a row holds (``FleetRow``'s readings)."""
    from gpudoctor.backends import catalogue
    from gpudoctor.fleet.text import _base_unit

    out: dict[str, Any] = {}
    for r in catalogue.fleet_readings():
        sources = [f"`{r.prometheus}`"] + [f"`{f.name}`" for f in catalogue.dcgm_read(r.key)]
        out[r.fleet] = {"$comment": FROM_CATALOGUE, "type": ["number", "null"],
                        "description": f"{r.help}, in {_base_unit(r.prometheus)}, from {', '.join(sources)}; "
                                       "null where no source gives it"}
    return out


def fleet_schema_text(old: str) -> str:
    """docs/fleet.schema.json with its rows' reading properties (after ``job``) made anew."""
    schema = json.loads(old)
    items = schema["properties"]["rows"]["items"]
    readings = fleet_row_properties()
    properties: dict[str, Any] = {}
    for key, value in items["properties"].items():
        if value.get("$comment") != FROM_CATALOGUE and key not in readings:
            properties[key] = value
        if key == "job":
            properties.update(readings)
    items["properties"] = properties
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def fleet_md_text(old: str) -> str:
    from gpudoctor.fleet import text

    for name, table in (("gpu-metrics", text.gpu_metrics_table()), ("mig-metrics", text.mig_metrics_table()),
                        ("dcgm-names", text.dcgm_names_table())):
        old = between(old, name, table)
    return old


def gpu_sample_fields() -> str:
    """The fields of ``GpuSample`` (gpudoctor/backends/base.py), one per reading, in sample order."""
    from gpudoctor.backends import catalogue

    return "".join(f"    {r.key}: {'float' if r.key == 't' else _PY_TYPES[r.value]}\n" for r in catalogue.readings())


def mig_reading_fields() -> str:
    """The reading fields of ``MigDeviceReading`` (gpudoctor/backends/base.py), from MIG_READINGS."""
    from gpudoctor.backends import catalogue

    return "".join(f"    {r.key}: {_PY_TYPES[r.value]}\n" for r in catalogue.mig_readings())


def device_static_fields() -> str:
    """The fields of ``DeviceStatic`` (gpudoctor/backends/base.py), one per static fact, in ``static()`` order."""
    from gpudoctor.backends import catalogue

    return "".join(f"    {f.key}: {_PY_TYPES[f.value]}\n" for f in catalogue.static_facts())


def base_text(old: str) -> str:
    old = between(old, "gpu-sample", gpu_sample_fields(), comment="# {}")
    old = between(old, "device-static", device_static_fields(), comment="# {}")
    return between(old, "mig-reading", mig_reading_fields(), comment="# {}")


def generated() -> dict[str, Callable[[str], str]]:
    """Each generated file (relative to the repository) -> its text made from the present one."""
    from gpudoctor.backends.recording import schema_text
    from gpudoctor.fleet.idle import rule_file

    return {"docs/recording.schema.json": lambda _old: schema_text(),
            "docs/fleet.schema.json": fleet_schema_text,
            "docs/fleet.md": fleet_md_text,
            "deploy/prometheus/gpudoctor-held-idle.rules.yml": lambda _old: rule_file(),
            "gpudoctor/backends/base.py": base_text}


def stale(root: Path = ROOT) -> list[str]:
    """The generated files that are not what the catalogue makes now."""
    out = []
    for path, make in generated().items():
        old = (root / path).read_text(encoding="utf-8")
        if make(old) != old:
            out.append(path)
    return out


def main(argv: list[str] | None = None, root: Path = ROOT) -> int:
    from gpudoctor.core import exitcodes
    from gpudoctor.system.fileio import write_text

    args = sys.argv[1:] if argv is None else argv
    if args not in ([], ["--check"]):
        print("usage: python -m gpudoctor.tools.regenerate [--check]", file=sys.stderr)
        return exitcodes.USAGE
    missing = [path for path in generated() if not (root / path).is_file()]
    if missing:
        print(f"gpudoctor.tools.regenerate: {root / missing[0]} not found: run it in a source checkout", file=sys.stderr)
        return exitcodes.USAGE
    if args == ["--check"]:
        behind = stale(root)
        for path in behind:
            print(f"{path} is not current: run python -m gpudoctor.tools.regenerate", file=sys.stderr)
        return exitcodes.FAIL if behind else exitcodes.OK
    for path, make in generated().items():
        old = (root / path).read_text(encoding="utf-8")
        new = make(old)
        if new != old:
            write_text(root / path, new)
            print(f"rewrote {path}")
    return exitcodes.OK


__all__ = ["between", "fleet_schema_text", "fleet_md_text", "gpu_sample_fields", "mig_reading_fields", "device_static_fields", "generated",
           "stale", "main"]

if __name__ == "__main__":
    sys.exit(main())
