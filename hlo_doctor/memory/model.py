"""What the memory stage hands on: per program, its peak and where it goes (:class:`ProgramMemory`),
and a capture's programs together (:class:`MemoryReport`). Sizes are bytes, as XLA's buffer
assignment states them (compile-time figures: no noise)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["AllocationSummary", "KvCache", "MemoryReport", "PeakBuffer", "ProgramMemory"]


@dataclass(frozen=True, slots=True)
class PeakBuffer:
    """One buffer live at a program's peak."""

    logical_buffer_id: int
    size_bytes: int
    instruction: str
    """The defining instruction, with its shape index for a piece of a tuple (``fusion.3{1}``)."""
    opcode: str
    shape: str
    category: str
    """``argument``, ``output``, ``constant`` or ``temporary``."""
    source: str = ""
    """``file:line`` of the first frame outside the frameworks (empty without metadata)."""
    parameter_number: int | None = None
    """The argument's number, for an argument."""
    aliased: bool = False
    """An argument whose buffer the program also returns (donated and reused)."""

    def to_dict(self) -> dict[str, Any]:
        return {"logical_buffer_id": self.logical_buffer_id, "size_bytes": self.size_bytes,
                "instruction": self.instruction, "opcode": self.opcode, "shape": self.shape,
                "category": self.category, "source": self.source,
                "parameter_number": self.parameter_number, "aliased": self.aliased}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PeakBuffer:
        pn = d.get("parameter_number")
        return cls(int(d["logical_buffer_id"]), int(d["size_bytes"]), str(d.get("instruction", "")),
                   str(d.get("opcode", "")), str(d.get("shape", "")), str(d.get("category", "")),
                   str(d.get("source", "")), None if pn is None else int(pn), bool(d.get("aliased", False)))


@dataclass(frozen=True, slots=True)
class AllocationSummary:
    """One allocation of a program: what the argument/output/temporary totals are made of."""

    index: int
    size_bytes: int
    category: str
    parameter_number: int | None
    live_out: bool
    instruction: str
    """The largest buffer it holds (its defining instruction)."""
    shape: str
    instructions: tuple[str, ...] = ()
    """Every buffer it holds over the program (values that share it: an update written in place,
    a loop's state), by defining instruction and shape index."""

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "size_bytes": self.size_bytes, "category": self.category,
                "parameter_number": self.parameter_number, "live_out": self.live_out,
                "instruction": self.instruction, "shape": self.shape, "instructions": list(self.instructions)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> AllocationSummary:
        pn = d.get("parameter_number")
        return cls(int(d["index"]), int(d["size_bytes"]), str(d.get("category", "")),
                   None if pn is None else int(pn), bool(d.get("live_out", False)),
                   str(d.get("instruction", "")), str(d.get("shape", "")),
                   tuple(str(x) for x in d.get("instructions", ())))


@dataclass(frozen=True, slots=True)
class ProgramMemory:
    """One program's device memory, from its buffer assignment.

    ``peak_bytes`` is the simulated heap's highest point plus what lives for the whole program
    (arguments, outputs, constants), as xprof's memory viewer counts it; ``temporary_bytes`` is the
    size of the temporary allocations (what jax's ``memory_analysis().temp_size_in_bytes`` says),
    of which ``heap_peak_bytes`` is live at once.
    """

    module: str
    program_id: int | None
    peak_bytes: int
    heap_peak_bytes: int
    argument_bytes: int
    output_bytes: int
    alias_bytes: int
    """Bytes of arguments the program returns in place (donated buffers it reuses)."""
    temporary_bytes: int
    constant_bytes: int
    peak_position: int
    """The event, in program order, at which the heap reached its peak."""
    peak_instruction: str
    """The instruction whose event reached the peak."""
    buffers_at_peak: tuple[PeakBuffer, ...]
    """Largest first."""
    allocations: tuple[AllocationSummary, ...] = ()
    heap: tuple[int, ...] = ()
    """Simulated heap bytes over program order (one point per heap event, the last after the end),
    temporaries only: add :attr:`indefinite_bytes` for the whole."""
    heap_instructions: tuple[str, ...] = ()
    runs_per_step: float | None = None
    """How often the program ran per step of the capture (None when the capture has no op stats)."""
    host: str = ""
    error: str = ""
    """Why the buffer assignment could not be read (a malformed one); the figures are then zero."""

    @property
    def indefinite_bytes(self) -> int:
        return self.peak_bytes - self.heap_peak_bytes

    @property
    def label(self) -> str:
        return f"{self.module}({self.program_id})" if self.program_id is not None else self.module

    def to_dict(self, *, heap: bool = True) -> dict[str, Any]:
        d: dict[str, Any] = {
            "module": self.module, "program_id": self.program_id, "peak_bytes": self.peak_bytes,
            "heap_peak_bytes": self.heap_peak_bytes, "argument_bytes": self.argument_bytes,
            "output_bytes": self.output_bytes, "alias_bytes": self.alias_bytes,
            "temporary_bytes": self.temporary_bytes, "constant_bytes": self.constant_bytes,
            "peak_position": self.peak_position, "peak_instruction": self.peak_instruction,
            "runs_per_step": self.runs_per_step, "host": self.host, "error": self.error,
            "buffers_at_peak": [b.to_dict() for b in self.buffers_at_peak],
            "allocations": [a.to_dict() for a in self.allocations],
        }
        if heap:
            d["heap"] = list(self.heap)
            d["heap_instructions"] = list(self.heap_instructions)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ProgramMemory:
        pid = d.get("program_id")
        rps = d.get("runs_per_step")
        return cls(
            str(d["module"]), None if pid is None else int(pid), int(d.get("peak_bytes", 0)),
            int(d.get("heap_peak_bytes", 0)), int(d.get("argument_bytes", 0)), int(d.get("output_bytes", 0)),
            int(d.get("alias_bytes", 0)), int(d.get("temporary_bytes", 0)), int(d.get("constant_bytes", 0)),
            int(d.get("peak_position", 0)), str(d.get("peak_instruction", "")),
            tuple(PeakBuffer.from_dict(b) for b in d.get("buffers_at_peak", ())),
            tuple(AllocationSummary.from_dict(a) for a in d.get("allocations", ())),
            tuple(int(x) for x in d.get("heap", ())), tuple(str(x) for x in d.get("heap_instructions", ())),
            None if rps is None else float(rps), str(d.get("host", "")), str(d.get("error", "")))


