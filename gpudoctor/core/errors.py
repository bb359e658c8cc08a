"""The library's errors. Front ends catch :class:`GpudoctorError` and print one line."""

from __future__ import annotations

from gpudoctor.core import exitcodes


class GpudoctorError(Exception):
    """Base error; ``exit_code`` is what the CLI exits with."""

    exit_code = exitcodes.INTERNAL


class UsageError(GpudoctorError):
    """Bad arguments or input files (exit 2)."""

    exit_code = exitcodes.USAGE


class DeviceSelectionError(UsageError):
    """``--device N`` names a device that does not exist."""


class WriteFailedError(GpudoctorError):
    """The run finished but an output (a file, stdout) could not be written (exit 7)."""

    exit_code = exitcodes.WRITE_FAILED


# --------------------------------------------------------------------------- exception text
def message_line(exc: BaseException) -> str:
    """The first line of an exception's message, or its type name when it has none."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def first_line(exc: BaseException) -> str:
    """'OSError: [Errno 28] No space left on device': the type and the message's first line."""
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


def first_sentence(exc: BaseException) -> str:
    """'RuntimeError: Found no NVIDIA driver on your system' (first sentence of the first line)."""
    text = str(exc).strip()
    if not text:
        return type(exc).__name__
    sentence = text.splitlines()[0].split(". ")[0].rstrip(".")
    return f"{type(exc).__name__}: {sentence}"


__all__ = ["GpudoctorError", "UsageError", "DeviceSelectionError", "WriteFailedError", "message_line",
           "first_line", "first_sentence"]
