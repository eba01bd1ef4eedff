"""The two hand fixes of the greedy-sampler report, rebuilt on the reference engine's source.

Both looked right in code and both regressed, because they changed the dtype at the ``sample()``
program boundary while the warm-up's precompiled menu stayed keyed on float32:

* ``conditional-output-convert`` (the 0.23.0 attempt): the float32 widening made conditional on
  ``do_sampling``: the runner widens before ``sample()`` only when sampling, and ``sample()``'s own
  widening of its logits output happens only when sampling. Greedy steps hand bf16 to ``sample()``.
* ``runner-convert-removed`` (the 0.24.0 attempt): the runner's eager ``astype(float32)`` removed,
  leaving ``sample()``'s internal widening to do the work; the precompile menu left at float32.

Each edit is an exact text replacement whose anchor must be found exactly once (an engine whose
source moved fails loudly here instead of silently building an unmodified tree). ``hlo-doctor
verify`` must fail both on steady-state compiles and on the batch TTFT ratio. Used by the tests and
by ``benchmarks/bench_verify.py``.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ATTEMPTS", "Edit", "build_attempt"]


@dataclass(frozen=True, slots=True)
class Edit:
    """Replace ``anchor`` (which must occur exactly once) by ``replacement`` in ``file``."""

    file: str
    anchor: str
    replacement: str


_RUNNER_WIDENING = (
    "        if spec_decode_metadata is None:\n"
    "            logits = logits.astype(jnp.float32)\n"
    "            with self.maybe_forbid_compile:\n"
)
_SAMPLER_WIDENING = (
    "    greedy_tokens = jnp.argmax(logits, axis=-1)\n"
    "    logits = logits.astype(jnp.float32)\n"
)

ATTEMPTS: dict[str, tuple[Edit, ...]] = {
    "conditional-output-convert": (
        Edit("runner.py", _RUNNER_WIDENING,
             "        if spec_decode_metadata is None:\n"
             "            if tpu_sampling_metadata.do_sampling:\n"
             "                logits = logits.astype(jnp.float32)\n"
             "            with self.maybe_forbid_compile:\n"),
        Edit("sampling.py", _SAMPLER_WIDENING,
             "    greedy_tokens = jnp.argmax(logits, axis=-1)\n"
             "    if tpu_sampling_metadata.do_sampling:\n"
             "        logits = logits.astype(jnp.float32)\n"),
    ),
    "runner-convert-removed": (
        Edit("runner.py", _RUNNER_WIDENING,
             "        if spec_decode_metadata is None:\n"
             "            with self.maybe_forbid_compile:\n"),
    ),
}
"""Attempt name -> its edits. The precompile menu (compilation_manager.py) is left as it is in both."""


def build_attempt(name: str, source_tree: Path, dest: Path) -> Path:
    """Copy the engine tree ``source_tree`` to ``dest`` and apply attempt ``name``; return ``dest``."""
    if name not in ATTEMPTS:
        raise KeyError(f"unknown attempt {name!r}; known: {', '.join(ATTEMPTS)}")
    source_tree, dest = Path(source_tree), Path(dest)
    shutil.copytree(source_tree, dest, ignore=shutil.ignore_patterns("__pycache__", ".hlo-doctor"))
    for edit in ATTEMPTS[name]:
        path = dest / edit.file
        text = path.read_text()
        count = text.count(edit.anchor)
        assert count == 1, f"{name}: anchor found {count} times in {path} (expected once):\n{edit.anchor}"
        path.write_text(text.replace(edit.anchor, edit.replacement))
    return dest
