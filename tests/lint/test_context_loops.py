"""A finding on an op inside a decode loop's body is timed as that op, not as the whole loop.

XLA runs a ``while`` body op by op, and a trace has an event (a row of the op table) for each body op
under its own name; only fusions, reduces and the like execute what they call as one op. Judged on
what XLA:CPU compiled and traced for a real ``jax.lax.fori_loop`` decode loop.
"""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp

from hlo_doctor.capture import capture_callable
from hlo_doctor.hlo.reductions import selection_reduce_kind
from hlo_doctor.lint import Rule, Severity, load_context

STEPS, TRIPS = 2, 4


class _Probe(Rule):
    """Probe."""

    code = "XX002"
    name = "probe"
    severity = Severity.LOW


def test_an_op_in_a_loop_body_is_timed_as_itself(tmp_path: Path) -> None:
    w = jax.random.normal(jax.random.PRNGKey(0), (64, 4096), jnp.float32)
    h0 = jax.random.normal(jax.random.PRNGKey(1), (8, 64), jnp.float32)

    @jax.jit
    def decode(h: jax.Array) -> tuple[jax.Array, jax.Array]:
        def body(i: jax.Array, carry: tuple[jax.Array, jax.Array]) -> tuple[jax.Array, jax.Array]:
            h, toks = carry
            tok = jnp.argmax(h @ w, axis=-1)
            return h + w[:, :64][tok % 64] * 0.01, toks.at[:, i].set(tok)

        return jax.lax.fori_loop(0, TRIPS, body, (h, jnp.zeros((8, TRIPS), jnp.int32)))

    run = capture_callable(lambda: decode(h0), steps=STEPS, warmup=1, out_dir=tmp_path / "run", target="loop")
    ctx = load_context(run)
    module = next(m for m in ctx.modules if m.name == "jit_decode")
    loop = next(i for i in module.entry.instructions if i.opcode == "while")
    argmax = next(i for i in module.instructions() if selection_reduce_kind(module, i) == "argmax")

    op = ctx.entry_op(module, argmax)
    assert op is not loop and op.computation != module.entry_name  # the fusion in the body (or the reduce)
    timing = ctx.op_timing(module, op.name)
    assert timing is not None, f"no row for {op.name} in the op table"
    assert timing.occurrences == STEPS * TRIPS  # once per trip of every traced step
    finding = ctx.finding(_Probe, module, argmax, "m")
    assert finding.op == op.name and finding.time_per_step_us == timing.time_per_step_us
    loop_timing = ctx.op_timing(module, loop.name)
    assert loop_timing is None or loop_timing.occurrences == STEPS
