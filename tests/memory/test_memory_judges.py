"""The memory stage judged from outside: xprof's memory viewer on the real captures (every program's
peak and the buffers live at it), and jax's ``compiled.memory_analysis()`` on programs compiled here
(peak, temporaries, arguments, outputs, aliases)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

from hlo_doctor.memory import memory_of_compiled, read_memory
from hlo_doctor.trace import find_xplanes

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_traces"
SHARED = ROOT.parent / "shared" / "traces" / "gpu-h200"
"""The H200 field captures, in the shared folder beside the checkout where there is one."""
CAPTURES: list[object] = [SAMPLES / c for c in ("engine_b64_original_a", "engine_b64_fixed", "gpu_h200_original",
                                                "gpu_h200_seed_b512", "tpu_v5e_original", "tpu_v5e_fixed")]
CAPTURES += sorted(p for p in SHARED.iterdir() if p.is_dir()) if SHARED.is_dir() else [
    pytest.param(SHARED, marks=pytest.mark.skip(reason=f"no field captures beside the checkout ({SHARED.name})"),
                 id="field-captures")]
SMALL = 16 * 1024
"""xprof folds buffers under this size into one "small" entry (``kSmallBufferSize``)."""


def _xprof_memory(xplane: Path, tmp: Path, programs: list[str]) -> dict[str, dict[str, object]]:
    from xprof.convert import raw_to_tool_data

    copy = tmp / xplane.name
    shutil.copy(xplane, copy)
    raw_to_tool_data.xspace_to_tool_names([str(copy)])  # writes the HloProtos beside the copy
    out = {}
    for label in programs:
        data, _ = raw_to_tool_data.xspace_to_tool_data([str(copy)], "memory_viewer", {"module_name": label})
        out[label] = json.loads(data)
    return out


@pytest.mark.parametrize("capture", CAPTURES, ids=lambda p: p.name)
def test_peaks_and_buffers_at_peak_equal_xprofs_memory_viewer(capture: Path, tmp_path: Path) -> None:
    report = read_memory(capture)
    assert len(report.programs) >= 3 and not report.warnings and not report.missing
    xprof = _xprof_memory(find_xplanes(capture)[0], tmp_path, [p.label for p in report.programs])
    for p in report.programs:
        doc = xprof[p.label]
        assert p.peak_bytes == round(float(doc["peakHeapMib"]) * 2**20), p.label
        assert p.peak_position == int(doc.get("peakHeapSizePosition", 0)), p.label
        theirs = sorted((str(o["instructionName"]), round(float(o["logicalBufferSizeMib"]) * 2**20))
                        for o in doc.get("maxHeap", []) if o.get("instructionName"))
        mine = sorted((b.instruction, b.size_bytes) for b in p.buffers_at_peak if b.size_bytes >= SMALL)
        assert mine == theirs, p.label
        # every byte of the peak is in a buffer listed at it
        assert sum(b.size_bytes for b in p.buffers_at_peak) == p.peak_bytes, p.label
        assert len(p.heap) == len(doc.get("heapSizes", [0])), p.label


S = jax.ShapeDtypeStruct
PROGRAMS = {
    "eager widening returned": (lambda x: (x.astype(jnp.float32), jnp.argmax(x, -1)),
                                (S((256, 8192), jnp.bfloat16),), ()),
    "cache updated, not donated": (lambda c, x: (c.at[0].set(x), x * 2),
                                   (S((16, 512, 128), jnp.bfloat16), S((512, 128), jnp.bfloat16)), ()),
    "cache updated, donated": (lambda c, x: (c.at[0].set(x), x * 2),
                               (S((16, 512, 128), jnp.bfloat16), S((512, 128), jnp.bfloat16)), (0,)),
    "mlp with a temporary": (lambda w1, w2, x: jnp.tanh(x @ w1) @ w2,
                             (S((512, 2048), jnp.float32), S((2048, 512), jnp.float32), S((128, 512), jnp.float32)),
                             ()),
    "softmax sample": (lambda x: jax.random.categorical(jax.random.key(0), jax.nn.log_softmax(x)),
                       (S((64, 32000), jnp.float32),), ()),
}


@pytest.mark.parametrize("name", list(PROGRAMS))
def test_compiled_program_memory_equals_jax_memory_analysis(name: str) -> None:
    f, args, donate = PROGRAMS[name]
    compiled = jax.jit(f, donate_argnums=donate).lower(*args).compile()
    stats = compiled.memory_analysis()
    p = memory_of_compiled(compiled, name=name)
    assert p.peak_bytes == stats.peak_memory_in_bytes
    assert p.temporary_bytes == stats.temp_size_in_bytes
    assert p.argument_bytes == stats.argument_size_in_bytes
    assert p.output_bytes == stats.output_size_in_bytes
    assert p.alias_bytes == stats.alias_size_in_bytes
    assert sum(b.size_bytes for b in p.buffers_at_peak) == p.peak_bytes
