"""HD020 on a real decode step that scans over stacked layers with its KV cache as the scan's xs and ys.

``programs/scan_cache.py`` holds the step (``jax.lax.scan`` over 4 layers, the cache a scanned input
and output, donated) and the same step with the stacked cache in the scan's carry, updated in place;
both give the same cache and output. Profiled and diagnosed on XLA:CPU through the CLI.
``programs/flax_scan_decoder.cpu_after_optimizations.txt.gz`` is XLA:CPU's optimized HLO of
``benchmarks/field/flax_scan_decoder.py`` (flax 0.12.8's linen ``nn.scan`` over 4 layers, the cache a
scanned variable collection; 64 positions, width 32), paths shortened to ``/src`` and ``/venv``.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from profiled_rules import line_of, profile_and_diagnose

from hlo_doctor.hlo.scan_stacks import restacked_states
from hlo_doctor.lint import load_context, load_rulebook, run_rule
from hlo_doctor.lint.op_union import overlap_ratio

PROGRAM = Path(__file__).parent / "programs" / "scan_cache.py"


def _profile_and_diagnose(target: str, out: Path) -> dict:  # type: ignore[type-arg]
    return profile_and_diagnose(PROGRAM, target, out)


def _line(text: str) -> int:
    return line_of(PROGRAM, text)


def test_hd020_one_finding_at_the_scan_sized_by_what_carrying_removes(tmp_path: Path) -> None:
    run = tmp_path / "run"
    doc = _profile_and_diagnose("step", run)
    [found] = [f for f in doc["findings"] if f["code"] == "HD020"]
    extra = found["extra"]
    assert found["module"] == "jit__scan" and found["shape"].startswith("f32[4,4,256,64]")
    assert found["source"].endswith(f"scan_cache.py:{_line('jax.lax.scan(body, x, (_W, cache))')}")
    assert extra["update_source"].endswith(f"scan_cache.py:{_line('layer_cache = jax.lax.dynamic_update_slice')}")
    assert extra["fill"] and extra["output_index"] != extra["input_index"]

    ctx = load_context(run)
    module = next(m for m in ctx.modules if m.name == "jit__scan")
    [state] = restacked_states(module)
    # What carrying the stack removes: the slice of the layer, its copy, the write of the whole layer,
    # the fill before the loop; the write of the new position stays.
    removed = {op.name for op in state.removed}
    assert set(extra["ops"]) == removed
    assert state.read.name in removed and state.writer.name in removed and state.fill is not None
    assert any(op.opcode == "copy" for op in state.removed)
    assert state.updates and not {u.name for u in state.updates} & removed
    # Sized from those ops' own rows: their summed time scaled by their union over their sum.
    times = [t.time_per_step_us for name in extra["timed_ops"] if (t := ctx.op_timing(module, name))]
    ratio = overlap_ratio(ctx, module.name, extra["timed_ops"])
    assert ratio is not None and extra["summed_op_us_per_step"] == pytest.approx(sum(times), abs=0.1)
    assert found["recoverable_us"] == pytest.approx(sum(times) * ratio, rel=1e-3)
    assert found["recoverable_us"] > found["time_per_step_us"]  # more than the write alone
    # One cause, one finding: no loop-carried copy or rebuild reported on the same ops.
    assert not [f for f in doc["findings"] if f["code"] in ("HD010", "HD013")]


def test_hd020_silent_when_the_cache_is_carried(tmp_path: Path) -> None:
    doc = _profile_and_diagnose("step_in_place", tmp_path / "run")
    assert not [f for f in doc["findings"] if f["code"] in ("HD020", "HD010", "HD013")]


def test_hd020_on_a_flax_nn_scan_decoder(tmp_path: Path) -> None:
    name = "flax_scan_decoder.cpu_after_optimizations.txt"
    path = tmp_path / name
    path.write_bytes(gzip.decompress((PROGRAM.parent / f"{name}.gz").read_bytes()))
    ctx = load_context(path)
    book = load_rulebook()
    [found] = run_rule(book.get("HD020"), ctx)  # type: ignore[arg-type]
    extra = dict(found.extra)
    assert found.shape.startswith("f32[4,4,64,32]")
    # The line of the nn.scan call and of the cache update, not flax's own frames.
    assert found.source.endswith("benchmarks/field/flax_scan_decoder.py:44")  # layers(name="layers")(x, t)
    assert extra["update_source"].endswith("benchmarks/field/flax_scan_decoder.py:33")  # cache.value = ...
    assert extra["fill"] and "copy.15" in extra["ops"]
    assert not run_rule(book.get("HD013"), ctx) and not run_rule(book.get("HD010"), ctx)  # type: ignore[arg-type]


def _optimized(fn, *args):  # type: ignore[no-untyped-def]
    import jax

    from hlo_doctor.hlo import parse_modules

    return parse_modules(jax.jit(fn, donate_argnums=0).lower(*args).compile().as_text())


def test_hd020_reads_the_layer_index_a_shift_is_not_a_restack() -> None:
    """XLA:CPU's own HLO: a reverse scan reads and writes layer L-1-i (one finding); a ``fori_loop``
    writing the layer read at (i + 1) % L into slot i is a shift that no update in place does."""
    import jax
    import jax.numpy as jnp

    layers = 4

    def layer(h, c):  # type: ignore[no-untyped-def]
        c = jax.lax.dynamic_update_slice(c, h[:, None, :], (0, 3, 0))
        return jnp.tanh(h + c[:, 0, :]), c

    def reverse_scan(cache, x):  # type: ignore[no-untyped-def]
        h, cache = jax.lax.scan(layer, x, cache, reverse=True)
        return cache, h

    def shift(cache, x):  # type: ignore[no-untyped-def]
        def body(i, ys):  # type: ignore[no-untyped-def]
            c = jax.lax.dynamic_index_in_dim(cache, (i + 1) % layers, keepdims=False)
            c = jax.lax.dynamic_update_slice(c, x[:, None, :], (0, 3, 0))
            return jax.lax.dynamic_update_index_in_dim(ys, c, i, 0)
        return jax.lax.fori_loop(0, layers, body, jnp.zeros_like(cache)), x

    args = (jnp.zeros((layers, 4, 32, 8)), jnp.ones((4, 8)))
    assert len([s for m in _optimized(reverse_scan, *args) for s in restacked_states(m)]) == 1
    assert not [s for m in _optimized(shift, *args) for s in restacked_states(m)]
