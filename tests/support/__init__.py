"""The tests' shared fakes and helpers, one package (tests/ is on sys.path through conftest.py):

- ``nvml_fake``: a fake pynvml (FakePynvml, an H100 MIG layout, GPM tables) behind the real NVML gate;
- ``fake_node``: a fake HGX node of 8 (up to 64) H100s on it; ``python tests/support/fake_node.py tui``
  runs gpudoctor's CLI with it as pynvml;
- ``fatbin_samples``: CUDA fat binaries built byte by byte; ``pcie_tree``: a sysfs PCIe tree laid out
  as the kernel lays it out; ``stack_layout``: the files below NVML (kernel module, libraries,
  container) laid out under a root;
- ``fault_probes``, ``probes_under_test``: probes that hang, crash, start trees or print;
- ``fresh_interpreter``: what a fresh interpreter loads; ``script_loader``: a script loaded as a module;
- ``prom_support``: a real Prometheus started for a test, and its queries;
- ``tui_support``, ``tui_workload_double``: the TUI driven in a pseudo-terminal and test doubles of
  its workload child;
- ``_hang_targets``, ``_why_targets``, ``_hooks_loops``, ``why_scripts/``: training loops and jobs
  that ``why``, the hooks and the hang verdict are run against.
"""
