"""The caching allocator in numbers: the walk's explanation, and the largest-allocation search.

Plain Python: the memory probe feeds it readings from torch and NVML; tests feed it
hand-made walks and fake allocators.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence, TypeVar

from ._timing import GiB, MiB
from ._wording import ALLOCATOR_WALK as WALK


def format_bytes(n: float) -> str:
    n = float(n)
    sign = "-" if n < 0 else ""
    n = abs(n)
    if n >= GiB:
        return f"{sign}{n / GiB:.2f} GiB"
    if n >= MiB:
        return f"{sign}{n / MiB:.0f} MiB"
    return f"{sign}{n / 1024:.0f} KiB"


@dataclass
class WalkStep:
    """One step of the caching-allocator walk: what was done and the three readings."""

    label: str
    allocated: int
    reserved: int
    nvml_used: int | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "WalkStep":
        used = data.get("nvml_used")
        return cls(str(data["label"]), int(data["allocated"]), int(data["reserved"]),
                   int(used) if isinstance(used, (int, float)) else None)


def explain_walk(steps: Sequence[WalkStep | Mapping[str, Any]]) -> dict[str, Any]:
    """Turn the walk's readings into numbers and sentences about the caching allocator.

    Expects steps labelled ``baseline``, ``freed_all`` and ``empty_cache`` (others are
    allowed and ignored here; ``fragment_alloc`` with the step before it shows
    fragmentation). Returns ``{"facts": {...}, "sentences": [...]}``.
    """
    walk = [s if isinstance(s, WalkStep) else WalkStep.from_dict(s) for s in steps]
    by = {s.label: s for s in walk}
    facts: dict[str, Any] = {}
    sentences: list[str] = []
    peak = max(walk, key=lambda s: s.reserved) if walk else None
    if peak is not None:
        facts["peak_reserved"] = peak.reserved
        facts["peak_allocated"] = max(s.allocated for s in walk)
    freed = by.get("freed_all")
    base = by.get("baseline")
    if freed is not None:
        cached = freed.reserved - freed.allocated
        facts["cached_after_free"] = cached
        if cached > 0:
            sentences.append(WALK["cached"].format(reserved=format_bytes(freed.reserved),
                                                   allocated=format_bytes(freed.allocated))
                             + _still_allocated(freed, base, facts))
    # fragmentation: the request did not fit in the cache although enough was free in total
    order = [s.label for s in walk]
    if "fragment_alloc" in by and order.index("fragment_alloc") > 0:
        after = by["fragment_alloc"]
        before = walk[order.index("fragment_alloc") - 1]
        grew = after.reserved - before.reserved
        free_before = before.reserved - before.allocated
        request = after.allocated - before.allocated
        facts["fragment_request"] = request
        facts["fragment_free_in_cache"] = free_before
        facts["fragment_reserved_growth"] = grew
        if grew > 0 and 0 < request <= free_before:
            sentences.append(WALK["fragmented"].format(request=format_bytes(request), grew=format_bytes(grew),
                                                       free=format_bytes(free_before)))
    emptied = by.get("empty_cache")
    if freed is not None and emptied is not None:
        returned = freed.reserved - emptied.reserved
        facts["empty_cache_returned"] = returned
        if freed.nvml_used is not None and emptied.nvml_used is not None:
            facts["empty_cache_nvml_drop"] = freed.nvml_used - emptied.nvml_used
        nvml = (WALK["empty_cache_nvml"].format(drop=format_bytes(facts["empty_cache_nvml_drop"]))
                if "empty_cache_nvml_drop" in facts else "")
        sentence = WALK["empty_cache"].format(returned=format_bytes(returned), nvml=nvml)
        sentences.append(sentence)
    if base is not None and base.nvml_used is not None and emptied is not None and emptied.nvml_used is not None:
        facts["nvml_used_not_returned"] = emptied.nvml_used - base.nvml_used
    return {"facts": facts, "sentences": sentences}


def _still_allocated(freed: WalkStep, base: WalkStep | None, facts: dict[str, Any]) -> str:
    """Why bytes stay allocated after the walk freed its tensors: held before it began.

    cuBLAS keeps a workspace per handle and stream (32 MiB on sm_90 GPUs) in the caching
    allocator for the life of the process, allocated by the first matmul; it is the usual
    reason ``memory_allocated()`` never returns to 0 in a process that multiplied matrices.
    """
    if freed.allocated <= 0:
        return ""
    held_before = base.allocated if base is not None else 0
    facts["allocated_before_walk"] = held_before
    if held_before <= 0:
        return WALK["held_elsewhere"].format(allocated=format_bytes(freed.allocated))
    text = WALK["held_before"].format(allocated=format_bytes(min(held_before, freed.allocated)))
    if freed.allocated > held_before:
        text += WALK["not_freed"].format(allocated=format_bytes(freed.allocated - held_before))
    return text


def expandable_segments_enabled(env: Mapping[str, str | None]) -> bool:
    for name in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
        value = (env.get(name) or "").replace(" ", "").lower()
        if "expandable_segments:true" in value:
            return True
    return False


# --------------------------------------------------------------------------- largest allocation
def looks_like_oom(exc: BaseException) -> bool:
    """torch.OutOfMemoryError (any version), MemoryError, or a CUDA 'out of memory' RuntimeError."""
    if isinstance(exc, MemoryError):
        return True
    if any(cls.__name__ == "OutOfMemoryError" for cls in type(exc).__mro__):
        return True
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc).lower()


@dataclass
class LargestAllocation:
    largest_ok: int
    smallest_failed: int | None
    tries: list[dict[str, Any]] = field(default_factory=list)
    stopped_early: bool = False

    @property
    def oom_count(self) -> int:
        return sum(1 for t in self.tries if not t["ok"])


def _round_down(value: int, step: int) -> int:
    return (value // step) * step


HandleT = TypeVar("HandleT")


def largest_allocation(allocate: Callable[[int], HandleT], release: Callable[[HandleT], None], *, upper: int,
                       granularity: int = 64 * MiB, max_tries: int = 14,
                       is_oom: Callable[[BaseException], bool] = looks_like_oom,
                       after_try: Callable[[], None] | None = None,
                       time_left: Callable[[], float] | None = None) -> LargestAllocation:
    """Bounded binary search for the largest single allocation that succeeds now.

    ``allocate(nbytes)`` returns a handle or raises; ``release(handle)`` frees it at once.
    Only errors for which ``is_oom`` is true count as "too big"; any other error is
    re-raised, after the handle (if any) was released. ``after_try`` runs after every try,
    success or failure (e.g. ``torch.cuda.empty_cache``), so nothing stays cached. At most
    ``max_tries`` allocations; the answer is exact to ``granularity`` bytes.
    """
    if upper < granularity or granularity <= 0:
        raise ValueError("upper must be at least one granularity step")
    result = LargestAllocation(largest_ok=0, smallest_failed=None)

    def attempt(size: int) -> bool:
        handle: HandleT | None = None
        ok = False
        started = time.perf_counter()
        try:
            handle = allocate(size)
            ok = True
        except BaseException as exc:
            if not is_oom(exc):
                raise
        finally:
            try:
                if handle is not None:
                    release(handle)
                    handle = None
            finally:
                if after_try is not None:
                    after_try()
        result.tries.append({"bytes": size, "ok": ok, "seconds": round(time.perf_counter() - started, 6)})
        return ok

    low, high = 0, None  # largest success, smallest failure
    size = _round_down(upper, granularity)
    while len(result.tries) < max_tries:
        if time_left is not None and time_left() <= 0:
            result.stopped_early = True
            break
        if attempt(size):
            low = size
        else:
            high = size
        if high is None:
            break  # the upper bound itself fits
        if high - low <= granularity:
            break
        size = _round_down(low + (high - low) // 2, granularity)
        if size <= low:
            break
    else:
        result.stopped_early = high is not None and high - low > granularity
    result.largest_ok = low
    result.smallest_failed = high
    return result


