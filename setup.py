"""Package discovery for setuptools; everything else is in pyproject.toml.

Every package under gpudoctor/ is found, and the top-level probes/ folder (with any
subpackage it grows) is installed as gpudoctor.probes. A package added later needs no
entry here: tests/project/test_wheel_install.py fails if the wheel lacks a module of the tree.
"""

from setuptools import find_packages, setup

PACKAGES = find_packages(include=["gpudoctor", "gpudoctor.*"])
PACKAGES += ["gpudoctor.probes"] + [f"gpudoctor.probes.{name}" for name in find_packages("probes")]

setup(packages=PACKAGES, package_dir={"gpudoctor.probes": "probes"})
