"""The words of the probes' own finding codes, once per code.

Registered in gpudoctor.core.findings' index (``_TABLES``), so :func:`gpudoctor.core.findings.finding` builds
these codes as it builds its own: ``findings.finding("mig_enabled", device=0, gpu=0, name="H100")``.
Each entry is a :class:`gpudoctor.core.findings.Wording`: the code's status and its summary, why and fix
as ``str.format`` templates filled from the probe's figures. A code worded in more than one way has
an entry per way, keyed ``code:way`` (the finding's code is the part before the colon). Codes
several front ends show (health, fleet, the TUI) are worded in gpudoctor/core/findings.py instead; a key
lives in one table only (tests/core/test_wording_tables.py).

Standard library and gpudoctor's foundation only: the table is data.
"""

from __future__ import annotations

from gpudoctor.core.findings import Wording
from gpudoctor.core.model import Status

_XID_DMESG = "Check `dmesg` for Xid errors; the node needs a GPU reset or reboot, and a hardware check if it repeats."
_SEES_NONE = "NVML sees {visible} GPU(s) but torch sees none: "
_SEES_NONE_WHY = ("torch.cuda.is_available() is False, so code that falls back to the CPU trains there silently and "
                  "code that asks for 'cuda' fails.")
_SEES_NONE_CHECK = ("Check CUDA_VISIBLE_DEVICES in the training environment (an empty or invalid list hides every GPU), "
                    "reboot after a driver upgrade (driver and library mismatch), and start containers with the GPUs "
                    "(`docker run --gpus all`).")
_CUDA_BUILD_FIX = ("Install a CUDA build: `pip install --force-reinstall torch torchvision` from PyPI (its Linux "
                   "wheels carry CUDA) or from https://download.pytorch.org/whl/cu126 etc.")
_CUDA_NOT_STARTED = "torch.cuda.is_available() is False, so training silently runs on the CPU."
_CUDNN_SUMMARY = "torch {version} was built against cuDNN {compiled} but loaded cuDNN {loaded}{where}{ld_path}."
_CUDNN_WHY = ("torch refuses a cuDNN of another major version or an older minor than it was built with: "
              "torch.backends.cudnn.version() and the first convolution or RNN raise 'cuDNN version "
              "incompatibility'. The usual cause is a system or toolkit libcudnn on LD_LIBRARY_PATH found before "
              "the copy torch ships with.")
_CUDNN_OTHER = "; or put cuDNN {compiled} or a newer {major}.x there."
#: Fragments of the cudnn_mismatch summary and fix (LD_LIBRARY_PATH's part of the story).
CUDNN_FROM = " from {library}"
CUDNN_LD_PATH = "; LD_LIBRARY_PATH={ld_path}"
_JIT_ONCE = (" Meanwhile, `export CUDA_CACHE_MAXSIZE=4294967296` (and keep ~/.nv/ComputeCache between runs) so the "
             "JIT runs once.")
_REBUILD = ("rebuild it for this GPU: `TORCH_CUDA_ARCH_LIST=\"{cc}\" pip install --no-build-isolation --no-cache-dir "
            "--force-reinstall --no-deps --no-binary {package} {package}` (or set TORCH_CUDA_ARCH_LIST=\"{cc}\" "
            "before `pip install .` / `python setup.py install` in its checkout; the CUDA toolkit used must know "
            "this GPU; a few packages read their own variable, e.g. flash-attn's FLASH_ATTN_CUDA_ARCHS={cc_digits})")
#: nvmlDeviceGetTopologyCommonAncestor's levels as ``nvidia-smi topo -m`` names them.
TOPOLOGY: dict[int, str] = {0: "the same board", 10: "one PCIe switch (PIX)", 20: "several PCIe switches (PXB)",
            30: "the CPU's host bridge (PHB)", 40: "the NUMA node's host bridges (NODE)",
            50: "the link between CPU sockets (SYS)"}
#: nvmlGpuP2PStatus_t in words.
P2P_STATUS: dict[int, str] = {0: "OK", 1: "the chipset does not support it", 2: "the GPU does not support it",
              3: "the I/O hub topology does not support it", 4: "disabled by the driver's registry key",
              5: "not supported", 6: "unknown"}
