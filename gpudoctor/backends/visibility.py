"""Which NVML devices a CUDA program (torch) will see, from CUDA_VISIBLE_DEVICES.

NVML ignores CUDA_VISIBLE_DEVICES; CUDA honours it. To say "torch device 0 is NVML
device 3" without starting CUDA we apply CUDA's rules: a comma-separated list of
indices or UUID prefixes (``GPU-...``) or MIG device UUIDs (``MIG-...``, resolved to their
parent GPU where NVML enumerates the MIG devices); parsing stops at the first entry that is not a
valid, unused device; an empty value hides every device.
"""

from __future__ import annotations

import os
import re
from types import ModuleType
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Sequence

from .na import NA, is_na
from .nvml import normalise_bus_id

if TYPE_CHECKING:
    from .base import GpuBackend


# An index as CUDA reads one: ASCII digits ("²" and "٣" are digits to str.isdigit, not indices).
_INDEX = re.compile(r"-?[0-9]+", re.ASCII)


def _mig_match(token: str, nvml_uuids: list[Any], mig_slices: list[tuple[Any, int, Any, Any]]) -> list[tuple[int, Any]]:
    """The MIG devices a ``MIG-...`` entry names, as (parent NVML index, MIG UUID): by the
    UUID or a prefix of it, or the older ``MIG-GPU-<gpu uuid>/<gi>/<ci>`` form."""
    lower = token.lower()
    if lower.startswith("mig-gpu-") and lower.count("/") == 2:
        gpu_uuid, gi, ci = token[4:].split("/")
        parents = [i for i, u in enumerate(nvml_uuids) if isinstance(u, str) and u.lower() == gpu_uuid.lower()]
        return [(parent, uuid) for uuid, parent, g, c in mig_slices
                if parent in parents and str(g) == gi and str(c) == ci]
    return [(parent, uuid) for uuid, parent, _, _ in mig_slices
            if isinstance(uuid, str) and uuid.lower().startswith(lower)]


def _entries(value: str, nvml_uuids: list[Any],
             mig_slices: list[tuple[Any, int, Any, Any]] | None) -> Iterator[tuple[str, int, Any]]:
    """The entries of a CUDA_VISIBLE_DEVICES value as CUDA reads the list, up to where it stops (an
    empty, invalid or repeated entry): ("gpu", NVML index, None) or ("mig", parent NVML index, MIG
    UUID); ("mig?", -1, None) for a ``MIG-...`` entry NVML cannot resolve (``mig_slices`` None)."""
    count = len(nvml_uuids)
    seen: set[Any] = set()
    for raw in value.split(","):
        token = raw.strip()
        if not token:
            return
        if token.startswith("MIG-"):
            if mig_slices is None:
                yield "mig?", -1, None
                return
            slices = _mig_match(token, nvml_uuids, mig_slices)
            if len(slices) != 1:
                return
            key = ("mig", slices[0][0], str(slices[0][1]))  # a UUID NVML could not read is an NA
            if key in seen:
                return
            seen.add(key)
            yield "mig", slices[0][0], slices[0][1]
            continue
        index: int | None = None
        if token.startswith("GPU-") or not _INDEX.fullmatch(token):
            prefix = token if token.startswith("GPU-") else "GPU-" + token
            matches = [i for i, u in enumerate(nvml_uuids)
                       if isinstance(u, str) and u.lower().startswith(prefix.lower())]
            if len(matches) != 1:
                return
            index = matches[0]
        else:
            if len(token) > 12:  # 5,000 digits name no device (and int() refuses them)
                return
            index = int(token)
            if index < 0 or index >= count:
                return
        if index in seen:
            return
        seen.add(index)
        yield "gpu", index, None


def parse_visible(value: str | None, nvml_uuids: list[Any],
                  mig_slices: list[tuple[Any, int, Any, Any]] | None = None) -> list[int] | NA:
    """NVML indices visible to CUDA, in CUDA's order (before CUDA_DEVICE_ORDER sorting).

    A ``MIG-...`` entry names a MIG device: it resolves to its parent GPU's index through
    ``mig_slices`` ((MIG UUID, parent index, GPU instance id, compute instance id) of every MIG
    device NVML enumerates); without them it is NA("MigInstancesSelected"), as NVML cannot say.
    A CUDA process enumerates one MIG device at most (NVIDIA's MIG user guide, CUDA device
    enumeration): the list ends after the first one."""
    if value is None:
        return list(range(len(nvml_uuids)))
    chosen: list[int] = []
    for kind, index, _ in _entries(value, nvml_uuids, mig_slices):
        if kind == "mig?":
            return NA("MigInstancesSelected")
        if kind == "mig":
            if index not in chosen:
                chosen.append(index)
            break
        chosen.append(index)
    return chosen


