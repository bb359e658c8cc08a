"""Load a recording made by ``gpudoctor record``, within bounds, checked against its schema.

A recording is data from another machine (or from anyone): it is read like hostile
input. :func:`load_recording`

1. reads at most :data:`MAX_RECORDING_BYTES` (a link to ``/dev/zero`` or a FIFO is cut
   off there; ``stat`` is never trusted), bounds the nesting depth and the number of
   objects and arrays before decoding (:mod:`gpudoctor.system.safejson`);
2. checks the whole document against :data:`SCHEMA`, published as
   ``docs/recording.schema.json`` (JSON Schema draft 2020-12): every field the replay
   backend serves has its type, every count and list its bound (devices, samples,
   processes, string lengths). The check is done by the small validator below, which
   knows the few keywords the schema uses; ``jsonschema`` (a development dependency) is
   not needed at run time, and a test proves the two agree;
3. makes every string plain (:func:`gpudoctor.core._text.plain_text`: escape sequences, control
   and bidi characters become visible marks), so no front end can be handed a string from
   a recording that retitles the terminal or moves its cursor;
4. decodes ``{"__na__": reason}`` into :class:`~gpudoctor.backends.na.NA` values.

Every failure is a :class:`RecordingError` with one line that names the file and, for a
document of the wrong shape, the place inside it
(``nvml.samples[3].devices[0]: expected an object``). The commands turn it into exit 2.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path

from gpudoctor.core._num import is_number
from gpudoctor.core._text import plain_strings as _plain_strings
from gpudoctor.system.safejson import MiB, JsonFileError, read_json_file

RECORDING_FORMAT = "gpudoctor-recording"
RECORDING_FORMAT_VERSION = 1

#: Bounds. A 10-minute recording of 8 GPUs at 0.5 s is about 12 MiB.
MAX_RECORDING_BYTES = 64 * MiB
MAX_DEPTH = 32              # the format nests 7 levels deep
MAX_CONTAINERS = 2_000_000  # objects and arrays in the whole file
MAX_DEVICES = 256
MAX_SAMPLES = 100_000
MAX_PROCESSES = 10_000      # per device per sample
MAX_NVLINKS = 64            # per device
MAX_TEXT = 4096             # characters in any recorded string
MAX_NA_REASON = 200


class RecordingError(ValueError):
    """A file that is not a readable gpudoctor recording."""


# --------------------------------------------------------------------------- the schema
def _text(max_length: int = MAX_TEXT) -> dict[str, Any]:
    return {"type": "string", "maxLength": max_length}


def _or_na(schema: dict[str, Any], title: str) -> dict[str, Any]:
    return {"title": title, "anyOf": [schema, {"$ref": "#/$defs/na"}]}


def _array(items: dict[str, Any], max_items: int) -> dict[str, Any]:
    return {"type": "array", "maxItems": max_items, "items": items}


_INT_NA = {"$ref": "#/$defs/integer_or_na"}
_NUM_NA = {"$ref": "#/$defs/number_or_na"}
_TEXT_NA = {"$ref": "#/$defs/text_or_na"}
_OPT_TEXT = {"$ref": "#/$defs/optional_text"}
_OPT_INT = {"$ref": "#/$defs/optional_integer"}
_FLAG = {"$ref": "#/$defs/flag"}

# The static facts' properties: one per static fact of gpudoctor.backends.catalogue, by its recorded
# type (filled by current_schema, as the samples' properties).
_STATIC_PROPERTIES: dict[str, Any] = {}

#: The MIG devices a MIG-mode GPU had in a sample (gpudoctor.backends.base.MigDeviceReading).
MAX_MIG_DEVICES = 64
# Its identity; then a property per reading of the catalogue's MIG_READINGS (filled by
# current_schema, as the samples' properties), then its processes.
_MIG_IDENTITY = {
    "parent": {"type": "integer", "minimum": 0, "maximum": MAX_DEVICES - 1},
    "slot": {"type": "integer", "minimum": 0, "maximum": MAX_MIG_DEVICES - 1},
    "gpu_instance_id": _INT_NA, "compute_instance_id": _INT_NA, "uuid": _TEXT_NA, "name": _TEXT_NA,
    "profile": _TEXT_NA,
}
_MIG_PROPERTIES: dict[str, Any] = {}

# A sample's per-device properties: one per reading of gpudoctor.backends.catalogue, by its
# recorded type. Filled by :func:`schema` (the catalogue is imported there, not here: the
# backends package imports this module).
_SAMPLE_PROPERTIES: dict[str, Any] = {}
_RECORDED_TYPES = {"number": _NUM_NA, "integer": _INT_NA, "flag": _FLAG, "text": _TEXT_NA, "optional_text": _OPT_TEXT,
                   "index": {"type": "integer", "minimum": 0, "maximum": MAX_DEVICES - 1}}

MAX_EVENTS = 10_000  # per device
MAX_EVENT_TIME = 253_402_300_799  # Unix time of 9999-12-31T23:59:59Z, the last second a date can show
_EVENT_FIELDS = {
    "time": {"type": "number", "minimum": 0, "maximum": MAX_EVENT_TIME},
    "kind": {"enum": ["xid", "ecc_double_bit", "ecc_single_bit", "ecc_single_bit_storm", "clock_change",
                      "memory_retirement", "memory_retirement_failure"]},
    "code": {"type": ["integer", "null"]},
    "source": {"enum": ["nvml", "kernel_log", "derived", "replay"]},
}

MAX_PID = 2 ** 31 - 1  # pid_t: no process has a PID past it (Linux's own limit is 2**22)
_PROCESS_FIELDS = {
    "pid": {"type": "integer", "minimum": 0, "maximum": MAX_PID},
    "type": _text(64),
    "gpu_memory_bytes": _OPT_INT, "sm_util_pct": {"$ref": "#/$defs/optional_number"},
    "user": _OPT_TEXT, "command": _OPT_TEXT, "cpu_pct": {"$ref": "#/$defs/optional_number"},
    "host_memory_bytes": _OPT_INT,
}

_NVLINK_FIELDS = {
    "link": {"type": "integer", "minimum": 0}, "active": {"type": "boolean"},
    "version": {"type": ["integer", "null"]}, "version_name": {"type": ["string", "null"], "maxLength": 64},
    "remote_pci_bus_id": {"type": ["string", "null"], "maxLength": 64},
    "remote_type": {"type": ["string", "null"], "maxLength": 64},
}

_TORCH_DEVICE_FIELDS = {
    "index": {"type": "integer", "minimum": 0}, "name": _OPT_TEXT, "compute_capability": _OPT_TEXT,
    "sm_count": _OPT_INT, "total_memory_bytes": _OPT_INT, "l2_cache_bytes": _OPT_INT,
    "uuid": _OPT_TEXT, "pci_bus_id": _OPT_TEXT, "is_integrated": {"type": "boolean"}, "error": _OPT_TEXT,
}

_OPT_BOOL = {"$ref": "#/$defs/optional_boolean"}
_TORCH_FIELDS = {
    "importable": {"type": "boolean"}, "import_error": _OPT_TEXT, "version": _OPT_TEXT,
    "cuda_build": _OPT_TEXT, "hip_build": _OPT_TEXT, "git_version": _OPT_TEXT, "debug_build": _OPT_BOOL,
    "python": _OPT_TEXT,
    "arch_list": {"anyOf": [_array(_text(64), 256), {"$ref": "#/$defs/na"}]},
    "cudnn_available": _OPT_BOOL, "cudnn_version": _OPT_TEXT, "nccl_version": _OPT_TEXT,
    "cudnn_compiled_version": _OPT_TEXT, "cudnn_runtime_version": _OPT_TEXT, "cudnn_library": _OPT_TEXT,
    "cuda_visible_devices": _OPT_TEXT,
    "distributed_available": _OPT_BOOL, "mps_available": _OPT_BOOL, "xpu_available": _OPT_BOOL,
    "cuda_available": _OPT_BOOL, "device_count": _OPT_INT,
    "cuda_warnings": _array(_text(), 64), "cuda_init_error": _OPT_TEXT,
    "devices": _array({"type": "object", "properties": _TORCH_DEVICE_FIELDS}, MAX_DEVICES),
    "torchvision": {"type": "object", "properties": {
        "installed": {"type": "boolean"}, "version": _OPT_TEXT, "ops_ok": _OPT_BOOL, "error": _OPT_TEXT}},
}

_HOST_FIELDS = {
    "hostname": _OPT_TEXT, "os": _OPT_TEXT, "platform": _OPT_TEXT, "machine": _OPT_TEXT, "python": _OPT_TEXT,
    "python_implementation": _OPT_TEXT, "cpu_model": _OPT_TEXT, "cpu_logical": _OPT_INT,
    "cpu_physical": _OPT_INT, "ram_total_bytes": _OPT_INT, "ram_available_bytes": _OPT_INT,
    "load_avg_1m": {"$ref": "#/$defs/optional_number"},
}

_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "https://gpudoctor.invalid/schema/recording.schema.json",
    "title": "gpudoctor recording",
    "description": "A recording made by `gpudoctor record` (or a hand-made fault scenario), replayed with "
                   "--replay. Generated from gpudoctor/backends/recording.py (SCHEMA); a test keeps the two equal. "
                   "A value that NVML could not give is {\"__na__\": reason}.",
    "type": "object",
    "required": ["format", "format_version", "nvml"],
    "properties": {
        "format": {"const": RECORDING_FORMAT},
        "format_version": {"const": RECORDING_FORMAT_VERSION},
        "meta": {"type": "object", "properties": {
            "created": _text(64), "gpudoctor_version": _text(64),
            "device_names": _array(_OPT_TEXT, MAX_DEVICES),
            "driver_version": _OPT_TEXT, "cuda_driver_version": _OPT_TEXT, "host": _text(),
            "hand_made": {"type": "boolean"}, "scenario": _text(), "note": _text(),
            "interval_s": {"type": "number", "minimum": 0}, "duration_s": {"type": "number", "minimum": 0},
            "part": {"type": "integer", "minimum": 1}, "parts": {"type": "integer", "minimum": 1},
        }},
        "nvml": {"type": "object", "properties": {
            "status": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/na"}]},
            "driver_version": _OPT_TEXT, "cuda_driver_version": _OPT_TEXT, "nvml_version": _OPT_TEXT,
            "device_count": _or_na({"type": "integer", "minimum": 0, "maximum": MAX_DEVICES},
                                   f"a device count 0..{MAX_DEVICES} or NA"),
            "static": _array({"type": "object", "required": ["index", "name"], "properties": _STATIC_PROPERTIES},
                             MAX_DEVICES),
            "samples": _array({"type": "object", "properties": {
                "t": {"type": "number"},
                "devices": _array({"type": "object", "properties": _SAMPLE_PROPERTIES}, MAX_DEVICES),
                "processes": _array(_or_na(_array({"type": "object", "required": ["pid"],
                                                   "properties": _PROCESS_FIELDS}, MAX_PROCESSES),
                                           "a list of processes or NA"), MAX_DEVICES),
                "mig": _array({"title": "the MIG devices of a GPU in MIG mode, NA, or null (not in MIG mode)",
                               "anyOf": [{"type": "null"}, {"$ref": "#/$defs/na"}, _array(
                                   {"type": "object", "required": ["slot"], "properties": _MIG_PROPERTIES},
                                   MAX_MIG_DEVICES)]}, MAX_DEVICES),
            }}, MAX_SAMPLES),
            "nvlink": _array(_or_na(_array({"type": "object", "properties": _NVLINK_FIELDS}, MAX_NVLINKS),
                                    "a list of NVLink links or NA"), MAX_DEVICES),
            "events": _array(_array({"type": "object", "required": ["time", "kind"], "properties": _EVENT_FIELDS},
                                    MAX_EVENTS), MAX_DEVICES),
            "kernel_log": {"type": "object", "properties": {"readable": {"type": ["boolean", "null"]},
                                                            "reason": _text()}},
        }},
        "torch": {"title": "torch facts, null or NA", "anyOf": [
            {"type": "null"}, {"$ref": "#/$defs/na"}, {"type": "object", "properties": _TORCH_FIELDS}]},
        "host": {"type": "object", "properties": _HOST_FIELDS},
    },
    "$defs": {
        "na": {"title": "NA", "description": "A value NVML (or torch) could not give, with the reason.",
               "type": "object", "required": ["__na__"], "additionalProperties": False,
               "properties": {"__na__": _text(MAX_NA_REASON)}},
        "integer_or_na": _or_na({"type": "integer"}, "an integer or NA"),
        "number_or_na": _or_na({"type": "number"}, "a number or NA"),
        "text_or_na": _or_na(_text(), "a string or NA"),
        "flag": _or_na({"type": ["boolean", "integer"]}, "true, false, an integer or NA"),
        "optional_text": _or_na({"type": ["string", "null"], "maxLength": MAX_TEXT}, "a string, null or NA"),
        "optional_integer": _or_na({"type": ["integer", "null"]}, "an integer, null or NA"),
        "optional_number": _or_na({"type": ["number", "null"]}, "a number, null or NA"),
        "optional_boolean": _or_na({"type": ["boolean", "null"]}, "true, false, null or NA"),
    },
}


def sample_fields() -> dict[str, Any]:
    """The schema of one device's recorded sample: a property per reading of the catalogue."""
    from gpudoctor.backends.catalogue import readings

    return {r.key: _RECORDED_TYPES[r.value] for r in readings()}