#: The memory probe's allocator walk in words (probes/_allocator.explain_walk), by what it saw.
ALLOCATOR_WALK = {
    "cached": ("After every tensor was freed, torch still reserved {reserved} (allocated {allocated}): the caching "
               "allocator keeps freed blocks to reuse them without asking the driver again, so nvidia-smi keeps "
               "counting them as this process's memory."),
    "held_elsewhere": " The {allocated} still allocated was not freed by the walk's own tensors: something else in "
                      "this process holds it.",
    "held_before": (" The {allocated} still allocated was allocated before the walk began: cuBLAS keeps a workspace "
                    "per handle and stream (32 MiB on sm_90 GPUs) in the caching allocator for the life of the "
                    "process, from the first matmul on; torch._C._cuda_clearCublasWorkspaces() releases it."),
    "not_freed": " A further {allocated} was not freed by the walk.",
    "fragmented": ("A {request} tensor made torch reserve {grew} more although {free} lay free in its cache: the "
                   "free blocks were not contiguous (fragmentation). PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
                   "lets segments grow instead, which avoids most of this."),
    "empty_cache": ("torch.cuda.empty_cache() gave {returned} back to the driver{nvml}. That helps other processes on "
                    "this GPU; it does not give the calling process more memory or speed, and its next allocations "
                    "must ask the driver again (slower)."),
    "empty_cache_nvml": " (NVML 'used' fell by {drop})",
}
#: What to install when torch has no kernel for a GPU (probes/environment.kernel_image_fix), by case.
KERNEL_IMAGE_FIX = {
    "newer": "This GPU is newer than the build: ",
    "newer_known": ("install a torch built with CUDA {cuda} or newer, whose arch list includes {sm} ({index}{since}): "
                    "`pip install --force-reinstall torch torchvision --index-url "
                    "https://download.pytorch.org/whl/{index}`."),
    "newer_known_since": ", torch {first} or later",
    "newer_unknown": ("install the newest torch built with the newest CUDA (https://pytorch.org/get-started/locally/) "
                      "and check that torch.cuda.get_arch_list() has {sm}."),
    "dropped": ("Install a torch build whose arch list includes {sm} (older GPUs need an older CUDA build, e.g. "
                "cu126 wheels for sm_50..sm_70)."),
}
#: What of a GPU pair's peer-to-peer path could not be read, why, and what to do (probes/_p2p):
#: (what, reason, fix) templates by case.
ACS_BY_HAND = "check by hand on the host: `sudo lspci -vvv | grep ACSCtl` and `cat /proc/cmdline`"
P2P_UNKNOWN: dict[str, tuple[str, str, str]] = {
    "nvml_status": ("NVML's peer-to-peer status", "NVML answered {reason}", "Run `nvidia-smi topo -p2p rw` on the node."),
    "vm": ("ACS on the PCIe path", "this is a virtual machine: its PCIe bridges are virtual, the physical path and its "
           "ACS are the host's", "Ask the host's administrator to {by_hand}; inside the VM, NCCL_P2P_DISABLE=1 keeps "
           "NCCL off that path if jobs hang."),
    "not_in_sysfs": ("ACS on the PCIe path", "the GPUs are not in this machine's sysfs (a container, or another "
                     "machine's readings)", "Run `sudo gpudoctor report` on the host, or {by_hand}."),
    "closed": ("ACS on the bridges between them ({bridges})", "{reason}",
               "Run `sudo gpudoctor report`, or by hand: `sudo lspci -vvv -s {bridge} | grep ACSCtl` for each "
               "bridge listed."),
}
_TORCHVISION_BROKEN = Wording(
    Status.FAIL, "torchvision {tv_version} does not work with torch {version}: {error}",
    "torchvision's compiled operators (nms, roi_align, the image decoders) are built against one torch release; "
    "against another they fail to register, so `import torchvision` or its first op raises. The local torch "
    "2.13.0+cpu wheel with torchvision 0.28.0 from PyPI fails this way ('operator torchvision::nms does not "
    "exist').",
    "Install the pair from the same index: `pip install --force-reinstall torch=={torch} \"{pair}\"{from_index}`"
    "{table} (or let pip choose both: `pip install -U torch torchvision{from_index}`).")
#: What the torchvision fix adds when the pair for this torch is not known.
TORCHVISION_TABLE = " (pick the torchvision version for torch {version} from {url})"
_TV_PAIR_SUMMARY = "torchvision {tv_version} is not the release built for torch {version} (expected {expected}.x)."
_TV_PAIR_WHY = ("Its compiled operators load and ran a test op now, but a mismatched pair can break on the first "
                "operator whose signature changed between the two torch releases.")
_TV_PAIR_FIX = "Install a matched pair: `pip install \"torchvision=={expected}.*\"{from_index}` once it is released"

_RANK_FAILED = Wording(
    Status.FAIL, "rank {rank} {text}", "One rank that crashes or hangs stalls every collective in a training job.",
    "Run again with NCCL_DEBUG=INFO (NCCL) or TORCH_DISTRIBUTED_DEBUG=DETAIL to see where that rank stops; check "
    "its GPU with `gpudoctor report --device N`.")
_DP_WHY = "Multi-GPU training on this node does not work as is."
_DP_FIX = "Check the peer-access matrix and `nvidia-smi topo -m`; update the driver."
#: How each rank of a failed distributed run ended: the text of its rank_failed, rank_hung or rank_stopped finding.
RANK_FAILED_AFTER = "failed after rank {first} did ({text})"
RANK_STOPPED_AFTER = "was stopped after rank {first} failed (in {phase})"
RANK_HUNG = "did not finish within {seconds:.0f} s (last phase: {phase})"
RANK_WAITING = "was waiting for rank(s) {ranks} in {phase} when stopped"
#: What the nvlink_link_down summary adds when a GPU has fewer links up than its peers.
NVLINK_NOTES = " ({notes})"

_ALLOCATOR_WHY = ("torch.cuda.memory_allocated() counts live tensors; nvidia-smi counts what torch reserved plus the "
                  "CUDA context. The difference is the cache, not a leak.")
_WORKLOAD_FAILED = Wording(
    Status.FAIL, "the MNIST workload did not complete: {error}",
    "A 0.5M-parameter network at batch 64 needs a few MiB; failing it means the device cannot train at all in this "
    "state.",
    "Check `nvidia-smi` for other processes holding the memory; run `gpudoctor report --probe workload -v` again.")
_XID_APPLICATION_WHY = "This class of Xid is usually raised by a fault in the application, not the GPU."
#: Parts of the probes' summaries and fixes, filled in where a finding has them.
AND_AS_ROOT = ", and run as root"
NO_CUDA_DEVICE_SEEN = "torch sees no CUDA device"
CPU_MEASURED = " The CPU figure above was measured."
SM_ACTIVITY = " (SM activity {sm:.0f} %)"
MATMUL_SHARE = "{mode} {pct:.0f} %"
CUBLAS_ADDS = ", and the first matmul adds {cublas} (cuBLAS)"
ALLOCATOR_WALK_RAN = "The caching allocator walk ran; see details.allocator_walk for the numbers."
LINK_TRAINED = " The link was at gen {gen} x{width} right after the copies."
LINK_NOTE = " {note}."
WRONG_NONFINITE = "{count} NaN/Inf values"
WRONG_NOT_REPEATABLE = "two runs on identical inputs gave different bits"
WRONG_ERROR = ("error {error:.2e} per element (limit {limit:.1e}), {normwise:.2e} norm-wise (limit "
               "{normwise_limit:.0e})")