@dataclass(frozen=True, slots=True)
class KvCache:
    """The KV cache a capture shows: its buffers, their bytes and a token's bytes."""

    program: str
    buffers: tuple[str, ...]
    total_bytes: int
    bytes_per_token: int

    def tokens(self, freed_bytes: int) -> int:
        """Tokens of cache that ``freed_bytes`` hold."""
        return freed_bytes // self.bytes_per_token if self.bytes_per_token > 0 else 0

    def to_dict(self) -> dict[str, Any]:
        return {"program": self.program, "buffers": list(self.buffers), "total_bytes": self.total_bytes,
                "bytes_per_token": self.bytes_per_token}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> KvCache:
        return cls(str(d.get("program", "")), tuple(str(b) for b in d.get("buffers", ())),
                   int(d.get("total_bytes", 0)), int(d.get("bytes_per_token", 0)))


@dataclass(frozen=True, slots=True)
class MemoryReport:
    """The programs of one capture (or of compiled programs) and their memory.

    ``programs`` lists those that ran in the capture's steps first (by runs per step, then peak),
    then the rest (compiled before the window: set-up, warm-up); ``missing`` names the programs
    whose HLO came without a buffer assignment.
    """

    origin: str
    programs: tuple[ProgramMemory, ...]
    backend: str = ""
    device_kind: str = ""
    device_memory_bytes: int | None = None
    """The device's memory (plane stats or the table of known chips); None when unknown."""
    missing: tuple[str, ...] = ()
    warnings: tuple[str, ...] = field(default=())
    device_memory_source: str = ""
    kv_cache: KvCache | None = None
    """The KV cache the capture shows (:func:`hlo_doctor.memory.capacity.kv_cache`), when it shows one."""

    def capacity_note(self, freed_bytes: int) -> str:
        """What ``freed_bytes`` buy: tokens of the capture's KV cache (and the share of the device's
        memory where it is known); empty without a cache."""
        from hlo_doctor.core.format import fmt_bytes

        kv = self.kv_cache
        if kv is None or kv.bytes_per_token <= 0 or freed_bytes <= 0:
            return ""
        tokens = kv.tokens(freed_bytes)
        count = f"{tokens / 1000:.0f}k" if tokens >= 10_000 else f"{tokens:,}"
        share = (f", {100 * freed_bytes / self.device_memory_bytes:.2g}% of the device's "
                 f"{fmt_bytes(self.device_memory_bytes)}" if self.device_memory_bytes else "")
        return f"~{count} more tokens of KV cache at {fmt_bytes(kv.bytes_per_token)} per token{share}"

    @property
    def step_programs(self) -> tuple[ProgramMemory, ...]:
        """The programs that ran in the capture's steps (all of them when the capture does not say)."""
        ran = tuple(p for p in self.programs if p.runs_per_step)
        return ran if ran or any(p.runs_per_step is not None for p in self.programs) else self.programs

    def program(self, module: str, program_id: int | None = None) -> ProgramMemory | None:
        """The program named ``module`` (and ``program_id`` when given)."""
        for p in self.programs:
            if p.module == module and (program_id is None or p.program_id is None or p.program_id == program_id):
                return p
        return None

    def to_dict(self, *, heap: bool = True) -> dict[str, Any]:
        return {"origin": self.origin, "backend": self.backend, "device_kind": self.device_kind,
                "device_memory_bytes": self.device_memory_bytes, "device_memory_source": self.device_memory_source,
                "kv_cache": self.kv_cache.to_dict() if self.kv_cache else None, "missing": list(self.missing),
                "warnings": list(self.warnings), "programs": [p.to_dict(heap=heap) for p in self.programs]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> MemoryReport:
        mem = d.get("device_memory_bytes")
        return cls(str(d.get("origin", "")), tuple(ProgramMemory.from_dict(p) for p in d.get("programs", ())),
                   str(d.get("backend", "")), str(d.get("device_kind", "")), None if mem is None else int(mem),
                   tuple(str(x) for x in d.get("missing", ())), tuple(str(x) for x in d.get("warnings", ())),
                   str(d.get("device_memory_source", "")),
                   KvCache.from_dict(d["kv_cache"]) if d.get("kv_cache") else None)