def visible_mig_count(gpu: GpuBackend, visible: list[int], mig_modes: Mapping[int, object],
                      env: Mapping[str, str] | None = None) -> int | NA:
    """How many MIG devices NVML shows as visible to this process: every MIG device of the GPUs in
    MIG mode CUDA_VISIBLE_DEVICES leaves (``visible``, ``mig_modes`` as for :func:`cuda_enumerated`),
    or, where the variable lists MIG devices, each one it names before CUDA stops reading it. Before
    the rule that a CUDA process enumerates one of them. NA("NoMigGpu") without a GPU in MIG mode
    (nothing is read), NA("MigNotEnumerated") when NVML lists no MIG device."""
    if not any(mig_modes.get(n) == 1 for n in visible):
        return NA("NoMigGpu")
    env = os.environ if env is None else env
    count = gpu.device_count()
    if is_na(count):
        return count
    table = mig_slices(gpu, count)
    if table is None:
        return NA("MigNotEnumerated")
    value = env.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return len(table)
    uuids = [gpu.identity(i).uuid for i in range(count)]
    named: set[tuple[int, str]] = set()
    for kind, index, uuid in _entries(value, uuids, table):
        named.update([(index, str(uuid))] if kind == "mig" else [(m[1], str(m[0])) for m in table if m[1] == index])
    return len(named)


def cuda_enumerated(visible: list[int], mig_modes: Mapping[int, object]) -> int:
    """How many devices a CUDA process enumerates of the NVML GPUs ``visible`` (``mig_modes``: NVML
    index -> its MIG mode, 1 when on). Without a GPU in MIG mode, each GPU is one device; with one, the
    process gets one device in all: a CUDA process enumerates one MIG device at most (the rule
    :func:`parse_visible` applies to a list of MIG UUIDs), and none of the GPUs out of MIG mode once it
    enumerates a MIG device (NVIDIA's MIG user guide, CUDA device enumeration)."""
    return 1 if any(mig_modes.get(n) == 1 for n in visible) else len(visible)


def visible_nvml_indices(gpu: GpuBackend, env: Mapping[str, str] | None = None) -> list[int] | NA:
    """NVML indices torch will see, or NA when NVML cannot say."""
    env = os.environ if env is None else env
    count = gpu.device_count()
    if is_na(count):
        return count
    value = env.get("CUDA_VISIBLE_DEVICES")
    uuids = [gpu.identity(i).uuid for i in range(count)] if value else [None] * count
    return parse_visible(value, uuids, mig_slices(gpu, count) if value and "MIG-" in value else None)


def mig_slices(gpu: GpuBackend, count: int) -> list[tuple[Any, int, Any, Any]] | None:
    """(MIG UUID, parent NVML index, GPU instance id, compute instance id) of every MIG device NVML
    enumerates, or None when it enumerates none (no GPU in MIG mode it can read)."""
    found: list[tuple[Any, int, Any, Any]] = []
    for index in range(count):
        slices = gpu.mig_devices(index, readings=False)  # names only: no memory, process or GPM reads
        if not is_na(slices):
            found.extend((m.uuid, index, m.gpu_instance_id, m.compute_instance_id) for m in slices)
    return found or None


def visible_mig_devices(gpu: GpuBackend, env: Mapping[str, str] | None = None) -> list[Any] | NA:
    """The MIG device CUDA_VISIBLE_DEVICES selects (a list of one MigDeviceReading: a CUDA process
    enumerates one MIG device at most, the first the list names), or NA: NA("NoMigSelected") when it
    names none, NA("MigInstancesSelected") when NVML cannot enumerate them."""
    env = os.environ if env is None else env
    value = env.get("CUDA_VISIBLE_DEVICES") or ""
    if "MIG-" not in value:
        return NA("NoMigSelected")
    count = gpu.device_count()
    if is_na(count):
        return count
    by_uuid = {}
    for index in range(count):
        slices = gpu.mig_devices(index)
        if not is_na(slices):
            by_uuid.update({(m.uuid, index): m for m in slices})
    if not by_uuid:
        return NA("MigInstancesSelected")
    uuids = [gpu.identity(i).uuid for i in range(count)]
    table = [(m.uuid, index, m.gpu_instance_id, m.compute_instance_id) for (_, index), m in by_uuid.items()]
    out = []
    for raw in value.split(","):
        token = raw.strip()
        if not token.startswith("MIG-"):
            continue
        matches = _mig_match(token, uuids, table)
        found = by_uuid.get((matches[0][1], matches[0][0])) if len(matches) == 1 else None
        if found is not None:
            out.append(found)
        break  # CUDA takes the first MIG device the list names, and no other
    return out