JUDGED_AS = "{mode} judged as {judged_as}"
DIVERGED = "training diverged"
XID_TIMES = "{count} time(s)"
XID_ONCE = "once"
ECC_EVENTS = " ({count} such events)"
KERNEL_LOG_CLOSED = "the kernel log is not readable"
NO_CUDA_FOR_WORKLOAD = "no CUDA device is usable by torch"
NO_TORCH_FACTS = " (torch facts not available at this level)"
#: The container findings' fields (probes/_stack.py): a version that could not be read, the device
#: rules that lock the GPUs out ({rules}), what the container lacks ({missing}), the variables ({variables}).
STACK_UNREADABLE = "cannot be read ({reason})"
ACCESS_LOST_RULES = ": its device cgroup no longer lets it open the NVIDIA devices (devices.list for major 195: {seen})"
ACCESS_LOST_NO_RULES = "none"
CONTAINER_LACKS = {"device_nodes": "no /dev/nvidia* device", "nvml_library": "no libnvidia-ml.so.1",
                   "visible_unset": "NVIDIA_VISIBLE_DEVICES is unset", "visible_none": "NVIDIA_VISIBLE_DEVICES={visible}"}
NO_NVIDIA_VARIABLES = ", and no NVIDIA_* variable, as with CDI"
DRIVER_UNREACHABLE = "the NVIDIA driver cannot be reached from it"
#: Why the distributed check runs no NCCL (the {why} of nccl_skipped and nccl_unavailable).
NCCL_NO_DEVICE = "no CUDA device is visible"
NCCL_NOT_BUILT = "this torch build has no NCCL"
NCCL_TOO_FEW_GPUS = "only {gpus} CUDA device{plural} visible for {ranks} ranks on this node (NCCL needs one GPU per rank)"
NCCL_NO_CUDA = "torch sees no CUDA device (NCCL runs on GPUs; --backend gloo checks on the CPU)"
#: Why no GPU is visible (no_cuda_device's {why_none}), and the devices probe's summary then.
WHY_NONE_NVML = "NVML: {reason}"
WHY_NONE_ZERO = "NVML reports 0 devices"
WHY_NONE_TORCH = "; torch: {error}"
DEVICES_DRIVER_NOT_ANSWERING = "the NVIDIA driver is not answering"
DEVICES_NONE_VISIBLE = "no GPU visible"
#: The note of cuda_init_s when the child that starts CUDA did not answer (cuda_init_timeout's words too).
CUDA_INIT_NOT_ANSWERED = "not answered in {limit:g} s"

