"""The "not available" value.

A reading that the driver cannot give (a datacenter GPU has no fan, NVML is missing,
the GPU fell off the bus) is a value, not an exception: ``NA("NotSupported")``. It is
falsy, compares equal to other NA values with the same reason, and serialises as
``{"__na__": reason}`` in recordings.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:  # typing.TypeIs is 3.13; the annotation is never evaluated at run time
    from typing_extensions import TypeIs


class NA:
    __slots__ = ("reason",)

    def __init__(self, reason: str = "Unknown") -> None:
        self.reason = str(reason)

    def __bool__(self) -> bool:
        return False

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NA) and other.reason == self.reason

    def __hash__(self) -> int:
        return hash(("NA", self.reason))

    def __repr__(self) -> str:
        return f"NA({self.reason!r})"

    def __str__(self) -> str:
        return f"N/A ({self.reason})"

    def to_json(self) -> dict[str, str]:
        return {"__na__": self.reason}


_T = TypeVar("_T")
_D = TypeVar("_D")


def is_na(value: object) -> TypeIs[NA]:
    # TypeIs: after `if is_na(x): return`, a checker knows x is the reading, not NA
    return isinstance(value, NA)


def value_or(value: _T | NA, default: _D) -> _T | _D:
    return default if isinstance(value, NA) else value


def encode(obj: object) -> Any:
    """Recursively turn NA values into their JSON form."""
    if isinstance(obj, NA):
        return obj.to_json()
    if isinstance(obj, Mapping):  # dicts and the typed readings (gpudoctor.backends.base)
        return {k: encode(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [encode(v) for v in obj]
    return obj


def decode(obj: object, marker: str = "__na__") -> Any:
    """Inverse of :func:`encode`: every ``{marker: reason}`` becomes ``NA(reason)``."""
    if isinstance(obj, dict):
        if set(obj) == {marker}:
            return NA(obj[marker])
        return {k: decode(v, marker) for k, v in obj.items()}
    if isinstance(obj, list):
        return [decode(v, marker) for v in obj]
    return obj
