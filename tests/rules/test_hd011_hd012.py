"""HD011 and HD012 on small JAX programs compiled, profiled and diagnosed on XLA:CPU.

``programs/greedy_softmax.py``: a greedy sampler taking the argmax of ``softmax(logits / T)``, the
same without the softmax, and one that returns the probabilities too. ``programs/prefill_logits.py``:
a prefill applying the LM head to every position and keeping the last, the same with the slice
first, one keeping half of the positions and one returning every position's logits. The HLO-only
tests compile other selections (log-softmax, top-k, argsort) and read the analysis directly.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from click.testing import CliRunner

from hlo_doctor.cli import main
from hlo_doctor.hlo import parse_module
from hlo_doctor.hlo.result_slices import is_matmul_op, partial_read
from hlo_doctor.hlo.selection_cost import fix_text, fused_share, source_share
from hlo_doctor.hlo.selection_flow import monotone_maps
from hlo_doctor.lint import Context, load_rulebook, run_rule

PROGRAMS = Path(__file__).parent / "programs"
BOOK = load_rulebook()


def _profile_and_diagnose(target: str, out: Path) -> tuple[dict[str, Any], dict[str, float]]:
    """The diagnosis (JSON) of one profiled target, and its op-stats table: op -> time per step."""
    runner = CliRunner()
    result = runner.invoke(main, ["profile", f"{PROGRAMS / target}", "--steps", "3", "--warmup", "1",
                                  "--out", str(out), "--format", "json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    result = runner.invoke(main, ["diagnose", str(out), "--format", "json", "--select", "HD011,HD012",
                                  "--no-what-if"],
                           catch_exceptions=False)
    assert result.exit_code in (0, 1), result.output
    with (out / "opstats.csv").open() as fh:
        table = {row["op"]: float(row["time_per_step_us"]) for row in csv.DictReader(fh)}
    return json.loads(result.stdout), table


def _line(program: str, text: str) -> int:
    lines = (PROGRAMS / program).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)


def _codes(doc: dict[str, Any], code: str) -> list[dict[str, Any]]:
    return [f for f in doc["findings"] if f["code"] == code]


# -- HD011 on a profiled sampler ------------------------------------------------------------------------

def test_hd011_softmax_before_argmax(tmp_path: Path) -> None:
    doc, table = _profile_and_diagnose("greedy_softmax.py:step", tmp_path / "run")
    [f] = _codes(doc, "HD011")
    extra = f["extra"]
    assert f["module"] == "jit_sample" and extra["selection"] == "argmax"
    assert extra["selection_op"] == "iota_reduce_fusion"
    # The max+exp fusion, the sum, the divide of the sum and 1/T: not the argmax's own reduce.
    assert set(extra["map_ops"]) == {"ynn_fusion.1", "ynn_fusion", "broadcast_divide_fusion", "wrapped_divide"}
    assert f["op"] == max(extra["map_ops"], key=lambda op: table[op])
    measured = sum(table[op] for op in extra["map_ops"])
    assert extra["map_ops_us"] == pytest.approx(measured, rel=1e-3)
    # The multiply by 1/sum fused into the argmax is counted as free (measured so on XLA:CPU).
    assert extra["fused_in_selection_share"] == 0 and extra["fused_in_source_us"] == 0
    assert f["recoverable_us"] == pytest.approx(measured, rel=1e-3)
    assert f["source"].endswith(f"greedy_softmax.py:{_line('greedy_softmax.py', 'jax.nn.softmax(')}")
    assert "take argmax of the logits directly" in f["message"]


def test_hd011_gone_without_the_softmax(tmp_path: Path) -> None:
    doc, _ = _profile_and_diagnose("greedy_softmax.py:step_fixed", tmp_path / "run")
    assert not _codes(doc, "HD011")


def test_hd011_kept_where_the_probabilities_are_returned(tmp_path: Path) -> None:
    doc, _ = _profile_and_diagnose("greedy_softmax.py:step_probs", tmp_path / "run")
    assert not _codes(doc, "HD011")


# -- HD012 on a profiled prefill ------------------------------------------------------------------------

def test_hd012_lm_head_over_every_position(tmp_path: Path) -> None:
    doc, table = _profile_and_diagnose("prefill_logits.py:step", tmp_path / "run")
    [f] = _codes(doc, "HD012")
    assert f["module"] == "jit_prefill" and f["op"] == "ynn_fusion"
    assert f["extra"]["producer_shape"] == "f32[64,32000]"
    assert f["extra"]["kept_fraction"] == pytest.approx(1 / 16)
    assert f["extra"]["slices"] == ["slice.0 [0:4], [15:16], [0:32000]"]
    assert f["recoverable_us"] == pytest.approx(15 / 16 * table["ynn_fusion"], rel=1e-3)
    assert f["source"].endswith(f"prefill_logits.py:{_line('prefill_logits.py', 'logits = h @ w')}")
    assert "x[:, -1:] @ W" in f["message"]


@pytest.mark.parametrize("target", ["step_fixed", "step_half", "step_all"])
def test_hd012_not_when_the_result_is_kept(target: str, tmp_path: Path) -> None:
    doc, _ = _profile_and_diagnose(f"prefill_logits.py:{target}", tmp_path / "run")
    assert not _codes(doc, "HD012")


# -- the analyses on other selections, compiled only -----------------------------------------------------

def _compiled(f: Callable[..., Any], *shapes: tuple[tuple[int, ...], Any]) -> Any:
    args = [jax.ShapeDtypeStruct(s, d) for s, d in shapes]
    text = jax.jit(f).lower(*args).compile().as_text()
    assert text is not None
    return parse_module(text)


_LOGITS = ((8, 4096), jnp.float32)


@pytest.mark.parametrize(("name", "f", "kind"), [
    ("log_softmax", lambda x: jnp.argmax(jax.nn.log_softmax(x), -1), "argmax"),
    ("argmin_of_exp", lambda x: jnp.argmin(jnp.exp(x - x.max(-1, keepdims=True)), -1), "argmin"),
    ("top_k_indices", lambda x: jax.lax.top_k(jax.nn.softmax(x / 0.7), 4)[1], "top-k"),
    ("argsort", lambda x: jnp.argsort(jax.nn.softmax(x), -1)[:, -4:], "sort"),
])
def test_monotone_maps_found(name: str, f: Callable[..., Any], kind: str) -> None:
    m = _compiled(f, _LOGITS)
    [found] = list(monotone_maps(m))
    assert found.kind == kind and found.ops, name


@pytest.mark.parametrize(("name", "f"), [
    ("top_k_values_read", lambda x: jax.lax.top_k(jax.nn.softmax(x), 4)),
    ("scale_only", lambda x: jnp.argmax(x / 0.7, -1)),
    ("negative_scale", lambda x: jnp.argmax(jnp.exp(x) * -2.0, -1)),
    ("max_value_read", lambda x: jnp.max(jax.nn.softmax(x), -1)),
    # A softmax over the vocabulary, the argmax over the batch: its per-row sums vary along the batch.
    ("other_dimension", lambda x: jnp.argmax(jax.nn.softmax(x, -1), 0)),
])
def test_monotone_maps_not_found(name: str, f: Callable[..., Any]) -> None:
    assert not list(monotone_maps(_compiled(f, _LOGITS))), name


def test_an_exp_fused_into_the_argmax_is_a_share_of_it() -> None:
    # argmax(exp(x)): the exp is inside the argmax's fusion, no op of its own. It counts as two of
    # the fusion's per-element instructions against the iota, the reduce and the reducer's nine.
    m = _compiled(lambda x: jnp.argmax(jnp.exp(x), -1), _LOGITS)
    [found] = list(monotone_maps(m))
    assert not found.ops and [i.opcode for i in found.fused] == ["exponential"]
    assert fused_share(m, found) == pytest.approx(2 / 13)


def test_a_soft_cap_fused_into_the_argmax() -> None:
    # recurrentgemma's 30 * tanh(x / 30) before its greedy argmax, all fused into the argmax: the
    # tanh counts two, the multiplies by the cap nothing, against the iota, reduce and reducer.
    m = _compiled(lambda x: jnp.argmax(30.0 * jnp.tanh(x / 30.0), -1), _LOGITS)
    [found] = list(monotone_maps(m))
    assert {i.opcode for i in found.fused} == {"tanh", "multiply"} and not found.ops
    assert fused_share(m, found) == pytest.approx(2 / 13)
    assert fix_text(found).startswith("take argmax of the logits directly (argmax(c*tanh(x/c)) == argmax(x))")


def test_a_softmax_fused_into_the_matmul() -> None:
    # XLA:CPU fuses the logits matmul with the softmax's max, subtract and exp: that op computes the
    # input too, so it is not an op of the map's own; its exp (two) and max (one) per element are
    # weighed against the argmax fusion's twelve instructions (multiply, iota, reduce, reducer).
    def sample(h: jax.Array, w: jax.Array) -> jax.Array:
        return jnp.argmax(jax.nn.softmax((h @ w) / 0.7, axis=-1), axis=-1)
    m = _compiled(sample, ((8, 64), jnp.float32), ((64, 4096), jnp.float32))
    [found] = list(monotone_maps(m))
    assert found.source.opcode == "dot" and found.source_op.opcode == "fusion"
    assert found.source_op not in found.ops
    assert {i.opcode for i in found.in_source} >= {"exponential", "reduce"}
    assert source_share(m, found) == pytest.approx(3 / 12)


def test_a_column_shift_is_not_part_of_the_map() -> None:
    # x - max over the batch varies along the vocabulary: the map stops there, at the subtract;
    # only the exp after it is a map the argmax does not need (fused into the same op).
    m = _compiled(lambda x: jnp.argmax(jnp.exp(x - x.max(0, keepdims=True)), -1), _LOGITS)
    [found] = list(monotone_maps(m))
    assert [s.opcode for s in found.steps] == ["exponential"] and found.source.opcode == "subtract"
    assert not found.ops and [i.opcode for i in found.in_source] == ["exponential"]


def test_partial_read_counts_every_slice() -> None:
    # Two slices that together read the whole product (what XLA's dot merger leaves): all kept.
    def split(h: jax.Array, w: jax.Array) -> tuple[jax.Array, jax.Array]:
        y = h @ w
        return jnp.argmax(y[:8], -1), jnp.argmax(y[8:], -1)
    m = _compiled(split, ((16, 64), jnp.float32), ((64, 4096), jnp.float32))
    reads = [partial_read(m, op) for op in m.entry.instructions if is_matmul_op(m, op)]
    assert reads and all(r is not None and r.kept_fraction == 1.0 for r in reads)
    hd012 = BOOK.get("HD012")
    assert hd012 is not None and not run_rule(hd012, Context(modules=(m,), kind="hlo"))
