"""Threat: an HLO module proto inside a capture that XLA's printer reads past (ids that point nowhere).

The module protos are real (XLA compiles a small function here); each damage is one an attacker can
make with a protobuf library: an operand id that names no instruction or one defined later, a called
computation that does not exist, a root that is none of the computation's instructions. Each is an input
error before any native code prints the module; the undamaged module prints as XLA prints it. Through the
CLI, an xplane carrying the damaged module is read without it, and the table's warnings say why.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

TRACE_TESTS = Path(__file__).resolve().parents[1] / "trace"
sys.path.insert(0, str(TRACE_TESTS))

from xspace_builder import SpaceBuilder, TpuCore, compile_module, field  # noqa: E402

from hlo_doctor.core.errors import InputError  # noqa: E402
from hlo_doctor.hlo.proto import _module_messages, module_problem, module_text_from_proto  # noqa: E402


def _fn(x: Any, y: Any) -> Any:
    import jax.numpy as jnp

    return jnp.tanh(x * y + 1).sum()


@pytest.fixture(scope="module")
def module() -> bytes:
    import jax
    import jax.numpy as jnp

    lowered = jax.jit(_fn).lower(jnp.ones((4, 4)), jnp.ones((4, 4))).compile()
    return bytes(lowered.runtime_executable().hlo_modules()[0].as_serialized_hlo_module_proto())


def _damaged(data: bytes, how: str) -> bytes:
    """``data`` with one reference broken, re-serialized with the unknown fields (all the rest) kept."""
    m = _module_messages().FromString(data)
    for comp in m.computations:
        for i, ins in enumerate(comp.instructions):
            if how == "operand out of range" and ins.operand_ids:
                ins.operand_ids[0] = 10**12
                return bytes(m.SerializeToString())
            if how == "operand defined later" and ins.operand_ids and i + 1 < len(comp.instructions):
                ins.operand_ids[0] = comp.instructions[len(comp.instructions) - 1].id
                return bytes(m.SerializeToString())
            if how == "missing computation" and ins.called_computation_ids:
                ins.called_computation_ids[0] = 777
                return bytes(m.SerializeToString())
        if how == "root missing":
            comp.root_id = 10**12
            return bytes(m.SerializeToString())
    raise AssertionError(f"no instruction to damage as {how}")


def test_the_real_module_is_sound_and_prints(module: bytes) -> None:
    assert module_problem(module) is None
    assert "ENTRY" in module_text_from_proto(module)


@pytest.mark.parametrize("how", ["operand out of range", "operand defined later", "missing computation",
                                 "root missing"])
def test_a_damaged_module_is_an_input_error(module: bytes, how: str) -> None:
    bad = _damaged(module, how)
    assert module_problem(bad) is not None
    with pytest.raises(InputError, match="malformed HLO module"):
        module_text_from_proto(field(1, bad), origin="x.xplane.pb")


def test_an_xplane_with_a_damaged_module_is_exit_2(module: bytes, tmp_path: Path) -> None:
    import jax.numpy as jnp
    from threats import cli

    real = compile_module(_fn, jnp.ones((4, 4)), jnp.ones((4, 4)))
    space = SpaceBuilder()
    bad = type(real)(real.name, field(1, _damaged(module, "operand out of range")), real.ops)
    space.add_module(bad, 1)
    core = TpuCore(space, 0)
    core.run(real, 1, 0.0, [(real.ops[0].name, 1000.0)], run_id=1)
    path = space.write(tmp_path)
    r = cli("stats", str(path), "--format", "json", timeout=120)
    # A bounded result: the module is left out and the table says why (never XLA's printer on it).
    assert r.returncode == 0 and "Traceback" not in r.stderr, (r.returncode, r.stderr[-1500:])
    warnings = json.loads(r.stdout)["warnings"]
    assert any("malformed HLO module" in w for w in warnings), warnings
