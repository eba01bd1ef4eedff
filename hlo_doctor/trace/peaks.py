"""A device's peak FLOP/s and memory bandwidth: from its trace plane, else a table of known chips.

Where the numbers come from, in order:

1. The device plane's own stats. libtpu writes ``peak_teraflops_per_second`` and
   ``peak_hbm_bw_gigabytes_per_second`` on every ``/device:TPU:N`` plane (xprof reads them in
   ``convert/xplane_to_op_stats.cc``). A CUPTI plane (``/device:GPU:N``) carries
   ``memory_bandwidth`` (bytes/s), ``clock_rate`` (kHz), ``core_count`` (SMs) and
   ``compute_cap_major``/``compute_cap_minor``: the bandwidth is read as is, and the peak FLOP/s is
   derived as xprof derives it (``utils/cuda_type_utils.cc``): SMs x clock x the dense FP16/BF16
   tensor-core FLOPs one SM does per cycle on that architecture (:data:`_SM_FLOPS_PER_CYCLE`, from
   NVIDIA's architecture whitepapers).
2. :data:`KNOWN_CHIPS`: vendor figures for chips whose trace does not say (dense BF16 FLOP/s, HBM
   bandwidth), matched on the device kind the trace names.
3. Nothing: the peak is unknown (XLA:CPU traces always: a host's peak depends on its cores, vector
   units and memory channels, none of which the trace states).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class DevicePeaks:
    """One device's peak rates; either may be None (unknown)."""

    tflops: float | None
    """Peak FLOP/s, in TFLOP/s (10**12)."""
    hbm_gbps: float | None
    """Peak memory (HBM) bandwidth, in GB/s (10**9 bytes/s, as vendors and xprof's plane stats give it)."""
    source: str
    """Where the figures come from, for people (``device plane stats``, ``known chips: TPU v5e``...)."""

    @property
    def ridge_flop_per_byte(self) -> float | None:
        """The operational intensity where the roofline turns: peak FLOP/s over peak bytes/s."""
        if not self.tflops or not self.hbm_gbps:
            return None
        return self.tflops * 1e12 / (self.hbm_gbps * 1e9)


@dataclass(frozen=True, slots=True)
class KnownChip:
    """A chip's vendor figures: dense BF16 peak and HBM bandwidth, and where they are published."""

    name: str
    pattern: str
    """Regular expression (case-insensitive) on the device kind the trace names."""
    tflops: float
    hbm_gbps: float
    reference: str


# Order matters: the first match wins (an NVL or PCIe part before the SXM part of the same name).
KNOWN_CHIPS: tuple[KnownChip, ...] = (
    KnownChip("TPU v6e", r"\bv6 ?(lite|e)\b|trillium", 918.0, 1640.0,
              "cloud.google.com/tpu/docs/v6e: 918 TFLOP/s BF16, 1640 GB/s HBM per chip"),
    KnownChip("TPU v5p", r"\bv5p\b|\btpu v5$", 459.0, 2765.0,
              "cloud.google.com/tpu/docs/v5p: 459 TFLOP/s BF16, 2765 GB/s HBM per chip"),
    KnownChip("TPU v5e", r"\bv5 ?(lite|e)\b|v5litepod", 197.0, 819.0,
              "cloud.google.com/tpu/docs/v5e: 197 TFLOP/s BF16, 819 GB/s HBM per chip"),
    KnownChip("TPU v4", r"\btpu v4\b", 275.0, 1200.0,
              "cloud.google.com/tpu/docs/v4: 275 TFLOP/s BF16, 1200 GB/s HBM per chip"),
    KnownChip("H200 NVL", r"\bh200\b.*\bnvl\b", 835.5, 4800.0,
              "nvidia.com/en-us/data-center/h200: H200 NVL 1671 TFLOP/s BF16 with sparsity (835.5 dense), 4.8 TB/s"),
    KnownChip("H200 SXM", r"\bh200\b", 989.5, 4800.0,
              "nvidia.com/en-us/data-center/h200: H200 SXM 1979 TFLOP/s BF16 with sparsity (989.5 dense), 4.8 TB/s"),
    KnownChip("H100 NVL", r"\bh100\b.*\bnvl\b", 835.5, 3900.0,
              "nvidia.com/en-us/data-center/h100: H100 NVL 1671 TFLOP/s BF16 with sparsity (835.5 dense), 3.9 TB/s"),
    KnownChip("H100 PCIe", r"\bh100\b.*\bpcie\b", 756.5, 2000.0,
              "nvidia.com/en-us/data-center/h100: H100 PCIe 1513 TFLOP/s BF16 with sparsity (756.5 dense), 2 TB/s"),
    KnownChip("H100 SXM", r"\bh100\b", 989.5, 3350.0,
              "nvidia.com/en-us/data-center/h100: H100 SXM 1979 TFLOP/s BF16 with sparsity (989.5 dense), 3.35 TB/s"),
    KnownChip("A100 80GB PCIe", r"\ba100\b.*\b80\s?gb\b.*\bpcie\b|\ba100\b.*\bpcie\b.*\b80\s?gb\b", 312.0, 1935.0,
              "nvidia.com/en-us/data-center/a100: A100 80GB PCIe 312 TFLOP/s BF16, 1935 GB/s"),
    KnownChip("A100 80GB SXM", r"\ba100\b.*\b80\s?gb\b", 312.0, 2039.0,
              "nvidia.com/en-us/data-center/a100: A100 80GB SXM 312 TFLOP/s BF16, 2039 GB/s"),
    KnownChip("A100 40GB", r"\ba100\b", 312.0, 1555.0,
              "nvidia.com/en-us/data-center/a100 (datasheet): A100 40GB 312 TFLOP/s BF16, 1555 GB/s"),
)

