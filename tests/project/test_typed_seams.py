"""Typed end to end (issue 39): the backend seam answers typed readings or NA, never ``Any``; the
snapshot every front end draws from carries the catalogue's sample type; and mypy checks every
package of gpudoctor/ and probes/ with one strictness (tests/project/test_lint.py runs it)."""

from __future__ import annotations

import inspect
import sys
import typing
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _protocol_methods() -> dict[str, typing.Any]:
    from gpudoctor.backends.base import GpuBackend

    return {name: member for name, member in vars(GpuBackend).items()
            if inspect.isfunction(member) and not name.startswith("_")}


def test_every_backend_method_returns_a_type_not_any():
    from gpudoctor.backends import base

    untyped = [name for name, method in _protocol_methods().items()
               if typing.get_type_hints(method, vars(base)).get("return", typing.Any) is typing.Any]
    assert not untyped, f"GpuBackend methods returning Any: {untyped}; give the reading's type or NA"


def test_readings_are_their_type_or_na():
    from gpudoctor.backends import base
    from gpudoctor.backends.na import NA

    for name in ("driver_version", "cuda_driver_version", "nvml_version", "device_count", "nvlink",
                 "total_energy_mj", "compute_mode", "utilization_samples", "processes", "mig_devices"):
        returned = typing.get_type_hints(_protocol_methods()[name], vars(base))["return"]
        assert NA in typing.get_args(returned), f"{name} -> {returned}: a failing read is NA with the reason"


def test_the_snapshot_carries_the_sample_type():
    from gpudoctor.sampling import sampler as sampling
    from gpudoctor.backends.base import GpuSample, MigDeviceReading, ProcessReading
    from gpudoctor.backends.na import NA

    hints = typing.get_type_hints(sampling.DeviceSnapshot, vars(sampling))
    assert hints["sample"] is GpuSample
    assert set(typing.get_args(hints["processes"])) == {list[ProcessReading], NA}
    assert set(typing.get_args(hints["mig"])) == {list[MigDeviceReading], NA, type(None)}


def test_mypy_checks_every_package_with_one_strictness():
    tomllib = pytest.importorskip("tomllib" if sys.version_info >= (3, 11) else "tomli")
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"]
    assert sorted(config["files"]) == ["gpudoctor", "probes"]
    assert "exclude" not in config, "no module is left out of the check"
    strict = [o for o in config.get("overrides", []) if o.get("disallow_untyped_defs")]
    covered = {m for o in strict for m in ([o["module"]] if isinstance(o["module"], str) else o["module"])}
    assert {"gpudoctor", "gpudoctor.*", "probes", "probes.*"} <= covered
    assert all(o.get("disallow_incomplete_defs") for o in strict)
    assert config.get("check_untyped_defs") and config.get("strict_equality")


def test_the_exporter_publishes_the_snapshot_itself():
    """The exporter's sampler publishes the sampling core's Snapshot as it is (no repacking into
    dictionaries), with the holders per device beside it, and the collector is typed against it."""
    from support.tui_support import DATA

    from gpudoctor.exporter import collector
    from gpudoctor.exporter.sampler import GpuSampler, Published
    from gpudoctor.backends.base import MigDeviceReading
    from gpudoctor.backends.replay import ReplayBackend
    from gpudoctor.sampling.sampler import DeviceSnapshot, Snapshot

    sampler = GpuSampler(ReplayBackend.from_file(DATA / "handmade_h100_mig_two_slices.json"), 1.0, proc_root=None)
    snap = sampler.sample_once()
    published = sampler.published
    assert isinstance(published, Published) and published.snapshot is snap is sampler.core.latest
    assert isinstance(snap, Snapshot) and snap.devices and all(isinstance(d, DeviceSnapshot) for d in snap.devices)
    assert published.holders == {d.index: None for d in snap.devices}  # processes not read: no holders
    assert all(isinstance(d.mig, list) and all(isinstance(m, MigDeviceReading) for m in d.mig) for d in snap.devices)
    names = {**vars(collector), "DeviceSnapshot": DeviceSnapshot}  # imported there for type checkers only
    hints = {name: typing.get_type_hints(fn, names) for name, fn in
             (("_add_device", collector._add_device), ("_mig_metrics", collector._mig_metrics))}
    assert hints["_add_device"]["dev"] is DeviceSnapshot and hints["_mig_metrics"]["devices"] == list[DeviceSnapshot]