_MIG_PROCESSES = _or_na(_array({"type": "object", "required": ["pid"], "properties": _PROCESS_FIELDS}, MAX_PROCESSES),
                        "a list of processes or NA")


def mig_fields() -> dict[str, Any]:
    """The schema of one recorded MIG device: its identity, a property per MIG reading of the
    catalogue, its processes."""
    from gpudoctor.backends.catalogue import mig_readings

    return {**_MIG_IDENTITY, **{r.key: _RECORDED_TYPES[r.value] for r in mig_readings()}, "processes": _MIG_PROCESSES}


def static_fields() -> dict[str, Any]:
    """The schema of one device's recorded static facts: a property per static fact of the catalogue."""
    from gpudoctor.backends.catalogue import static_facts

    return {f.key: _RECORDED_TYPES[f.value] for f in static_facts()}


def current_schema() -> dict[str, Any]:
    """The recording schema (:data:`SCHEMA`), its samples', static facts' and MIG devices' properties
    as the catalogue has them now."""
    for now, fields in ((_SAMPLE_PROPERTIES, sample_fields()), (_STATIC_PROPERTIES, static_fields()),
                        (_MIG_PROPERTIES, mig_fields())):
        if fields != now or list(fields) != list(now):
            now.clear()
            now.update(fields)
    return _SCHEMA


