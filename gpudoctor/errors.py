"""The library's errors. Front ends catch :class:`GpudoctorError` and print one line."""

from __future__ import annotations

from gpudoctor import exitcodes


class GpudoctorError(Exception):
    """Base error; ``exit_code`` is what the CLI exits with."""

    exit_code = exitcodes.INTERNAL


class UsageError(GpudoctorError):
    """Bad arguments or input files (exit 2)."""

    exit_code = exitcodes.USAGE


class DeviceSelectionError(UsageError):
    """``--device N`` names a device that does not exist."""