def order_caveat(gpu: GpuBackend, visible: list[int], env: Mapping[str, str] | None = None) -> str:
    """Why CUDA's numbering may not follow CUDA_VISIBLE_DEVICES' order of NVML devices: CUDA numbers
    the fastest device first unless CUDA_DEVICE_ORDER=PCI_BUS_ID, so on a node with different GPU
    models torch's index cannot be told from NVML alone. "" when the order is certain (the PCI bus
    order asked for, or one GPU model)."""
    env = os.environ if env is None else env
    if env.get("CUDA_DEVICE_ORDER", "FASTEST_FIRST") == "PCI_BUS_ID" or len(visible) < 2:
        return ""
    models = {(gpu.static(i).get("name"), gpu.static(i).get("compute_capability")) for i in visible}
    if len(models) < 2:
        return ""
    return ("different GPU models and CUDA_DEVICE_ORDER is not PCI_BUS_ID: CUDA numbers the fastest GPU "
            "first, so torch's index may not be nvidia-smi's")


def match_torch_to_nvml(torch_devices: list[dict[str, Any]], nvml_static: Sequence[Mapping[str, Any]]) -> dict[int, int | None]:
    """torch index -> NVML index, by PCI bus id, else by UUID (None where nothing matches).

    ``torch_devices``: dicts with ``index`` and ``pci_bus_id`` (and optionally ``uuid``), as
    from :func:`gpudoctor.backends.torch_cuda.device_properties`; ``nvml_static``: the
    backend's ``static(i)`` dicts.
    """
    by_bus = {normalise_bus_id(s.get("pci_bus_id")): s["index"] for s in nvml_static
              if isinstance(s.get("pci_bus_id"), str)}
    by_uuid = {s.get("uuid"): s["index"] for s in nvml_static if isinstance(s.get("uuid"), str)}
    mapping: dict[int, int | None] = {}
    for dev in torch_devices:
        bus = dev.get("pci_bus_id")
        nvml_index = by_bus.get(normalise_bus_id(bus)) if bus else None
        if nvml_index is None and dev.get("uuid"):
            nvml_index = by_uuid.get(dev["uuid"])
        mapping[dev["index"]] = nvml_index
    return mapping


def nvml_index_for(backend: GpuBackend, cuda_index: int, pci_bus_id: str | None = None,
                   uuid: str | None = None) -> int | None:
    """The one torch-to-NVML resolver: the NVML index of torch's CUDA device ``cuda_index``.

    Matched by PCI bus id, else by UUID (:func:`match_torch_to_nvml`), else by the order
    CUDA_VISIBLE_DEVICES gives (:func:`visible_nvml_indices`); None when NVML cannot say.
    """
    if backend.status() is not None:
        return None
    count = backend.device_count()
    if is_na(count) or not isinstance(count, int):
        return None
    if pci_bus_id or uuid:
        static = [dict(backend.identity(i).to_dict(), index=i) for i in range(count)]
        found = match_torch_to_nvml([{"index": cuda_index, "pci_bus_id": pci_bus_id, "uuid": uuid}],
                                    static).get(cuda_index)
        if found is not None:
            return found
    visible = visible_nvml_indices(backend)
    if is_na(visible) or cuda_index >= len(visible):
        return None
    return visible[cuda_index]


def torch_device_ids(cuda_index: int, torch: ModuleType | None = None) -> tuple[str | None, str | None]:
    """(PCI bus id, UUID) of torch's CUDA device, or (None, None) when torch cannot say.

    Imports torch only when ``torch`` is not given (callers in a training process have it).
    """
    from .torch_cuda import device_properties

    try:
        if torch is None:
            import torch as imported  # the parameter, imported when not given

            torch = imported
        props = device_properties(torch, cuda_index)
    except Exception:  # noqa: BLE001 - no ids: the resolver falls back to CUDA_VISIBLE_DEVICES order
        return None, None
    return props.get("pci_bus_id"), props.get("uuid")