def __getattr__(name: str) -> Any:
    # SCHEMA and _SAMPLE_FIELDS are read through the catalogue when asked for (PEP 562).
    if name == "SCHEMA":
        return current_schema()
    if name == "_SAMPLE_FIELDS":
        return sample_fields()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def schema_text() -> str:
    """The schema as published in docs/recording.schema.json."""
    return json.dumps(current_schema(), indent=2) + "\n"


# --------------------------------------------------------------------------- the validator
class SchemaError(ValueError):
    """Where in the document, and what was expected there."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path or '(top level)'}: {message}")
        self.path = path


_TYPE_WORDS = {"object": "an object", "array": "an array", "string": "a string", "integer": "an integer",
               "number": "a number", "boolean": "true or false", "null": "null"}


def _is_type(value: object, name: str) -> bool:
    if name == "object":
        return isinstance(value, dict)
    if name == "array":
        return isinstance(value, list)
    if name == "string":
        return isinstance(value, str)
    if name == "boolean":
        return isinstance(value, bool)
    if name == "null":
        return value is None
    if isinstance(value, bool):
        return False
    if name == "integer":  # JSON Schema: 2.0 is an integer
        return isinstance(value, int) or (isinstance(value, float) and math.isfinite(value) and value.is_integer())
    if name == "number":
        return isinstance(value, (int, float))
    raise KeyError(name)


def _key_path(path: str, key: str) -> str:
    if key.isidentifier() and len(key) <= 64:
        return f"{path}.{key}" if path else key
    shown = json.dumps(key[:64] + ("..." if len(key) > 64 else ""))  # escapes control characters
    return f"{path}[{shown}]"


def _expected(schema: dict[str, Any], root: dict[str, Any]) -> str:
    schema = _resolve(schema, root)
    if "title" in schema and "anyOf" in schema:
        return str(schema["title"])
    if "const" in schema:
        return json.dumps(schema["const"])
    kinds = schema.get("type")
    if isinstance(kinds, str):
        return _TYPE_WORDS[kinds]
    if isinstance(kinds, list):
        return " or ".join(_TYPE_WORDS[k] for k in kinds)
    return "a valid value"


def _resolve(schema: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        ref = schema["$ref"]
        if not ref.startswith("#/$defs/"):
            raise KeyError(f"unsupported $ref {ref}")
        schema = root["$defs"][ref[len("#/$defs/"):]]
    return schema


def validate(value: object, schema: dict[str, Any] | None = None, *, path: str = "",
             root: dict[str, Any] | None = None) -> Any:
    """``value`` checked against ``schema`` (default :data:`SCHEMA`), else :class:`SchemaError`.

    Knows the keywords the recording schema uses: ``$ref`` (to ``#/$defs/...``), ``type``,
    ``const``, ``enum``, ``anyOf``, ``properties``, ``required``, ``additionalProperties`` (false),
    ``items``, ``maxItems``, ``maxLength``, ``minimum``, ``maximum``; annotations are ignored.
    Returns the value with integral floats where an integer is expected turned into ints
    (JSON Schema accepts ``2.0`` as an integer; ``range(2.0)`` would not). Recurses only
    as deep as the schema describes the document.
    """
    root = current_schema() if root is None else root
    schema = _resolve(current_schema() if schema is None else schema, root)
    if "anyOf" in schema:
        for option in schema["anyOf"]:
            try:
                return validate(value, option, path=path, root=root)
            except SchemaError as exc:
                if _resolve(option, root).get("type") == _type_of(value) and exc.path != path:
                    raise  # the right kind of value, wrong inside: say where
        raise SchemaError(path, f"expected {_expected(schema, root)}")
    if "const" in schema and not _same(value, schema["const"]):
        raise SchemaError(path, f"expected {json.dumps(schema['const'])}")
    if "enum" in schema and not any(_same(value, option) for option in schema["enum"]):
        raise SchemaError(path, "expected one of " + ", ".join(json.dumps(o) for o in schema["enum"]))
    kinds = schema.get("type")
    if kinds is not None:
        names = [kinds] if isinstance(kinds, str) else kinds
        matched = next((n for n in names if _is_type(value, n)), None)
        if matched is None:
            raise SchemaError(path, f"expected {_expected(schema, root)}")
        if matched == "integer" and isinstance(value, float):
            value = int(value)
    if isinstance(value, str) and "maxLength" in schema and len(value) > schema["maxLength"]:
        raise SchemaError(path, f"a string longer than {schema['maxLength']} characters")
    if is_number(value):
        if "minimum" in schema and value < schema["minimum"]:
            raise SchemaError(path, f"{value} is below the minimum {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            raise SchemaError(path, f"{value} is above the maximum {schema['maximum']}")
    if isinstance(value, list):
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            raise SchemaError(path, f"{len(value)} items, more than the limit of {schema['maxItems']}")
        items = schema.get("items")
        if items is not None:
            value = [validate(v, items, path=f"{path}[{i}]", root=root) for i, v in enumerate(value)]
    if isinstance(value, dict):
        for key in schema.get("required", ()):
            if key not in value:
                raise SchemaError(path, f"missing \"{key}\"")
        properties = schema.get("properties", {})
        if schema.get("additionalProperties") is False:
            extra = next((k for k in value if k not in properties), None)
            if extra is not None:
                raise SchemaError(_key_path(path, extra), "not allowed here")
        if properties:
            value = {k: (validate(v, properties[k], path=_key_path(path, k), root=root) if k in properties else v)
                     for k, v in value.items()}
    return value


def _same(a: object, b: object) -> bool:
    """JSON equality: 1 == 1.0, but true is not 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return type(a) is type(b) and a == b if isinstance(a, (str, list, dict)) else a == b


def _type_of(value: object) -> str:
    for name in ("null", "boolean", "object", "array", "string", "integer", "number"):
        if _is_type(value, name):
            return name
    return "unknown"


def valid_process(entry: object) -> bool:
    """Whether one process entry passes the schema replay applies (what ``record`` keeps)."""
    try:
        validate(entry, {"type": "object", "required": ["pid"], "properties": _PROCESS_FIELDS})
    except SchemaError:
        return False
    return True


def validate_sample(sample: object) -> dict[str, Any]:
    """One recorded sample checked by the schema replay applies; :class:`SchemaError` otherwise."""
    root = current_schema()
    checked: dict[str, Any] = validate(sample, root["properties"]["nvml"]["properties"]["samples"]["items"],
                                       path="sample", root=root)
    return checked


# --------------------------------------------------------------------------- the loader
def load_recording(path: str | Path) -> dict[str, Any]:
    """The recording in ``path``, validated and with NA values decoded; else :class:`RecordingError`."""
    from pathlib import Path  # here, not at import: `report --quick` reads no recording

    from gpudoctor.backends.na import decode  # here: gpudoctor.backends imports this module

    p = Path(path)
    try:
        raw = read_json_file(p, max_bytes=MAX_RECORDING_BYTES, max_depth=MAX_DEPTH,
                             max_containers=MAX_CONTAINERS, allow_nan=False)
    except JsonFileError as exc:
        raise RecordingError(f"{p}: {exc}") from None
    if not isinstance(raw, dict) or raw.get("format") != RECORDING_FORMAT:
        raise RecordingError(f"{p}: not a gpudoctor recording (no \"format\": \"{RECORDING_FORMAT}\")")
    if raw.get("format_version") != RECORDING_FORMAT_VERSION:
        version = raw.get("format_version")
        shown = json.dumps(version)[:40] if isinstance(version, (str, int, float, type(None))) else "?"
        raise RecordingError(f"{p}: recording format version {shown} "
                             f"is not supported (expected {RECORDING_FORMAT_VERSION})")
    nvml = raw.get("nvml")
    if not isinstance(nvml, dict) or not isinstance(nvml.get("samples", []), list):
        raise RecordingError(f"{p}: recording has no valid \"nvml\" section")
    try:
        checked = validate(raw)
    except SchemaError as exc:
        raise RecordingError(f"{p}: not a valid recording: {exc}") from None
    return decode(plain_strings(checked))


NOT_FINITE = "NotFinite"


def finite_for_file(value: object) -> Any:
    """``value`` (a recording already in its JSON form) with every number JSON cannot carry
    (NaN, an infinity: a reading NVML could not have given) replaced by NA with the reason
    ``NotFinite``, so that writing with ``allow_nan=False`` never loses the recording."""
    if isinstance(value, float) and not math.isfinite(value):
        return {"__na__": NOT_FINITE}
    if isinstance(value, dict):
        return {k: finite_for_file(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_for_file(v) for v in value]
    return value


def plain_strings(value: object) -> Any:
    """``value`` with every string in it (keys too) made plain, within the schema's bound."""
    return _plain_strings(value, MAX_TEXT)


__all__ = ["RECORDING_FORMAT", "RECORDING_FORMAT_VERSION", "RecordingError", "SCHEMA", "SchemaError", "current_schema", "valid_process", "validate_sample", "MAX_PID",
           "sample_fields", "load_recording", "plain_strings", "finite_for_file", "NOT_FINITE", "schema_text",
           "validate", "MAX_RECORDING_BYTES", "MAX_DEVICES", "MAX_SAMPLES",
           "MAX_PROCESSES", "MAX_TEXT"]


#: The demo recording shipped in the wheel (``gpudoctor --demo``): a fake 8-GPU node, recorded with
#: ``gpudoctor record`` on the test fake NVML, "fake" in its name and ``meta.fake``.
DEMO_RECORDING = "fake_hgx_8x_h100_demo.json"


def demo_recording_path() -> str:
    """The path of the shipped demo recording (package data under ``gpudoctor/demo/``)."""
    from importlib import resources

    return str(resources.files("gpudoctor") / "demo" / DEMO_RECORDING)
