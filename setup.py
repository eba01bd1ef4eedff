"""Which packages the wheel holds: every package found in the tree, never a hand-kept list.

Everything else (metadata, dependencies, the files beside the modules) is in pyproject.toml. This file
exists for one thing pyproject.toml's ``[tool.setuptools.packages.find]`` cannot say: the top-level
``rules/`` folder ships inside the package as ``hlo_doctor.bundled_rules`` (rules are loaded by path
from there, never imported as a top-level ``rules`` package), and a package found by ``find`` cannot
also be renamed; and the compiled reader of a line's events (``hlo_doctor/trace/_xwire.c``), an
optional extension: where it cannot be built (no C compiler), the install goes on without it and
the events are decoded by numpy (``hlo_doctor.trace.wire``), with the same results.
"""

from __future__ import annotations

from setuptools import Extension, find_packages, setup

BUNDLED = {"hlo_doctor.bundled_rules": "rules"}
"""Packages whose folder is not their name: package -> folder of the checkout."""

XWIRE = Extension("hlo_doctor.trace._xwire", sources=["hlo_doctor/trace/_xwire.c"], optional=True)
"""The compiled event decoder; ``optional``: a failed build is a warning, not a failed install."""
XSEGMENTS = Extension("hlo_doctor.trace._xsegments", sources=["hlo_doctor/trace/_xsegments.c"], optional=True)
"""The compiled walk of a host thread's events (optional too: the walk runs in Python without it)."""

XSUMS = Extension("hlo_doctor.opstats._xsums", sources=["hlo_doctor/opstats/_xsums.c"], optional=True)
"""The compiled op sums of a host's events (optional too: the numpy loop gives the same floats without it)."""

setup(packages=[*find_packages(include=["hlo_doctor", "hlo_doctor.*"]), *BUNDLED], package_dir=BUNDLED,
      ext_modules=[XWIRE, XSEGMENTS, XSUMS])
