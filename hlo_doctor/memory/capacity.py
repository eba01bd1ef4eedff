"""What freed bytes buy: the device's memory (its plane's ``memory_size`` stat, else a table of known
chips) and the KV cache the capture shows (the large donated state of the step's programs), so that
a number of bytes becomes a number of tokens of cache.

The cache is recognised, not declared: arguments of 1 MiB or more that a program of the step takes
and returns in place (donated), of rank 3 or more. A token's bytes are taken from each such buffer's
shape as serving stacks lay caches out (``[2?, ..., tokens..., kv_heads, head_dim]``): the element
size times its last two dimensions, times 2 when its first dimension is 2 (keys and values in one
array), summed over the buffers (the layers). Gemma 2B's 18 layers of 1 x 256 bf16 keys and values
give 18 KiB per token.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from hlo_doctor.hlo import DTYPE_BITS
from hlo_doctor.memory.model import KvCache, ProgramMemory

__all__ = ["KNOWN_MEMORY", "device_memory", "known_memory", "kv_cache"]

GIB = 1 << 30
MIN_CACHE_BYTES = 1 << 20

# (name, pattern on the device kind, bytes, where the figure is published). Order: first match wins.
KNOWN_MEMORY: tuple[tuple[str, str, int, str], ...] = (
    ("TPU v6e", r"\bv6 ?(lite|e)\b|trillium", 32 * GIB, "cloud.google.com/tpu/docs/v6e: 32 GiB HBM per chip"),
    ("TPU v5p", r"\bv5p\b|\btpu v5$", 95 * GIB, "cloud.google.com/tpu/docs/v5p: 95 GiB HBM per chip"),
    ("TPU v5e", r"\bv5 ?(lite|e)\b|v5litepod", 16 * GIB, "cloud.google.com/tpu/docs/v5e: 16 GiB HBM per chip"),
    ("TPU v4", r"\btpu v4\b", 32 * GIB, "cloud.google.com/tpu/docs/v4: 32 GiB HBM per chip"),
    ("H200", r"\bh200\b", 141 * 10**9, "nvidia.com/en-us/data-center/h200: 141 GB HBM3e"),
    ("H100 NVL", r"\bh100\b.*\bnvl\b", 94 * 10**9, "nvidia.com/en-us/data-center/h100: H100 NVL 94 GB"),
    ("H100", r"\bh100\b", 80 * 10**9, "nvidia.com/en-us/data-center/h100: 80 GB"),
    ("A100 80GB", r"\ba100\b.*\b80\s?gb\b", 80 * 10**9, "nvidia.com/en-us/data-center/a100: 80 GB"),
    ("A100 40GB", r"\ba100\b", 40 * 10**9, "nvidia.com/en-us/data-center/a100: 40 GB"),
)


def known_memory(device_kind: str) -> tuple[int, str] | None:
    """(bytes, source) of a known chip's memory for a device kind the trace names; None if unknown."""
    for name, pattern, size, ref in KNOWN_MEMORY:
        if device_kind.strip() and re.search(pattern, device_kind, re.IGNORECASE):
            return size, f"known chips: {name} ({ref})"
    return None


_KIND_STATS = ("gpu_device_name", "device_type_string", "device_kind", "chip_type")


def device_memory(xplanes: Sequence[Path]) -> tuple[str, int | None, str]:
    """(device kind, memory bytes, where the figure comes from) of the first device plane of the
    capture: its ``memory_size`` stat (CUPTI writes it), else the known chip; (``""``, None, ``""``)
    on XLA:CPU. Reads plane heads only (their events stay on disk)."""
    from hlo_doctor.trace.stream import XSpaceFile
    from hlo_doctor.trace.xspace import stat_items, stat_names

    for path in xplanes:
        with XSpaceFile(path) as space:
            for ref in space.planes:
                if not ref.name.startswith("/device:") or ref.name.startswith("/device:CUSTOM"):
                    continue
                plane = space.plane(ref)
                stats = dict(stat_items(plane.stats, stat_names(plane)))
                kind = next((str(stats[k]) for k in _KIND_STATS if stats.get(k)), "")
                size = stats.get("memory_size")
                if isinstance(size, int) and not isinstance(size, bool) and size > 0:
                    return kind, size, f"device plane stats: memory_size ({ref.name})"
                known = known_memory(kind)
                if known is not None:
                    return kind, known[0], known[1]
                if kind:
                    return kind, None, ""
    return "", None, ""


_SHAPE = re.compile(r"^([a-z0-9]+)\[([0-9,]*)\]")


def _token_bytes(shape: str) -> int:
    m = _SHAPE.match(shape)
    if m is None or not m.group(2):
        return 0
    dims = [int(d) for d in m.group(2).split(",")]
    bits = DTYPE_BITS.get(m.group(1), 0)
    if len(dims) < 3 or not bits:
        return 0
    per = bits * dims[-1] * dims[-2] // 8
    return per * (2 if dims[0] == 2 and len(dims) >= 4 else 1)


def kv_cache(programs: Iterable[ProgramMemory]) -> KvCache | None:
    """The step's KV cache: the program with the most donated bytes in large rank-3+ arguments."""
    best: KvCache | None = None
    for p in programs:
        if not p.runs_per_step and p.runs_per_step is not None:
            continue
        names, total, per_token = [], 0, 0
        for a in p.allocations:
            if a.category != "argument" or not a.live_out or a.size_bytes < MIN_CACHE_BYTES // 4:
                continue
            tb = _token_bytes(a.shape)
            if tb:
                names.append(a.instruction)
                total += a.size_bytes
                per_token += tb
        if total >= MIN_CACHE_BYTES and (best is None or total > best.total_bytes):
            best = KvCache(p.label, tuple(names), total, per_token)
    return best
