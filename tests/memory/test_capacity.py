"""What freed bytes buy: the device's memory from the capture's own plane stats, the KV cache the
engine's captures show (judged by the engine's config), and the line a finding prints."""

from __future__ import annotations

from pathlib import Path

from hlo_doctor.engine.config import EngineConfig
from hlo_doctor.memory import read_memory
from hlo_doctor.memory.capacity import known_memory
from hlo_doctor.trace import find_xplanes
from hlo_doctor.trace.xplane_pb2 import XSpace

SAMPLES = Path(__file__).resolve().parents[2] / "sample_traces"


def _memory_size_stat(xplane: Path) -> int:
    space = XSpace.FromString(xplane.read_bytes())
    plane = next(p for p in space.planes if p.name.startswith("/device:GPU"))
    names = {k: v.name for k, v in plane.stat_metadata.items()}
    return next(int(s.uint64_value) for s in plane.stats if names.get(s.metadata_id) == "memory_size")


def test_device_memory_is_the_planes_own_figure_on_the_h200() -> None:
    run = SAMPLES / "gpu_h200_original"
    report = read_memory(run)
    assert report.device_kind == "NVIDIA H200"
    assert report.device_memory_bytes == _memory_size_stat(find_xplanes(run)[0])
    assert report.device_memory_source.startswith("device plane stats")
    assert known_memory("NVIDIA H200") is not None and known_memory("cpu") is None


def test_the_engines_kv_cache_and_a_tokens_bytes_match_its_config() -> None:
    cfg = EngineConfig()
    per_token = cfg.num_layers * 2 * cfg.num_kv_heads * cfg.head_dim * 2  # k and v, bf16
    for capture in ("engine_b64_original_a", "gpu_h200_original"):
        report = read_memory(SAMPLES / capture)
        kv = report.kv_cache
        assert kv is not None and len(kv.buffers) == cfg.num_layers
        assert kv.bytes_per_token == per_token
        assert kv.tokens(512 << 20) == (512 << 20) // per_token
        assert f"at {per_token} B per token" in report.capacity_note(512 << 20)
