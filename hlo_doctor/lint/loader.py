"""Loading rule files by path into a :class:`RuleBook`.

The bundled rules live in the top-level ``rules/`` folder of a checkout, which the wheel ships as
the package ``hlo_doctor.bundled_rules``; ``--rules DIR`` adds a user's own files of the same
format. Files are loaded by path into a private namespace (``hlo_doctor._loaded_rules.<id>``), so a
top-level package named ``rules`` is never imported and two folders may both hold a file called
``hd100_x.py``.

A file that cannot be loaded (syntax error, import error, no rule class, bad attributes, a code that
is already taken) does not stop the others: it becomes a :class:`RuleLoadError`, which the diagnosis
reports as an internal-error finding.
"""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import re
import sys
import traceback
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from hlo_doctor.core.errors import InputError
from hlo_doctor.core.model import Finding, Severity
from hlo_doctor.lint.rule import REQUIREMENTS, Example, Rule

_CODE = re.compile(r"^[A-Z]{2,}\d{3}$")
_RULE_FILE = re.compile(r"^[a-z]{2,}\d{3}_\w+\.py$")
_NAMESPACE = "hlo_doctor._loaded_rules"


@dataclass(frozen=True, slots=True)
class LoadedRule:
    """A rule class with where it came from."""

    rule: type[Rule]
    path: Path
    bundled: bool

    @property
    def code(self) -> str:
        return self.rule.code


@dataclass(frozen=True, slots=True)
class RuleLoadError:
    """A rule file that could not be loaded, and why (reported as an internal-error finding)."""

    path: Path
    reason: str
    detail: str = ""

    def to_finding(self) -> Finding:
        return Finding(
            code="HD000", name="internal.rule-load-error", severity=Severity.ERROR,
            message=f"rule file {self.path.name} was not loaded: {self.reason}",
            source=str(self.path), evidence=tuple(self.detail.splitlines()[-6:]),
        )


@dataclass(frozen=True, slots=True)
class RuleBook:
    """The rules available to a run: bundled plus user rules, and the files that failed to load."""

    rules: tuple[LoadedRule, ...]
    errors: tuple[RuleLoadError, ...] = ()

    def get(self, code: str) -> LoadedRule | None:
        code = code.strip().upper()
        return next((r for r in self.rules if r.code == code), None)

    def select(self, select: Iterable[str] = (), ignore: Iterable[str] = ()) -> tuple[LoadedRule, ...]:
        """Rules kept by ``--select``/``--ignore`` (codes or code prefixes such as ``HD00``).

        Raises :class:`InputError` for a code that matches no rule, so a typo never silently
        disables a gate.
        """
        select = [s.strip().upper() for s in select if s.strip()]
        ignore = [s.strip().upper() for s in ignore if s.strip()]
        for code in (*select, *ignore):
            if not any(r.code.startswith(code) for r in self.rules):
                known = ", ".join(r.code for r in self.rules)
                raise InputError(f"unknown rule id {code!r}", f"known rules: {known}")
        kept = [r for r in self.rules if not select or any(r.code.startswith(s) for s in select)]
        return tuple(r for r in kept if not any(r.code.startswith(i) for i in ignore))


def bundled_rules_dir() -> Path:
    """The folder of the bundled rules: ``rules/`` in a checkout, ``hlo_doctor/bundled_rules`` installed."""
    checkout = Path(__file__).resolve().parents[2] / "rules"
    if checkout.is_dir() and any(checkout.glob("hd[0-9][0-9][0-9]_*.py")):
        return checkout
    import importlib.resources

    # Not imported as a package: only its location is used, the files are loaded by path.
    return Path(str(importlib.resources.files("hlo_doctor.bundled_rules")))


def rule_files(directory: Path) -> list[Path]:
    """Rule files of a folder: ``<prefix>NNN_<slug>.py``, sorted by name."""
    return sorted(p for p in directory.iterdir() if p.is_file() and _RULE_FILE.match(p.name))


def load_rule_file(path: Path, *, bundled: bool = False) -> LoadedRule | RuleLoadError:
    """Load one rule file by path into the private namespace; never raises for a broken file."""
    digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:10]
    module_name = f"{_NAMESPACE}.{path.stem}_{digest}"
    try:
        spec = importlib.util.spec_from_file_location(module_name, path)
        if spec is None or spec.loader is None:
            return RuleLoadError(path, "not a loadable Python file")
        module = importlib.util.module_from_spec(spec)
        # dataclasses and typing look the module up by name while the file executes.
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    except BaseException as exc:  # noqa: BLE001 - a user's file may raise anything, even SystemExit
        sys.modules.pop(module_name, None)
        if isinstance(exc, KeyboardInterrupt):
            raise
        return RuleLoadError(path, f"{type(exc).__name__}: {exc}", traceback.format_exc())
    classes = [
        obj for obj in vars(module).values()
        if inspect.isclass(obj) and issubclass(obj, Rule) and obj is not Rule
        and obj.__module__ == module_name
    ]
    if len(classes) != 1:
        return RuleLoadError(path, f"expected one Rule subclass, found {len(classes)}")
    problem = validate_rule(classes[0])
    if problem:
        return RuleLoadError(path, problem)
    return LoadedRule(classes[0], path, bundled)


def validate_rule(rule: type[Rule]) -> str:
    """Why ``rule`` is malformed, or an empty string."""
    if not _CODE.match(rule.code or ""):
        return f"code {rule.code!r} is not like 'HD001'"
    if not rule.name:
        return "no name"
    if not isinstance(rule.severity, Severity):
        return f"severity {rule.severity!r} is not a Severity"
    if isinstance(rule.requires, str) or not set(rule.requires) <= set(REQUIREMENTS):
        return f"requires {rule.requires!r}: a tuple drawn from {REQUIREMENTS}"
    if rule.check is Rule.check:
        return "no check() method"
    if not inspect.getdoc(rule) or inspect.getdoc(rule) == inspect.getdoc(Rule):
        return "no docstring"
    for attr in ("VALID", "INVALID"):
        examples = getattr(rule, attr)
        if not isinstance(examples, (tuple, list)) or not all(isinstance(e, Example) for e in examples):
            return f"{attr} must be a tuple of Example"
    return ""


def load_rulebook(extra_dirs: Iterable[Path] = ()) -> RuleBook:
    """The bundled rules plus the rules of ``extra_dirs``.

    A missing extra folder is an :class:`InputError`; a broken file in any folder is a
    :class:`RuleLoadError` in ``errors`` and the other rules still load. A code already taken by an
    earlier rule is an error for the later file.
    """
    loaded: list[LoadedRule] = []
    errors: list[RuleLoadError] = []
    folders: list[tuple[Path, bool]] = [(bundled_rules_dir(), True)]
    for d in extra_dirs:
        d = Path(d)
        if not d.is_dir():
            raise InputError(f"rules folder {d} does not exist or is not a folder",
                             "pass a folder holding hdNNN_<slug>.py rule files")
        folders.append((d, False))
    for folder, bundled in folders:
        files = rule_files(folder)
        if not bundled and not files:
            raise InputError(f"rules folder {folder} holds no rule files",
                             "rule files are named like hd100_my_rule.py")
        for path in files:
            result = load_rule_file(path, bundled=bundled)
            if isinstance(result, RuleLoadError):
                errors.append(result)
                continue
            taken = next((r for r in loaded if r.code == result.code), None)
            if taken is not None:
                errors.append(RuleLoadError(path, f"code {result.code} is already used by {taken.path.name}"))
                continue
            loaded.append(result)
    loaded.sort(key=lambda r: r.code)
    return RuleBook(tuple(loaded), tuple(errors))
