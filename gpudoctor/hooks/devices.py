"""Which device each parameter and tensor lives on, said plainly.

``check_devices(model, *tensors)`` raises :class:`DeviceMismatchError` naming what is
where before torch raises "Expected all tensors to be on the same device" deep inside a
layer; :func:`explain_device_error` rewrites that torch error when it happens anyway.
Works on anything with ``.device`` (duck typing), so this module never imports torch.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Iterable, Iterator

from gpudoctor.core.errors import GpudoctorError

if TYPE_CHECKING:
    import torch


class DeviceMismatchError(GpudoctorError, RuntimeError):
    """Tensors that one computation needs live on different devices.

    A RuntimeError too, so code that catches torch's own error still catches this one.
    """

    def __init__(self, message: str, placement: dict[str, list[str]] | None = None) -> None:
        super().__init__(message)
        self.placement = placement or {}


def _tensors_in(value: object, name: str) -> Iterator[tuple[str, torch.Tensor]]:
    if hasattr(value, "device") and hasattr(value, "shape"):
        yield name, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _tensors_in(item, f"{name}[{key!r}]")
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _tensors_in(item, f"{name}[{i}]")


def _describe(name: str, tensor: torch.Tensor) -> str:
    shape = "x".join(str(int(d)) for d in tuple(tensor.shape)) or "scalar"
    return f"{name} ({shape})"


def placement_of(model: torch.nn.Module | torch.Tensor | None = None, *tensors: object) -> dict[str, list[str]]:
    """``{device: [what lives there]}`` for a module's parameters/buffers and the tensors given."""
    where: dict[str, list[str]] = {}
    if model is not None:
        if hasattr(model, "named_parameters"):
            for name, param in model.named_parameters():
                where.setdefault(str(param.device), []).append(f"parameter {name}")
            for name, buf in getattr(model, "named_buffers", lambda: [])():
                where.setdefault(str(buf.device), []).append(f"buffer {name}")
        else:
            tensors = (model, *tensors)
    for i, value in enumerate(tensors):
        for name, tensor in _tensors_in(value, f"input {i}"):
            where.setdefault(str(tensor.device), []).append(_describe(name, tensor))
    return where


def _listing(items: list[str], limit: int = 4) -> str:
    shown = ", ".join(items[:limit])
    if len(items) > limit:
        shown += f" and {len(items) - limit} more"
    return shown


def placement_words(where: dict[str, list[str]]) -> str:
    return "; ".join(f"on {device}: {_listing(items)}" for device, items in where.items())


def check_devices(model: torch.nn.Module | torch.Tensor | None = None, *tensors: object) -> str | None:
    """Raise :class:`DeviceMismatchError` unless the model and the tensors share one device.

    ``tensors`` may be tensors or (nested) lists, tuples and dicts of them (a batch).
    Returns the common device as text (``"cuda:0"``), or None when there was nothing to check.
    """
    where = placement_of(model, *tensors)
    if len(where) <= 1:
        return next(iter(where), None)
    model_devices = [d for d, items in where.items()
                     if any(i.startswith(("parameter ", "buffer ")) for i in items)]
    if len(model_devices) == 1:
        target = model_devices[0]
        fix = (f"Move the inputs to the model's device: `x = x.to({target!r})` for each tensor "
               f"of the batch (or move the model with `model.to(device)` before the loop).")
    elif len(model_devices) > 1:
        fix = ("The model itself is split across devices: call `model.to(device)` after building "
               "it, and register extra tensors as buffers (`self.register_buffer`) so they move with it.")
    else:
        fix = "Move every tensor to one device with `.to(device)` before combining them."
    raise DeviceMismatchError(
        f"Model and tensors are on {len(where)} different devices: {placement_words(where)}. {fix}",
        where)


# torch's wordings, old and new:
#   Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!
#     (when checking argument for argument mat1 in method wrapper_CUDA_addmm)
#   Expected all tensors to be on the same device, but got mat1 is on cpu, different from other
#     tensors on cuda:0 (when checking argument in method wrapper_CUDA_addmm)
#   Tensor on device meta is not on the expected device cpu!
_DEVICE = r"((?:cuda|cpu|mps|meta|xpu|hpu|privateuseone|npu)(?::\d+)?)"
_TWO_DEVICES = re.compile(r"found at least two devices, " + _DEVICE + r" and " + _DEVICE)
_GOT_ON = re.compile(r"but got (\w+) is on " + _DEVICE + r", different from other tensors on " + _DEVICE)
_EXPECTED = re.compile(r"Tensor on device " + _DEVICE + r" is not on the expected device " + _DEVICE)
_ARGUMENT = re.compile(r"for argument (\w+)")
_METHOD = re.compile(r"in method (?:wrapper_\w*?_)?(\w+)\)")


def explain_device_error(exc: BaseException, model: torch.nn.Module | None = None,
                         tensors: Iterable[object] = ()) -> str | None:
    """Plain words for torch's "tensors on different devices" error, or None for other errors."""
    text = str(exc)
    argument = method = None
    m = _GOT_ON.search(text)
    if m:
        argument, devices = m.group(1), (m.group(2), m.group(3))
    else:
        m = _TWO_DEVICES.search(text) or _EXPECTED.search(text)
        if not m:
            return None
        devices = (m.group(1), m.group(2))
        a = _ARGUMENT.search(text)
        argument = a.group(1) if a else None
    meth = _METHOD.search(text)
    method = meth.group(1) if meth else None
    what = f"argument `{argument}` of `{method}`" if argument and method else (
        f"argument `{argument}`" if argument else (f"`{method}`" if method else "an operation"))
    words = (f"Tensors on different devices met in one operation ({what}): {devices[0]} and "
             f"{devices[1]}. Usually the model was moved with `.to(device)` but the batch was not, "
             f"or a tensor made inside `forward` (e.g. `torch.zeros(...)` without `device=`) stayed on the CPU.")
    if model is not None or tensors:
        try:
            where = placement_of(model, *tensors)
        except Exception:
            where = {}
        if where:
            words += f" Where things are now: {placement_words(where)}."
    words += f" (torch said: {text.splitlines()[0] if text else type(exc).__name__})"
    return words
