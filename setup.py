"""Which packages the wheel holds: every package found in the tree, never a hand-kept list.

Everything else (metadata, dependencies, the files beside the modules) is in pyproject.toml. This file
exists for one thing pyproject.toml's ``[tool.setuptools.packages.find]`` cannot say: the top-level
``rules/`` folder ships inside the package as ``hlo_doctor.bundled_rules`` (rules are loaded by path
from there, never imported as a top-level ``rules`` package), and a package found by ``find`` cannot
also be renamed.
"""

from __future__ import annotations

from setuptools import find_packages, setup

BUNDLED = {"hlo_doctor.bundled_rules": "rules"}
"""Packages whose folder is not their name: package -> folder of the checkout."""

setup(packages=[*find_packages(include=["hlo_doctor", "hlo_doctor.*"]), *BUNDLED], package_dir=BUNDLED)