WORDING: dict[str, Wording] = {
    # -- devices -------------------------------------------------------------------------------
    "index_order_uncertain": Wording(
        Status.PASS, "torch's device numbers are not certain without torch: {caveat}.",
        "The torch -> nvidia-smi map here follows CUDA_VISIBLE_DEVICES' order; with mixed GPUs CUDA may number "
        "them otherwise, so a finding about 'device 0' may name another card.",
        "export CUDA_DEVICE_ORDER=PCI_BUS_ID (then cuda:N is nvidia-smi's GPU N), or run the full report, which "
        "matches devices by PCI bus id."),
    "device_properties_failed": Wording(
        Status.FAIL, "torch cannot read device {index}: {error}", "CUDA cannot use this device.",
        "Check `nvidia-smi` and `dmesg` for this GPU."),
    "no_cuda_device": Wording(
        Status.FAIL, "No NVIDIA GPU is visible ({why_none}).",
        "PyTorch code written as torch.device('cuda' if torch.cuda.is_available() else 'cpu') will silently "
        "train on the CPU; code that says 'cuda' fails.",
        "Check `nvidia-smi`. In a container pass the GPUs (`docker run --gpus all`); on a VM attach the GPU; on a "
        "laptop make sure the NVIDIA GPU is not disabled."),
    "no_cuda_device:named": Wording(
        Status.FAIL, "No NVIDIA GPU is visible ({why_none}).",
        "PyTorch code written as torch.device('cuda' if torch.cuda.is_available() else 'cpu') will silently "
        "train on the CPU; code that says 'cuda' fails.",
        "{named}: see the environment probe's finding."),
    "cuda_visible_devices_hides_all": Wording(
        Status.FAIL, "CUDA_VISIBLE_DEVICES={cvd!r} hides every GPU ({count} present).",
        "CUDA stops reading the list at the first entry that is not a valid device, so torch sees none.",
        "Use indices 0..{last} or GPU UUIDs from `nvidia-smi -L`, or unset CUDA_VISIBLE_DEVICES."),
    "cuda_visible_devices_truncated": Wording(
        Status.WARN, "CUDA_VISIBLE_DEVICES={cvd!r} names {named} devices but only the first {valid} are valid.",
        "CUDA ignores everything after the first invalid or repeated entry.",
        "Fix the list: valid indices are 0..{last}."),
    "torch_sees_no_gpu": Wording(
        Status.FAIL, _SEES_NONE + "torch.cuda.is_available() is False.", _SEES_NONE_WHY, _SEES_NONE_CHECK),
    "torch_sees_no_gpu:cuda_error": Wording(
        Status.FAIL, _SEES_NONE + "torch cannot start CUDA ({error}).", _SEES_NONE_WHY, _SEES_NONE_CHECK),
    "torch_sees_no_gpu:rocm_build": Wording(
        Status.FAIL, _SEES_NONE + "torch {version} is a ROCm (HIP) build, which cannot use NVIDIA GPUs.", _SEES_NONE_WHY,
        "Install a CUDA build of torch (`pip install torch --index-url https://download.pytorch.org/whl/cu126` or the "
        "index for your driver's CUDA version)."),
    "torch_sees_no_gpu:cpu_only_build": Wording(
        Status.FAIL, _SEES_NONE + "torch {version} is a CPU-only build.", _SEES_NONE_WHY, _CUDA_BUILD_FIX),
    "torch_sees_no_gpu:driver_too_old": Wording(Status.FAIL, _SEES_NONE + "{reason}.", _SEES_NONE_WHY, "{fix}"),
    "device_count_mismatch:changed": Wording(
        Status.WARN, "torch uses {torch_count} device(s) but CUDA_VISIBLE_DEVICES={changed_to!r} now allows "
        "{visible}: the variable was changed after CUDA read it.",
        "CUDA reads CUDA_VISIBLE_DEVICES once, when it initialises (the first torch.cuda call); setting "
        "os.environ afterwards changes nothing for this process, so it keeps the GPUs it started with.",
        "Set CUDA_VISIBLE_DEVICES before the process starts (`CUDA_VISIBLE_DEVICES=1 python train.py`) or at the "
        "top of the script before any torch.cuda call; to pick a device later use torch.cuda.set_device(N) or "
        "torch.device('cuda:N')."),
    "device_count_mismatch": Wording(
        Status.WARN, "torch sees {torch_count} device(s); NVML with CUDA_VISIBLE_DEVICES says {visible}.",
        "Some GPU is hidden from CUDA or failed to initialise (MIG, a lost GPU, a driver error).",
        "Compare `nvidia-smi -L` with torch.cuda.device_count(); check `dmesg` for Xid errors."),
    "index_order_differs": Wording(
        Status.PASS, "torch's device numbers differ from nvidia-smi's (see the torch->NVML map).",
        "CUDA orders devices fastest first by default; nvidia-smi orders them by PCI bus.",
        "export CUDA_DEVICE_ORDER=PCI_BUS_ID to make cuda:N match nvidia-smi's GPU N."),
    "mig_enabled": Wording(
        Status.WARN, "GPU {gpu} ({name}) is in MIG mode: CUDA sees its MIG instances, not the whole GPU.",
        "A process gets one MIG slice (its SMs and memory), so throughput and memory figures are the slice's, and "
        "NVML utilisation is not reported per instance.",
        "Select a slice with CUDA_VISIBLE_DEVICES=MIG-<uuid> (nvidia-smi -L), or ask the administrator to disable "
        "MIG for whole-GPU training."),
    "device_unreadable": Wording(
        Status.WARN, "GPU {gpu}: nothing could be read about it: {reasons}.",
        "NVML counts the device but answers nothing about it (name, UUID, PCI bus, memory), so it cannot be "
        "identified or matched to torch's devices; every NVIDIA GPU reports these.",
        "Compare with `nvidia-smi -q`; check the driver (`dmesg`), and in a VM or container that the GPU is passed "
        "through whole{as_root}."),
    "gpu_lost:devices": Wording(
        Status.FAIL, "GPU {gpu} has fallen off the bus (NVML: GpuIsLost).",
        "The driver lost contact with the GPU (Xid 79): every CUDA call on it fails.", _XID_DMESG),
    # -- environment -----------------------------------------------------------------------------
    "torch_import_failed": Wording(
        Status.FAIL, "torch does not import: {error}", "Every PyTorch program on this machine fails at `import torch`.",
        "Reinstall torch in this environment: `pip install --force-reinstall torch`."),
    "torch_cpu_only_build": Wording(
        Status.FAIL, "torch {version} is a CPU-only build: it cannot use a GPU even when one is present.",
        "CPU-only wheels (+cpu) have no CUDA kernels; torch.cuda.is_available() is always False.",
        _CUDA_BUILD_FIX),
    "cuda_init_failed": Wording(
        Status.FAIL, "NVML sees {count} GPU(s) but torch cannot start CUDA: {reason}", _CUDA_NOT_STARTED,
        "Read the error above; common causes are CUDA_VISIBLE_DEVICES hiding every GPU, a driver/library mismatch "
        "after an upgrade without reboot, or a container started without GPUs."),
    "cuda_init_failed:known": Wording(
        Status.FAIL, "NVML sees {count} GPU(s) but torch cannot start CUDA: {reason} ({cause})", _CUDA_NOT_STARTED,
        "{fix}"),
    "cudnn_mismatch:on_path": Wording(
        Status.FAIL, _CUDNN_SUMMARY, _CUDNN_WHY,
        "Remove {named} from LD_LIBRARY_PATH so torch loads the cuDNN {compiled} it ships with ({command}; look in "
        "the shell profile and module files, and note that sudo can keep the variable)" + _CUDNN_OTHER),
    "cudnn_mismatch:path_other": Wording(
        Status.FAIL, _CUDNN_SUMMARY, _CUDNN_WHY,
        "Find the directory on LD_LIBRARY_PATH that holds the foreign libcudnn (`ls <dir>/libcudnn*` for each of "
        "{entries}) and remove it from the variable so torch loads the cuDNN {compiled} it ships with"
        + _CUDNN_OTHER),
    "cudnn_mismatch": Wording(
        Status.FAIL, _CUDNN_SUMMARY, _CUDNN_WHY,
        "Find where the foreign libcudnn comes from (/etc/ld.so.conf.d, a CUDA toolkit's lib64, another job's "
        "install) and take it off the library search path so torch loads the cuDNN {compiled} it ships with"
        + _CUDNN_OTHER),
    "no_kernel_image": Wording(
        Status.FAIL, "GPU {index} ({name}) has compute capability {cc}, which torch {version} was not compiled for "
        "({archs}).",
        "Every CUDA kernel fails with 'no kernel image is available for execution on the device'.", "{fix}"),
    "ptx_jit_only": Wording(
        Status.WARN, "GPU {index} ({name}) has compute capability {cc}; torch {version} has no {sm} binary for it, "
        "only PTX ({ptx}).",
        "The driver JIT-compiles every PTX kernel for this GPU when it is first used: start-up takes minutes, and "
        "again whenever the JIT cache (CUDA_CACHE_MAXSIZE, ~/.nv/ComputeCache) is too small or not kept "
        "(containers, CI); the JIT-compiled code may also run slower.",
        "{fix}" + _JIT_ONCE),
    "extension_no_kernel_image": Wording(
        Status.FAIL, "{path} has no kernel for {named}, compute capability {cc}: it was compiled for {archs}.",
        "Every call into this extension on that GPU fails with 'CUDA error: no kernel image is available for "
        "execution on the device' (it imports; its first GPU operation raises), whatever torch itself supports.",
        "Install the build of {package} made for {sm} (a wheel built with the CUDA release and arch list of this "
        "GPU's generation), or " + _REBUILD + "."),
    "extension_ptx_jit_only": Wording(
        Status.WARN, "{path} has no {sm} binary for {named}, only PTX ({ptx}).",
        "The driver JIT-compiles every kernel of this extension for the GPU when it is first used: start-up takes "
        "minutes, and again whenever the JIT cache (CUDA_CACHE_MAXSIZE, ~/.nv/ComputeCache) is too small or not "
        "kept (containers, CI).",
        "Install the build of {package} made for {sm}, or " + _REBUILD + "." + _JIT_ONCE),
    "torchvision_mismatch": _TORCHVISION_BROKEN,
    "torchvision_ops_broken": _TORCHVISION_BROKEN,
    "torchvision_version_pair": Wording(
        Status.WARN, _TV_PAIR_SUMMARY, _TV_PAIR_WHY, _TV_PAIR_FIX + "."),
    "torchvision_version_pair:torch_known": Wording(
        Status.WARN, _TV_PAIR_SUMMARY, _TV_PAIR_WHY,
        _TV_PAIR_FIX + ", or `pip install \"torch=={tv_torch}.*\"{from_index}` to match torchvision {tv_version}."),
    "python_unusable": Wording(Status.ERROR, "{error}"),
    "torch_not_recorded": Wording(
        Status.SKIP, "torch facts were not recorded: the torch checks did not run.",
        "The recording holds none (made with `record --no-torch`, or where torch is not installed); what was not "
        "recorded is unknown, not a failure.",
        "Record on the training environment, with its torch: `gpudoctor record -o FILE` there."),
    "torch_not_installed": Wording(
        Status.SKIP, "torch is not installed in {python}: the torch checks did not run.",
        "gpudoctor's base install has no torch; the checks that start CUDA need the torch your training uses.",
        "{hint}"),
    # -- distributed -----------------------------------------------------------------------------
    "store_not_bound": Wording(Status.SKIP, "the rendezvous store listened on {where}"),
    "nccl_skipped": Wording(Status.SKIP, "NCCL all-reduce not checked: {why}; checked gloo on CPU instead"),
    "distributed_ok": Wording(
        Status.PASS, "{world} ranks ({backend}) on {hosts} host(s): all-reduce correct at every size, peak bus "
        "bandwidth {busbw:.2f} GB/s at {size}; DDP gradients agree"),
    "rank_stopped": Wording(Status.SKIP, "rank {rank} {text}"),
    "rank_failed": _RANK_FAILED,
    "rank_hung": _RANK_FAILED,
    "allreduce_wrong_result": Wording(
        Status.FAIL, "all-reduce gave a wrong sum: {wrong}",
        "A collective that returns wrong numbers silently corrupts training.",
        "Update the driver and NCCL; run nccl-tests' all_reduce_perf with -c 1 to confirm."),
    "allreduce_size_failed": Wording(
        Status.WARN, "all-reduce could not run at {sizes}", fix="Use smaller --sizes, or free device memory."),
    "ddp_gradients_wrong": Wording(
        Status.FAIL, "DDP's averaged gradients differ from a hand-made all-reduce by {diff:.3g} (tolerance {tol:.3g})",
        "DDP is not averaging gradients correctly: the model trains on wrong updates.",
        "Check that every rank runs the same torch version and the same model code."),
    "ranks_disagree": Wording(
        Status.FAIL, "ranks disagree after a DDP step (gradients by {grads:.3g}, parameters by {params:.3g})",
        "Replicas that drift apart train different models.",
        "Look for rank-dependent code paths and mixed torch/NCCL versions across nodes."),
    "straggler_shared_cpu": Wording(
        Status.PASS, "rank {rank} computed slower ({ms:.2f} ms per step against {ref_ms:.2f} ms on the others); all "
        "ranks share this host's CPUs, so this is expected"),
    "straggler": Wording(
        Status.WARN, "rank {rank} ({host}, {gpu}) is a straggler: {ms:.2f} ms of compute per step against "
        "{ref_ms:.2f} ms on the others",
        "Every collective waits for the slowest rank, so the whole job runs at its pace.",
        "Compare that device with `gpudoctor report --device N` (clocks, throttling, PCIe link) and look for other "
        "processes on it."),
    "multi_gpu_skipped": Wording(
        Status.SKIP, "peer access, NVLink and DataParallel not checked on {host}: {reason}",
        "These checks need at least two GPUs on one node."),
    "no_peer_access": Wording(
        Status.WARN, "{host}: no GPU peer access for {pairs}",
        "Without peer access NCCL and DataParallel copy between GPUs through host memory, which is slower.",
        "Check `nvidia-smi topo -m`; on servers, PCIe ACS or an IOMMU in translated mode (common in VMs) blocks "
        "peer-to-peer; consumer GPUs may not offer it."),
    "dataparallel_skipped": Wording(
        Status.SKIP, "{host}: DataParallel not checked: {reason}",
        "DataParallel needs one process to open a context on every GPU."),
    "dataparallel_failed": Wording(
        Status.FAIL, "{host}: DataParallel over {devices} GPUs failed: {error}", _DP_WHY, _DP_FIX),
    "dataparallel_failed:differs": Wording(
        Status.FAIL, "{host}: DataParallel over {devices} GPUs failed: output differs from one GPU by {diff}",
        _DP_WHY, _DP_FIX),
    "nvlink_not_connected": Wording(
        Status.PASS, "{host}: no NVLink connected ({gpus} GPU(s) have NVLink ports, none is linked); GPU-to-GPU "
        "traffic goes over PCIe",
        "Boards that take an NVLink bridge report every link inactive when none is fitted."),
    "nvlink_link_down": Wording(
        Status.WARN, "{host}: NVLink inactive: {down}{notes}",
        "An inactive NVLink lowers GPU-to-GPU bandwidth; traffic falls back to PCIe.",
        "Check `nvidia-smi nvlink --status`; reset the GPUs or reseat the bridge."),
    "no_cuda_device:distributed": Wording(
        Status.SKIP, "no CUDA device visible: the CPU-only (gloo) check was not run",
        fix="To check gloo on CPU anyway: gpudoctor distributed --backend gloo"),
    "quick_mode:distributed": Wording(Status.SKIP, "the distributed check needs torch: not run with --quick"),
    "distributed_unavailable": Wording(Status.SKIP, "this torch build has no torch.distributed"),
    "nccl_unavailable": Wording(Status.SKIP, "NCCL asked for, but {why}"),
    "nccl_unavailable:one_gpu": Wording(Status.SKIP, "one GPU and this torch build has no NCCL: nothing to check"),
    "gloo_unavailable": Wording(Status.SKIP, "this torch build has no gloo backend"),
    "not_enough_gpus": Wording(Status.SKIP, "--nproc {nproc} needs {nproc} GPUs for NCCL, {gpus} visible"),
    "probe_error:no_local_gpu": Wording(Status.ERROR, "local rank {rank} has no GPU ({gpus} visible)"),
    "one_rank": Wording(Status.SKIP, "a distributed check needs at least 2 ranks (--nproc 2)"),
    "nccl_init_failed": Wording(
        Status.FAIL, "NCCL could not start on the GPU: {error}",
        "Distributed training with NCCL (DDP, FSDP) fails on this node at init_process_group.",
        "Run with NCCL_DEBUG=INFO to see which step fails; check that the torch build's NCCL matches the driver "
        "(`python -c 'import torch; print(torch.cuda.nccl.version())'`)."),
    "nccl_wrong_result": Wording(
        Status.FAIL, "NCCL's all-reduce on one GPU returned a wrong result.",
        "A collective that computes wrong values corrupts gradients silently.",
        "Update the driver and torch; report it with `gpudoctor report --full --json`."),
    "one_gpu": Wording(
        Status.PASS, "One GPU: NCCL initialised and all-reduced as a world of one; bandwidth between GPUs needs two "
        "or more.",
        "NCCL loading and starting is what fails first on a broken node; bus bandwidth needs peers.",
        "On a multi-GPU node `gpudoctor distributed` measures all-reduce bandwidth and DDP."),
    "gpus_not_checked": Wording(
        Status.FAIL, "NVML sees {count} GPU(s) but torch sees none: this check ran with gloo on the CPU and says "
        "nothing about the GPUs or NCCL.",
        "Training on this node would not use its GPUs: torch.cuda.is_available() is False.",
        "Run `gpudoctor report` for why torch cannot use the GPUs, fix that, then run `gpudoctor distributed` again "
        "to check NCCL on them."),
    # -- the measuring probes' common reasons not to measure (probes/_gpu.py) ---------------------
    "replay_no_device": Wording(
        Status.SKIP, "Not measured: a replayed report has no live GPU to exercise.",
        "Bandwidth, compute and memory figures need the device itself.",
        "Run `gpudoctor report --full` on the machine with the GPU."),
    "quick_mode": Wording(
        Status.SKIP, "Not measured at --quick (no torch import, no CUDA context).",
        fix="Run `gpudoctor report --full` to measure."),
    "torch_unavailable": Wording(
        Status.SKIP, "torch cannot be imported ({reason}).", "Nothing can be measured without torch.",
        "Install a torch build for this machine (pip install torch)."),
    "torch_without_cuda": Wording(
        Status.SKIP, "This torch build ({version}) has no CUDA support.", "GPU measurements need a CUDA build of torch.",
        "Install a CUDA build: see the selector at https://pytorch.org/get-started/locally/."),
    "no_cuda_device:measuring": Wording(
        Status.SKIP, "No CUDA device to measure ({reason}).",
        "These checks exercise the GPU itself; the devices and environment probes say why none is usable.",
        "Fix the failures the devices and environment checks list first."),
    "device_out_of_range": Wording(Status.SKIP, "--device {device_index} does not exist (torch sees {count})."),
    # -- compute -----------------------------------------------------------------------------------
    "tf32_override:compute": Wording(
        Status.PASS, "{note}; the affected rows are shown without a datasheet comparison.",
        "The environment, not torch's allow_tf32 switch, decides which format cuBLAS runs.",
        "Nothing to do; unset the variable to let torch's own switch decide."),
    "tensor_cores_used": Wording(
        Status.PASS, "The tensor cores of {gpu} were {active:.0f} % active during the bf16 matmul{sm}: bf16 math "
        "runs on them.",
        "NVML's GPM counters measured it; utilisation alone cannot tell tensor work from any other.",
        "Nothing to do."),
    "tensor_cores_idle": Wording(
        Status.WARN, "The tensor cores of {gpu} were only {active:.0f} % active during the bf16 matmul.",
        "A bf16 matrix product should run on the tensor cores; if it did not, bf16 training is several times slower "
        "than it could be.",
        "Check the torch build's cuBLAS (`torch.backends.cuda.preferred_blas_library()`), the "
        "CUBLAS_WORKSPACE_CONFIG and NVIDIA_TF32_OVERRIDE variables, and the clocks."),
    "gpu_cpu_ratio": Wording(
        Status.PASS, "{gpu} multiplies matrices {fp32:.0f}x faster than this CPU in fp32 and {best:.0f}x in its "
        "fastest mode.",
        "A training run sees this ratio only when the input pipeline keeps the GPU fed; `gpudoctor bench mnist` "
        "shows how much of it a real loop gets."),
    "no_datasheet:compute": Wording(
        Status.PASS, "No datasheet peak for {name} in gpudoctor's table; measured figures are shown alone."),
    "matmul_slow": Wording(
        Status.WARN, "{modes} matmul on {gpu} reach(es) only {pct:.0f} % of the {model} datasheet peak ({worst}: "
        "{tflops:.0f} of {peak:.0f} TFLOP/s).",
        "Training runs at most this fraction of the speed the hardware is sold for.",
        "Check clocks and power (health probe: throttling, power cap), other processes on the GPU, MIG slicing, and "
        "that nvidia-smi shows the expected board."),
    "matmul_ok": Wording(Status.PASS, "Tensor-core matmul on {gpu} reaches {shares} of the {model} datasheet."),
    "tf32_available": Wording(
        Status.PASS, "TF32 runs fp32 matmuls {speedup:.1f}x faster on {gpu}, and torch uses it only when asked.",
        "torch keeps full fp32 precision for matmuls by default.",
        "{how} at the start of training (or use bf16 autocast)."),
    # -- memory ------------------------------------------------------------------------------------
    "cuda_context_size": Wording(
        Status.PASS, "The CUDA context costs {context} on {gpu} before any tensor{cublas}.",
        "Every process that touches this GPU pays it: nvidia-smi shows it although torch reports 0 bytes "
        "allocated. DataLoader workers or metrics code that call .cuda() each pay it again.",
        "Keep CUDA out of DataLoader workers (move batches to the GPU in the main process)."),
    "memory_nearly_full": Wording(
        Status.WARN, "Only {free} of {total} is free on {gpu}.",
        "Training on this GPU will run out of memory almost at once.",
        "See which processes hold it: nvidia-smi, or the process list below."),
    "allocator_explained": Wording(
        Status.PASS, "{said}", _ALLOCATOR_WHY,
        "If your training fails with out-of-memory while much is reserved but unallocated, set "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True. Read torch.cuda.memory_stats() in your loop: "
        "num_alloc_retries > 0 means memory pressure."),
    "allocator_explained:expandable": Wording(
        Status.PASS, "{said}", _ALLOCATOR_WHY, "expandable_segments is on for this environment."),
    "largest_search_leftover": Wording(
        Status.WARN, "{leftover} stayed allocated after the largest-allocation search.",
        "The search must leave nothing behind; this points at a torch allocator problem.",
        "Report it with the JSON report attached."),
    "largest_allocation_small": Wording(
        Status.WARN, "The largest single allocation on {gpu} is {largest}, {pct:.0f} % of its {total}.",
        "Models, batches or activations larger than this will not fit, whatever nvidia-smi's total says.",
        "Check the processes holding memory on this GPU (below, or nvidia-smi) and stop idle ones."),
    "memory_held_by_others": Wording(
        Status.WARN, "{count} other process(es) hold {held} of {gpu} (pid {pids}).",
        "Your training gets only what they leave; their kernels also share the GPU's time.",
        "Stop idle notebooks or old runs (nvidia-smi shows them); in a container the pids are the host's."),
    # -- transfer ----------------------------------------------------------------------------------
    "host_link_not_pcie": Wording(
        Status.PASS, "Pinned host-to-device copies reach {gbs:.1f} GB/s on {gpu}: its host link is NVLink-C2C (a "
        "Grace superchip), not PCIe, so no PCIe ceiling applies."),
    "pcie_ceiling_unknown": Wording(
        Status.PASS, "Pinned host-to-device copies reach {gbs:.1f} GB/s on {gpu}; NVML does not report the PCIe "
        "link, so there is no ceiling to compare with."),
    "pcie_link_misreported": Wording(
        Status.PASS, "Pinned host-to-device copies reach {gbs:.1f} GB/s on {gpu}, more than {link} can carry "
        "({ceiling:.1f} GB/s): the link NVML reports is not the one the copies used.{trained}",
        "Only GH200/GB200-class parts have a faster host link (NVLink-C2C), and this is not one. In a virtual "
        "machine the GPU sits behind a virtual root port that may report a lower PCIe generation or width than the "
        "physical link, so the ceiling above is wrong, not the copies.",
        "Nothing to fix in the training setup; compare with the host's own `nvidia-smi -q -d PCIE` (or `lspci -vv` "
        "on the host) to see the physical link."),
    "pinned_h2d_slow": Wording(
        Status.WARN, "Pinned host-to-device copies reach {gbs:.1f} GB/s on {gpu}, {pct:.0f} % of {link} "
        "({ceiling:.1f} GB/s).{trained}",
        "Every batch crosses this link; at this rate input copies can starve the GPU.",
        "Check the slot (x16 electrical?), risers and BIOS PCIe settings; run on the CPU socket nearest the GPU "
        "(numactl --cpunodebind); look for other transfers sharing the switch."),
    "pinned_h2d_ok": Wording(
        Status.PASS, "Pinned host-to-device copies reach {gbs:.1f} GB/s, {pct:.0f} % of {link}.{trained}"),
    "pin_memory_helps": Wording(
        Status.PASS, "Pinned memory copies {speedup:.1f}x faster than pageable memory ({pinned:.1f} vs {pageable:.1f} "
        "GB/s).",
        "Pageable tensors are first copied into a pinned staging buffer by the driver, and the copy blocks the "
        "Python thread.",
        "DataLoader(..., pin_memory=True) and batch.to(device, non_blocking=True)."),
    "no_datasheet:transfer": Wording(
        Status.PASS, "No datasheet memory bandwidth for {name} in gpudoctor's table; device-to-device copies reach "
        "{gbs:.0f} GB/s."),
    "d2d_slow": Wording(
        Status.WARN, "Device-to-device copies reach {gbs:.0f} GB/s on {gpu}, {pct:.0f} % of the {model}'s "
        "{ceiling:.0f} GB/s.",
        "Memory-bound layers (normalisation, activations, optimiser steps) run this much slower.",
        "Check memory clocks and throttling (gpudoctor report, health probe), other processes on the GPU, and "
        "whether this is a MIG slice."),
    "d2d_ok": Wording(
        Status.PASS, "Device-to-device copies reach {gbs:.0f} GB/s, {pct:.0f} % of the {model}'s datasheet "
        "{ceiling:.0f} GB/s."),
    # -- correctness -------------------------------------------------------------------------------
    "results_correct": Wording(
        Status.PASS, "{gpu}: {modes} results agree with float64 within their rounding-error limits; repeated runs "
        "are bit-identical."),
    "wrong_results": Wording(
        Status.FAIL, "{mode} results on {gpu} are wrong: {what}.",
        "Silent data corruption: training on this GPU can produce garbage weights without any error.",
        "Re-run `gpudoctor report --full --probe correctness` (seed {seed}); if it repeats, run NVIDIA's DCGM "
        "diagnostics (dcgmi diag -r 3), check ECC errors and clocks/overclocking, and take the GPU out of service."),
    "tf32_override:correctness": Wording(
        Status.PASS, "{why}; {judged}.",
        "The environment decides what cuBLAS really computes; judging it by the wrong format's limits would call "
        "normal rounding corruption (or miss real corruption).",
        "Nothing to do; unset the variable if you want torch's own TF32 switch to decide."),
    # -- workload ----------------------------------------------------------------------------------
    "workload_oom": _WORKLOAD_FAILED,
    "workload_failed": _WORKLOAD_FAILED,
    "workload_diverged": Wording(
        Status.FAIL, "{error}",
        "The reference network does not diverge at lr 0.1 on a working device: its arithmetic gives wrong numbers.",
        "Run `gpudoctor report --full` again; if it repeats, check the device's ECC errors and clocks, and try "
        "another driver."),
    "workload_low_accuracy": Wording(
        Status.WARN, "held-out accuracy {accuracy:.1%} after one epoch, expected >= {expected:.0%}",
        "On the built-in set this network reaches 90 % or more on a correct device.",
        "Re-run; if it stays low, the device computes wrong results (check ECC errors, clocks, and the driver/torch "
        "versions)."),
    "workload_measured": Wording(
        Status.PASS, "{sps:,.0f} samples/s ({mode}, batch {batch}) on {name}; no reference figure for this device "
        "yet, so there is nothing to compare with"),
    "workload_slow": Wording(
        Status.WARN, "{sps:,.0f} samples/s, {share:.0%} of the {figure:,.0f} measured on this GPU model ({source})",
        "The same run on the same GPU model was at least twice as fast: clocks, power cap, another process or a "
        "slow host may be holding it back.",
        "Check `gpudoctor` (live view) for throttling and other processes."),
    "workload_as_expected": Wording(
        Status.PASS, "{sps:,.0f} samples/s, {share:.0%} of the {figure:,.0f} expected ({source})"),
    "replay": Wording(Status.SKIP, "skipped: replaying a recording (the workload needs the live device)"),
    "no_cuda_device:workload": Wording(
        Status.SKIP, "skipped: {reason}", "The workload probe measures a GPU.",
        "Run `gpudoctor bench mnist --device cpu` for a CPU figure."),
    # -- events ------------------------------------------------------------------------------------
    "xid_critical": Wording(
        Status.FAIL, "{gpu}: Xid {xid} {times} since boot: {words}.",
        "A critical Xid means the GPU or its link failed; it can fail again mid-job.", "{action}."),
    "xid_application": Wording(
        Status.PASS, "{gpu}: Xid {xid} {times} since boot: {words}.", _XID_APPLICATION_WHY, "{action}."),
    "xid_application:follow_up": Wording(
        Status.PASS, "{gpu}: Xid {xid} {times} since boot: {words}, after Xid {before}: the driver's clean-up of "
        "that error.", _XID_APPLICATION_WHY, "{action}."),
    "ecc_event_critical": Wording(
        Status.FAIL, "{event}, reported by NVML while gpudoctor watched{count}.",
        "Data in GPU memory was lost or could not be protected: a job on this GPU may have computed wrong results "
        "or crashed.",
        "Drain the node and reset the GPU (`nvidia-smi -r` with no process on it) so the bad memory is retired or "
        "remapped; replace the board if it repeats."),
    "xid_repeated_on_one_gpu": Wording(
        Status.WARN, "GPU {gpu}: Xid {xid} {count} times since boot, and none on the node's other {others} GPU(s): "
        "{words}.",
        "One such Xid is usually the application's fault; the same one again and again on one GPU, across runs, "
        "while the other GPUs stay clean, points at that GPU.",
        "Move the job to another GPU to confirm (e.g. CUDA_VISIBLE_DEVICES set to another index): if the Xid "
        "follows GPU {gpu} and not the job, drain it and test it (`dcgmi diag -r 3`), and have it replaced if the "
        "diagnostic fails."),
    "xid_on_every_gpu": Wording(
        Status.FAIL, "Xid 31 (GPU memory page fault) on every GPU of the node ({count}) within {minutes} minutes.",
        "An application fault hits the GPU it runs on, not all of them: a fault on every GPU at once is a "
        "node-wide episode (the driver, the NVLink fabric, or one job spread over every GPU that corrupted shared "
        "state), and the GPUs may not recover on their own.",
        "A reset of the GPUs (or a reboot) is needed: drain the node, reset the GPUs (`nvidia-smi -r` with no "
        "process on them) or reboot, then run `gpudoctor report --full`; if one job ran on every GPU, check it "
        "too before putting it back."),
    "kernel_log_unreadable": Wording(
        Status.SKIP, "Xids from before now are unknown: {reason}.",
        "The driver writes Xid errors to the kernel log; without it, only NVML events seen while gpudoctor runs "
        "(exporter, watch, TUI) are counted.",
        "Run as root (or with CAP_SYSLOG), or read `sudo dmesg | grep -i xid` yourself."),
    "events_not_recorded": Wording(
        Status.SKIP, "the recording holds no event data (made before gpudoctor recorded events)"),
    "nvml_unavailable:events": Wording(Status.SKIP, "no NVML ({reason}): no GPU to attach events to"),
    "no_gpu": Wording(Status.SKIP, "no GPU to check"),
    "device_not_matched": Wording(Status.SKIP, "torch device {device_index} has no NVML device to match"),
    # -- health, p2p -------------------------------------------------------------------------------
    "nvml_unavailable:health": Wording(
        Status.SKIP, "no NVML ({reason}): nothing to check",
        "Health readings come from the driver's management library (NVML).",
        "See the environment probe's finding about the driver."),
    "nvml_unavailable:p2p": Wording(Status.SKIP, "no NVML ({reason}): GPU pairs unknown"),
    "p2p_single_gpu": Wording(Status.SKIP, "fewer than two GPUs: no peer-to-peer path to check"),
}
