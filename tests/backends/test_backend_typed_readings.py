"""The backend seam's small answers are typed records (issue 39, typed end to end): a device's
identity and the peer-to-peer path between two GPUs, like the memory and process readings, are
frozen records whose every field is the reading or NA, and read-only mappings of their fields, so
the JSON written from them is what the dictionaries gave before."""

from __future__ import annotations

import json
import typing
from types import SimpleNamespace
from typing import Any

from gpudoctor.backends import base
from gpudoctor.backends.base import DeviceIdentity, GpuBackend, P2PReading
from gpudoctor.backends.na import NA, encode, is_na
from gpudoctor.backends.nvml import NvmlBackend, NvmlGate
from gpudoctor.backends.replay import ReplayBackend
from support.nvml_fake import FakePynvml


def _returns() -> dict[str, Any]:
    return {name: typing.get_type_hints(member, vars(base)).get("return")
            for name, member in vars(GpuBackend).items() if callable(member) and not name.startswith("_")}


def test_no_protocol_method_answers_an_untyped_dictionary():
    # static() answers DeviceStatic, generated from the catalogue
    loose = [name for name, returned in _returns().items() if returned == dict[str, Any]]
    assert not loose, f"GpuBackend methods answering dict[str, Any]: {loose}; give them a record or TypedDict"
    assert _returns()["identity"] is DeviceIdentity and _returns()["p2p"] is P2PReading


def test_every_field_of_identity_and_p2p_may_be_na():
    for record in (DeviceIdentity, P2PReading):
        hints = typing.get_type_hints(record, vars(base))
        assert hints, record
        assert all(NA in typing.get_args(kind) for kind in hints.values()), (record.__name__, hints)


def _live() -> NvmlBackend:
    fake = FakePynvml(count=2)
    for index, device in enumerate(fake.devices):
        device["nvmlDeviceGetPciInfo"] = SimpleNamespace(busId=f"00000000:{index + 1:02X}:00.0".encode())
        device["nvmlDeviceGetUUID"] = f"GPU-{index}"
    return NvmlBackend(NvmlGate(fake))


def test_both_backends_answer_the_records(data_dir):
    replay = ReplayBackend.from_file(data_dir / "handmade_two_gpu_training_standin.json")
    for backend in (_live(), replay):
        ident = backend.identity(0)
        assert isinstance(ident, DeviceIdentity) and isinstance(ident.uuid, str) and ident["uuid"] == ident.uuid
        path = backend.p2p(0, 1)
        assert isinstance(path, P2PReading) and list(path) == ["topology", "read", "write", "nvlink", "atomics"]
    # a recording holds no path; a driver without the functions answers NA, never raises
    assert all(v == NA("NotRecorded") for v in replay.p2p(0, 1).values())
    assert all(is_na(v) for v in _live().p2p(0, 1).values())
    assert replay.p2p(0, 2) == P2PReading.unknown(NA("InvalidArgument"))


def test_the_records_write_the_json_the_dictionaries_wrote():
    ident = _live().identity(1)
    assert json.dumps(encode(ident)) == json.dumps(encode({"pci_bus_id": "0000:02:00.0", "uuid": "GPU-1"}))
    path = P2PReading(topology=20, read=0, write=0, nvlink=NA("NotSupported"), atomics=5)
    as_dict = {"topology": 20, "read": 0, "write": 0, "nvlink": NA("NotSupported"), "atomics": 5}
    assert path == as_dict and json.dumps(encode(path)) == json.dumps(encode(as_dict))
    # the identity is kept (two NVML calls per device until a restart) and cannot be changed by a caller
    live = _live()
    assert live.identity(0) is live.identity(0)
