"""The caching-allocator explanation, allocator advice, and the largest-allocation search.

The walk and memory_stats inputs are hand-made (tests/data/*handmade*: no GPU has been
available to record real ones yet); the search runs against fake allocators that raise
torch's own OutOfMemoryError, as CUDA would.
"""

from __future__ import annotations

import json
import weakref
from pathlib import Path

import pytest

from gpudoctor.probes._allocator import expandable_segments_enabled, explain_walk, largest_allocation, looks_like_oom
from gpudoctor.probes._timing import GiB, MiB

DATA = Path(__file__).parents[1] / "data"


def _walk():
    return json.loads((DATA / "memory_walk_handmade.json").read_text())["steps"]


# --------------------------------------------------------------------------- walk
def test_explain_walk_numbers():
    out = explain_walk(_walk())
    facts = out["facts"]
    assert facts["cached_after_free"] == 1064 * MiB
    assert facts["empty_cache_returned"] == 1064 * MiB
    assert facts["empty_cache_nvml_drop"] == 1064 * MiB
    assert facts["nvml_used_not_returned"] == 0
    assert facts["peak_reserved"] == 1064 * MiB and facts["peak_allocated"] == 1041 * MiB
    assert facts["fragment_request"] == 8 * MiB
    assert facts["fragment_free_in_cache"] == 11 * MiB
    assert facts["fragment_reserved_growth"] == 20 * MiB


def test_explain_walk_sentences_say_what_users_get_wrong():
    text = " ".join(explain_walk(_walk())["sentences"])
    assert "still reserved 1.04 GiB" in text and "nvidia-smi" in text
    assert "not contiguous" in text and "expandable_segments:True" in text
    # empty_cache helps other processes, not the caller
    assert "helps other processes" in text and "does not give the calling process" in text


def test_explain_walk_without_fragmentation_or_nvml():
    steps = [s for s in _walk() if s["label"] != "fragment_alloc"]
    for s in steps:
        s["nvml_used"] = None
    out = explain_walk(steps)
    assert "fragment_request" not in out["facts"]
    assert "empty_cache_nvml_drop" not in out["facts"]
    assert not any("contiguous" in s for s in out["sentences"])
    assert any("gave 1.04 GiB back" in s for s in out["sentences"])


def test_explain_walk_expandable_segments_no_growth():
    # with expandable segments the 8 MiB tensor fits without a new segment: no fragmentation sentence
    steps = _walk()
    for s in steps:
        if s["label"] == "fragment_alloc":
            s["reserved"] = 20 * MiB
    out = explain_walk(steps)
    assert out["facts"]["fragment_reserved_growth"] == 0
    assert not any("contiguous" in s for s in out["sentences"])