# Dense FP16/BF16 tensor-core FLOPs per SM per clock cycle, by CUDA compute capability (NVIDIA
# architecture whitepapers: Volta GV100, Turing TU102, Ampere GA100/GA102, Ada AD102, Hopper GH100,
# Blackwell). The largest rate of an SM, as xprof takes it. A capability between two entries uses
# the one below it.
_SM_FLOPS_PER_CYCLE: tuple[tuple[tuple[int, int], int], ...] = (
    ((7, 0), 1024), ((7, 5), 1024), ((8, 0), 2048), ((8, 6), 1024), ((8, 9), 1024), ((9, 0), 4096),
    ((10, 0), 8192),
)


def known_chip(device_kind: str) -> KnownChip | None:
    """The :data:`KNOWN_CHIPS` entry for a device kind (``TPU v5 lite``, ``NVIDIA H200``), or None."""
    kind = device_kind.strip()
    if not kind:
        return None
    for chip in KNOWN_CHIPS:
        if re.search(chip.pattern, kind, re.IGNORECASE):
            return chip
    return None


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    return number if number > 0 else None


def _cuda_sm_flops_per_cycle(major: int, minor: int) -> int | None:
    best = None
    for (cc_major, cc_minor), flops in _SM_FLOPS_PER_CYCLE:
        if (cc_major, cc_minor) <= (major, minor):
            best = flops
    return best


def _gpu_tflops(stats: dict[str, object]) -> tuple[float | None, str]:
    """Peak TFLOP/s of a CUPTI plane from its clock, SM count and compute capability (xprof's way)."""
    clock_khz, sms = _number(stats.get("clock_rate")), _number(stats.get("core_count"))
    major, minor = stats.get("compute_cap_major"), stats.get("compute_cap_minor")
    if clock_khz is None or sms is None or not isinstance(major, int) or isinstance(major, bool):
        return None, ""
    per_cycle = _cuda_sm_flops_per_cycle(major, minor if isinstance(minor, int) else 0)
    if per_cycle is None:
        return None, ""
    tflops = sms * clock_khz * 1e3 * per_cycle / 1e12
    return tflops, (f"{sms:.0f} SMs x {clock_khz / 1e6:.2f} GHz x {per_cycle} FLOP/cycle/SM "
                    f"(compute capability {major}.{minor})")


def peaks_from_plane(stats: Iterable[tuple[str, object]]) -> DevicePeaks | None:
    """A device plane's peaks from its stats; None when the plane states neither rate."""
    values = dict(stats)
    tflops = _number(values.get("peak_teraflops_per_second"))
    gbps = _number(values.get("peak_hbm_bw_gigabytes_per_second"))
    how: list[str] = []
    if tflops is not None:
        how.append("peak_teraflops_per_second")
    if gbps is not None:
        how.append("peak_hbm_bw_gigabytes_per_second")
    if gbps is None and (bandwidth := _number(values.get("memory_bandwidth"))) is not None:
        gbps = bandwidth / 1e9
        how.append("memory_bandwidth")
    if tflops is None:
        tflops, derived = _gpu_tflops(values)
        if derived:
            how.append(f"FLOP/s from {derived}")
    if tflops is None and gbps is None:
        return None
    return DevicePeaks(tflops, gbps, "device plane stats: " + ", ".join(how))


def device_peaks(plane: DevicePeaks | None, device_kind: str, backend: str) -> DevicePeaks | None:
    """The peaks to use: the plane's where it states both, each missing one from :data:`KNOWN_CHIPS`;
    None on XLA:CPU or an unknown chip without plane stats."""
    if backend == "cpu":
        return None
    chip = known_chip(device_kind)
    if plane is not None and plane.tflops is not None and plane.hbm_gbps is not None:
        return plane
    if chip is None:
        return plane
    if plane is None:
        return DevicePeaks(chip.tflops, chip.hbm_gbps, f"known chips: {chip.name} ({chip.reference})")
    return DevicePeaks(plane.tflops if plane.tflops is not None else chip.tflops,
                       plane.hbm_gbps if plane.hbm_gbps is not None else chip.hbm_gbps,
                       f"{plane.source}; the rest from known chips: {chip.name} ({chip.reference})")
