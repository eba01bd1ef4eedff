"""GitHub Actions workflow commands (``::error file=...,line=...,title=...::message``).

GitHub shows them as annotations on the pull request's lines; the escaping follows the runner's rules
(``%``, CR and LF everywhere; also ``:`` and ``,`` in properties).
"""

from __future__ import annotations

from hlo_doctor.core.escape.github import gh_data, gh_property

__all__ = ["annotation"]


_data = gh_data
_property = gh_property


def annotation(level: str, message: str, *, title: str = "", file: str = "", line: int | None = None) -> str:
    """One workflow command: ``level`` is ``error``, ``warning`` or ``notice``; ``line`` only with ``file``."""
    props = []
    if file:
        props.append(f"file={_property(file)}")
        if line:
            props.append(f"line={line}")
    if title:
        props.append(f"title={_property(title)}")
    return f"::{level}{' ' + ','.join(props) if props else ''}::{_data(message)}"