@pytest.mark.parametrize("env,expected", [
    ({}, False),
    ({"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}, True),
    ({"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:False"}, False),
    ({"PYTORCH_ALLOC_CONF": "expandable_segments: true"}, True),
    ({"PYTORCH_CUDA_ALLOC_CONF": None}, False),
])
def test_expandable_segments_detection(env, expected):
    assert expandable_segments_enabled(env) is expected


# --------------------------------------------------------------------------- largest allocation
class FakeDevice:
    """An allocator with a fixed capacity that raises torch.OutOfMemoryError beyond it.

    It keeps a cache like torch's: released blocks stay reserved until empty_cache().
    """

    def __init__(self, capacity: int, oom_error=None):
        import torch

        self.capacity = capacity
        self.live: dict[int, int] = {}
        self.cached = 0
        self.calls: list[int] = []
        self.oom_error = oom_error or (lambda n: torch.OutOfMemoryError(
            f"CUDA out of memory. Tried to allocate {n} bytes"))
        self._next = 0

    def allocate(self, nbytes: int) -> int:
        self.calls.append(nbytes)
        if sum(self.live.values()) + self.cached + nbytes > self.capacity:
            raise self.oom_error(nbytes)
        self._next += 1
        self.live[self._next] = nbytes
        return self._next

    def release(self, handle: int) -> None:
        self.cached += self.live.pop(handle)

    def empty_cache(self) -> None:
        self.cached = 0


def test_search_finds_capacity_and_leaves_nothing_allocated():
    dev = FakeDevice(capacity=70 * GiB + 123 * MiB)
    granularity = 64 * MiB
    result = largest_allocation(dev.allocate, dev.release, upper=80 * GiB, granularity=granularity,
                                        after_try=dev.empty_cache)
    assert dev.live == {} and dev.cached == 0
    assert result.largest_ok <= dev.capacity < result.smallest_failed
    assert dev.capacity - result.largest_ok < granularity
    assert result.oom_count >= 1 and len(result.tries) <= 14
    assert result.tries[0] == {"bytes": 80 * GiB, "ok": False, "seconds": result.tries[0]["seconds"]}


def test_search_when_upper_bound_fits():
    dev = FakeDevice(capacity=10 * GiB)
    result = largest_allocation(dev.allocate, dev.release, upper=8 * GiB, after_try=dev.empty_cache)
    assert result.largest_ok == 8 * GiB and result.smallest_failed is None and len(result.tries) == 1
    assert dev.live == {}


def test_search_respects_max_tries():
    dev = FakeDevice(capacity=5 * GiB + 3 * MiB)
    result = largest_allocation(dev.allocate, dev.release, upper=80 * GiB, granularity=2 * MiB,
                                        max_tries=4, after_try=dev.empty_cache)
    assert len(result.tries) == 4 and result.stopped_early
    assert result.largest_ok <= dev.capacity
    assert dev.live == {}


def test_search_stops_at_deadline():
    dev = FakeDevice(capacity=5 * GiB)
    result = largest_allocation(dev.allocate, dev.release, upper=80 * GiB, time_left=lambda: -1.0)
    assert result.tries == [] and result.stopped_early and result.largest_ok == 0


def test_search_without_empty_cache_still_frees_handles():
    # the cache fills up (as torch's would without empty_cache), the handles are still released
    dev = FakeDevice(capacity=16 * GiB)
    largest_allocation(dev.allocate, dev.release, upper=32 * GiB)
    assert dev.live == {}


def test_non_oom_error_is_raised_and_nothing_leaks():
    dev = FakeDevice(capacity=4 * GiB, oom_error=lambda n: RuntimeError("CUDA error: an illegal memory access"))
    with pytest.raises(RuntimeError, match="illegal memory access"):
        largest_allocation(dev.allocate, dev.release, upper=8 * GiB, after_try=dev.empty_cache)
    assert dev.live == {}


def test_release_failure_still_runs_after_try():
    dev = FakeDevice(capacity=4 * GiB)
    emptied = []

    def bad_release(handle):
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        largest_allocation(dev.allocate, bad_release, upper=2 * GiB, after_try=lambda: emptied.append(1))
    assert emptied == [1]


@pytest.mark.parametrize("exc,expected", [
    (MemoryError(), True),
    (RuntimeError("CUDA out of memory. Tried to allocate 20.00 GiB"), True),
    (RuntimeError("CUDA error: device-side assert triggered"), False),
    (ValueError("out of memory"), False),
])
def test_looks_like_oom(exc, expected):
    assert looks_like_oom(exc) is expected


def test_looks_like_oom_real_torch_class():
    import torch

    assert looks_like_oom(torch.OutOfMemoryError("x"))
    assert looks_like_oom(torch.cuda.OutOfMemoryError("x"))


def test_search_largest_wiring_with_fake_torch():
    """probes.memory.search_largest with a torch stand-in whose tensors free themselves when dropped."""
    import torch

    from gpudoctor.probes import memory

    class FakeTensor:
        pass

    class FakeCuda:
        def __init__(self, capacity):
            self.capacity = capacity
            self.live = weakref.WeakKeyDictionary()
            self.cached = 0
            self.sizes = []

        def _in_use(self):
            return sum(self.live.values())

        def memory_allocated(self, device=None):
            return self._in_use()

        def mem_get_info(self, device=None):
            return self.capacity - self._in_use() - self.cached, self.capacity

        def empty_cache(self):
            self.cached = 0

    class FakeTorch:
        uint8 = torch.uint8
        OutOfMemoryError = torch.OutOfMemoryError

        def __init__(self, capacity):
            self.cuda = FakeCuda(capacity)

        def empty(self, n, dtype=None, device=None):
            self.cuda.sizes.append(n)
            if self.cuda._in_use() + self.cuda.cached + n > self.cuda.capacity - 300 * MiB:
                raise torch.OutOfMemoryError("CUDA out of memory")
            t = FakeTensor()
            self.cuda.live[t] = n
            return t

    fake = FakeTorch(capacity=24 * GiB)
    search, leftover, free = memory.search_largest(fake, "cuda:0", time_left=lambda: 10.0)
    assert leftover == 0 and fake.cuda.memory_allocated() == 0
    assert free == 24 * GiB
    assert 24 * GiB - 300 * MiB - search.largest_ok <= free // 256
    assert search.oom_count >= 1


def test_explain_walk_names_the_cublas_workspace_held_before_the_walk():
    # a process that ran a matmul keeps cuBLAS's workspace (32 MiB on sm_90) allocated for life
    steps = _walk()
    for s in steps:
        s["allocated"] += 32 * MiB
        s["reserved"] += 32 * MiB
    out = explain_walk(steps)
    text = " ".join(out["sentences"])
    assert out["facts"]["allocated_before_walk"] == 32 * MiB
    assert "The 32 MiB still allocated was allocated before the walk began" in text
    assert "cuBLAS keeps a workspace per handle and stream" in text
    assert "not freed by the walk" not in text
    # more left than was there before: said apart, not blamed on cuBLAS
    for s in steps:
        if s["label"] == "freed_all":
            s["allocated"] += 8 * MiB
    assert "A further 8 MiB was not freed by the walk" in " ".join(explain_walk(steps)["sentences"])
