"""A tree as the previous version of ``bf16-greedy-sampler`` left it, made from one patched by this one.

The previous version kept the runner's widening after sampling under ``if <metadata>.logprobs:`` (an
eager float32 program in every step with logprobs) and left the logprobs computation and its menu on
float32. Undoing exactly this version's logprobs edits, by the marker comments the codemod writes,
gives back the bytes the previous version wrote.
"""

from __future__ import annotations

import re
from pathlib import Path

MARK = "# bf16-greedy-sampler:"


def downgrade(runner: Path, sampler: Path, precompile: Path, meta: str = "tpu_sampling_metadata") -> None:
    """Rewrite the three patched files in place into the previous version's output."""
    text = runner.read_text()
    text, n = re.subn(
        rf"^( *){re.escape(MARK)} no eager float32 widening here: compute_and_gather_logprobs widens in-graph\.\n",
        lambda m: (f"{m[1]}{MARK} only the logprobs consumers need float32 logits.\n"
                   f"{m[1]}if {meta}.logprobs:\n{m[1]}    logits = logits.astype(jnp.float32)\n"),
        text, flags=re.MULTILINE)
    assert n == 1, runner
    runner.write_text(text)

    text = sampler.read_text()
    text, n = re.subn(
        rf"^ *{re.escape(MARK)} the runner passes the model's logits; widen them here, in this program,\n"
        rf" *{re.escape(MARK)} materialized .*\n"
        r" *(\w+) = \1\.astype\(jnp\.float32\)\n *\1 = jax\.lax\.optimization_barrier\(\1\)\n", "", text,
        flags=re.MULTILINE)
    assert n == 1, sampler
    sampler.write_text(text)

    text = precompile.read_text()
    text, n = re.subn(
        rf"^ *{re.escape(MARK)} the runner passes its own logits \(model dtype\) unless logprobs read sample\(\)'s\.\n"
        r"((?:.*\n){0,3}?.*?)jnp\.float32 if .*? else [\w.]+", r"\1jnp.float32", text, flags=re.MULTILINE)
    assert n == 1, precompile
    precompile.write_text(text)
