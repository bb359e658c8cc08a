"""The exporter's event watcher across an NVML restart (a driver reload: fake NVML's mode
"unloaded"): the event set is freed before NVML is shut down and registered again after, so an
Xid delivered after the restart is still counted."""

from __future__ import annotations

import contextlib
from typing import Iterator

from gpudoctor.backends import NvmlBackend, NvmlGate
from gpudoctor.backends.events import EVENT_XID_CRITICAL, EventWatcher
from gpudoctor.sampling.sampler import Sampler
from support.nvml_fake import nvml_error
from test_events import EventNvml, _no_log, _wait_for


class ReloadingNvml(EventNvml):
    """Event functions that fail like the rest of the library while the driver is unloaded,
    and a log of the set's lifetime against NVML's shutdowns."""

    def __init__(self, supported):
        super().__init__(supported)
        self.log: list[str] = []

    def nvmlEventSetCreate(self):
        self._live()
        self.log.append("create")
        return f"set{self.session}"

    def nvmlEventSetWait_v2(self, event_set, timeout_ms):
        self._live()
        if event_set != f"set{self.session}":  # a set from before the re-init
            raise nvml_error("Uninitialized")()
        return super().nvmlEventSetWait_v2(event_set, timeout_ms)

    def nvmlEventSetFree(self, event_set):
        self.log.append("free")
        super().nvmlEventSetFree(event_set)

    def nvmlShutdown(self):
        self.log.append("shutdown")
        super().nvmlShutdown()


@contextlib.contextmanager
def _watched(nvml, *, watcher_first: bool = False) -> Iterator[tuple[Sampler, EventWatcher]]:
    """A recovering sampler and an event watcher on ``nvml``, the watcher let go of NVML before each
    restart; both started (in that order, or the watcher first), and stopped on leaving."""
    gate = NvmlGate(nvml)
    backend = NvmlBackend(gate)
    sampler = Sampler(backend, with_processes=False, reads="fast", interval_s=0.05, recover=True,
                      retry_first_s=0.05, retry_max_s=0.2)
    watcher = EventWatcher(gate, 1, wait_ms=50, kernel_log=_no_log, retry_first_s=0.05, retry_max_s=0.2)
    sampler.before_restart.append(watcher.suspend)
    for part in ((watcher, sampler) if watcher_first else (sampler, watcher)):
        part.start()
    try:
        yield sampler, watcher
    finally:
        sampler.stop()
        assert watcher.stop()


def test_xids_after_a_driver_reload_are_still_counted():
    nvml = ReloadingNvml({0: EVENT_XID_CRITICAL})
    with _watched(nvml) as (sampler, watcher):
        nvml.send(0, EVENT_XID_CRITICAL, 79)
        assert _wait_for(lambda: watcher.snapshot(0).xid_count == 1)
        nvml.mode = "unloaded"  # the driver is reloaded: every call answers Uninitialized
        assert _wait_for(lambda: sampler.reinits >= 1 and nvml.mode == "ok" and watcher.reregistrations >= 1)
        nvml.send(0, EVENT_XID_CRITICAL, 48)  # from a device of the new NVML session
        assert _wait_for(lambda: watcher.snapshot(0).xid_count == 2), watcher.status
        assert watcher.snapshot(0).last_xid().code == 48
        assert watcher.status is None


def test_the_event_set_is_freed_before_the_restart_shuts_nvml_down():
    nvml = ReloadingNvml({0: EVENT_XID_CRITICAL})
    with _watched(nvml, watcher_first=True):
        assert _wait_for(lambda: nvml.waits.is_set())
        nvml.lost.add(0)  # every GPU lost (a reset): the sampler restarts NVML
        assert _wait_for(lambda: "shutdown" in nvml.log)
        assert nvml.log.index("free") < nvml.log.index("shutdown")
