"""HLO modules parsed into instructions.

Input is HLO text as XLA prints it: ``jax.jit(f).lower(...).compile().as_text()``, the modules stored
in a trace's metadata plane (converted with :func:`module_text_from_proto`), or the optimized HLO
files of an ``--xla_dump_to`` directory. The parser keeps what the rules need: name, opcode, shape,
dtype, layout, operands, users, root/parameter, fusion bodies and metadata (``op_name`` and the
source file:line, resolved through the module's stack-frame tables when XLA prints those).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from hlo_doctor.core.errors import InputError

# Bytes per element. Sub-byte types are rounded up per element: a conservative read estimate.
DTYPE_BYTES: dict[str, float] = {
    "pred": 1, "s4": 0.5, "u4": 0.5, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2,
    "s32": 4, "u32": 4, "f32": 4, "s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16,
    "f8e4m3fn": 1, "f8e5m2": 1, "f8e4m3": 1, "f8e4m3b11fnuz": 1, "f8e5m2fnuz": 1, "f8e4m3fnuz": 1,
    "f8e3m4": 1, "f8e8m0fnu": 1, "f4e2m1fn": 0.5, "token": 0,
}
FLOAT_DTYPES = frozenset({"f16", "bf16", "f32", "f64", "f8e4m3fn", "f8e5m2", "f8e4m3", "f8e3m4"})

# Opcodes that do no arithmetic work of their own: plumbing around the real work.
PLUMBING_OPCODES = frozenset({
    "parameter", "tuple", "get-tuple-element", "constant", "bitcast", "after-all", "partition-id",
    "replica-id", "opt-barrier", "add-dependency",
})


@dataclass(frozen=True, slots=True)
class HloShape:
    """An HLO shape: an array ``f32[64,256000]{1,0}`` or a tuple of shapes."""

    dtype: str
    """Element type (``f32``, ``bf16``...), or ``tuple``."""
    dims: tuple[int, ...] = ()
    layout: str = ""
    """Minor-to-major layout as printed, without braces (``1,0``); empty when not printed."""
    elements: tuple[HloShape, ...] = ()
    """The element shapes of a tuple."""

    @property
    def is_tuple(self) -> bool:
        return self.dtype == "tuple"

    @property
    def num_elements(self) -> int:
        n = 1
        for d in self.dims:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        """Bytes of the whole value (sum over tuple elements)."""
        if self.is_tuple:
            return sum(e.nbytes for e in self.elements)
        return int(self.num_elements * DTYPE_BYTES.get(self.dtype, 4))

    def text(self, with_layout: bool = True) -> str:
        """The shape as HLO writes it."""
        if self.is_tuple:
            return "(" + ", ".join(e.text(with_layout) for e in self.elements) + ")"
        s = f"{self.dtype}[{','.join(str(d) for d in self.dims)}]"
        if with_layout and self.layout:
            s += "{" + self.layout + "}"
        return s

    def __str__(self) -> str:
        return self.text()


_ARRAY_SHAPE = re.compile(r"([a-z][a-z0-9]*)\[([^\]]*)\](?:\{([^}]*)\})?")


def parse_shape(text: str) -> HloShape:
    """Parse one HLO shape (array or nested tuple)."""
    shape, rest = _parse_shape_prefix(text.strip())
    if rest.strip():
        raise ValueError(f"trailing text after shape: {text!r}")
    return shape


def _parse_shape_prefix(text: str) -> tuple[HloShape, str]:
    text = text.lstrip()
    if text.startswith("("):
        elements: list[HloShape] = []
        rest = text[1:].lstrip()
        if rest.startswith(")"):
            return HloShape("tuple"), rest[1:]
        while True:
            element, rest = _parse_shape_prefix(rest)
            elements.append(element)
            rest = rest.lstrip()
            if rest.startswith(","):
                rest = rest[1:]
                continue
            if rest.startswith(")"):
                return HloShape("tuple", elements=tuple(elements)), rest[1:]
            raise ValueError(f"malformed tuple shape near {rest[:40]!r}")
    m = _ARRAY_SHAPE.match(text)
    if not m:
        raise ValueError(f"not an HLO shape: {text[:40]!r}")
    dtype, dims_text, layout = m.group(1), m.group(2), m.group(3) or ""
    dims: list[int] = []
    for d in dims_text.split(","):
        d = d.strip().lstrip("<=")
        if d and d != "?":
            dims.append(int(d))
    # Layouts may carry tiling/memory-space suffixes (``{1,0:T(8,128)}``): keep the dims part.
    layout = layout.split(":")[0]
    return HloShape(dtype, tuple(dims), layout), text[m.end():]


@dataclass(frozen=True, slots=True)
class HloInstruction:
    """One HLO instruction."""

    name: str
    opcode: str
    shape: HloShape
    operands: tuple[str, ...]
    computation: str
    """Name of the computation that holds it."""
    is_root: bool = False
    parameter_number: int | None = None
    called_computations: tuple[str, ...] = ()
    """Computations it calls: ``calls=`` of a fusion, ``to_apply=`` of a reduce, branches..."""
    fusion_kind: str = ""
    attributes: tuple[tuple[str, str], ...] = ()
    """Every other ``key=value`` attribute, as printed."""
    op_name: str = ""
    """The metadata's ``op_name`` (``jit(sample)/reduce``)."""
    source_file: str = ""
    source_line: int = 0
    raw: str = ""
    """The instruction's line, as printed."""

    @property
    def dtype(self) -> str:
        return self.shape.dtype

    @property
    def source(self) -> str:
        """``file:line`` from the metadata, or empty."""
        if not self.source_file:
            return ""
        return f"{self.source_file}:{self.source_line}" if self.source_line else self.source_file

    def attribute(self, key: str, default: str = "") -> str:
        for k, v in self.attributes:
            if k == key:
                return v
        return default


@dataclass(frozen=True, slots=True)
class HloComputation:
    """A computation: the entry, a fusion body, a reducer..."""

    name: str
    instructions: tuple[HloInstruction, ...]
    is_entry: bool = False
    is_fusion: bool = False
    """True when some fusion instruction of the module calls it."""

    @property
    def root(self) -> HloInstruction:
        for inst in self.instructions:
            if inst.is_root:
                return inst
        return self.instructions[-1]

    @property
    def parameters(self) -> list[HloInstruction]:
        params = [i for i in self.instructions if i.opcode == "parameter"]
        return sorted(params, key=lambda i: i.parameter_number or 0)


@dataclass(frozen=True, slots=True)
class HloModule:
    """A parsed HLO module with instruction and user indexes."""

    name: str
    computations: tuple[HloComputation, ...]
    entry_name: str
    input_output_alias: tuple[tuple[str, int], ...] = ()
    """(output index as printed, parameter number) pairs from ``input_output_alias``."""
    program_id: int | None = None
    text: str = ""
    _by_name: dict[str, HloInstruction] = field(default_factory=dict, repr=False, compare=False)
    _users: dict[str, tuple[str, ...]] = field(default_factory=dict, repr=False, compare=False)
    _computations: dict[str, HloComputation] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        by_name: dict[str, HloInstruction] = {}
        users: dict[str, list[str]] = {}
        for comp in self.computations:
            for inst in comp.instructions:
                by_name[_qualify(comp.name, inst.name)] = inst
                by_name.setdefault(inst.name, inst)
                for op in inst.operands:
                    users.setdefault(_qualify(comp.name, op), []).append(inst.name)
        object.__setattr__(self, "_by_name", by_name)
        object.__setattr__(self, "_users", {k: tuple(v) for k, v in users.items()})
        object.__setattr__(self, "_computations", {c.name: c for c in self.computations})

    @property
    def entry(self) -> HloComputation:
        return self._computations[self.entry_name]

    def computation(self, name: str) -> HloComputation | None:
        return self._computations.get(name)

    def instruction(self, name: str, computation: str | None = None) -> HloInstruction | None:
        """Look an instruction up by name (within ``computation`` when given)."""
        if computation is not None:
            return self._by_name.get(_qualify(computation, name))
        return self._by_name.get(name)

    def operands_of(self, inst: HloInstruction) -> list[HloInstruction]:
        out = []
        for op in inst.operands:
            found = self.instruction(op, inst.computation)
            if found is not None:
                out.append(found)
        return out

    def users_of(self, inst: HloInstruction) -> list[HloInstruction]:
        names = self._users.get(_qualify(inst.computation, inst.name), ())
        return [u for n in names if (u := self.instruction(n, inst.computation)) is not None]

    def fusion_body(self, inst: HloInstruction) -> HloComputation | None:
        """The computation a fusion calls, or None for a non-fusion."""
        if inst.opcode != "fusion" or not inst.called_computations:
            return None
        return self.computation(inst.called_computations[0])

    def instructions(self) -> Iterator[HloInstruction]:
        for comp in self.computations:
            yield from comp.instructions

    def entry_instructions(self) -> tuple[HloInstruction, ...]:
        return self.entry.instructions

    def is_live_out(self, inst: HloInstruction) -> bool:
        """True when ``inst``'s value is (part of) the entry computation's result."""
        if inst.computation != self.entry_name:
            return False
        root = self.entry.root
        if inst.name == root.name:
            return True
        if root.opcode == "tuple":
            return inst.name in root.operands
        return False

    def output_indices_of(self, inst: HloInstruction) -> list[int]:
        """Positions of ``inst`` in the entry's ROOT tuple (``[]`` when it is not an output)."""
        root = self.entry.root
        if root.name == inst.name:
            return [0]
        if root.opcode != "tuple":
            return []
        return [i for i, op in enumerate(root.operands) if op == inst.name]

    def aliased_parameters(self) -> set[int]:
        """Parameter numbers that an ``input_output_alias`` (donation) lets the output reuse."""
        return {p for _, p in self.input_output_alias}


def _qualify(computation: str, name: str) -> str:
    return f"{computation}::{name}"


# ---------------------------------------------------------------------------------------------
# Text parser
# ---------------------------------------------------------------------------------------------

_HEADER = re.compile(r"^\s*HloModule\s+([^\s,]+)(.*)$")
_COMPUTATION = re.compile(r"^\s*(ENTRY\s+)?%?([\w.\-]+)\s*(\(.*\)\s*->\s*.*)?\{\s*$")
_INSTRUCTION = re.compile(r"^\s*(ROOT\s+)?%?([\w.\-]+)\s*=\s*(.*)$")
_OPCODE = re.compile(r"([a-z][\w\-]*)\(")
_META_FIELD = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|[^\s}]+)')
_FILE_NAME = re.compile(r'^(\d+)\s+"(.*)"\s*$')
_FILE_LOCATION = re.compile(r"^(\d+)\s+\{(.*)\}\s*$")
_ALIAS = re.compile(r"\{([\d,\s]*)\}:\s*\((\d+)")


def _find_closing(text: str, start: int, open_ch: str = "(", close_ch: str = ")") -> int:
    """Index of the bracket closing ``text[start]`` (which is ``open_ch``), skipping quotes."""
    depth = 0
    i = start
    in_quote = False
    while i < len(text):
        c = text[i]
        if in_quote:
            if c == "\\":
                i += 2
                continue
            if c == '"':
                in_quote = False
        elif c == '"':
            in_quote = True
        elif c in "({[":
            depth += 1
        elif c in ")}]":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    raise ValueError(f"unbalanced brackets in {text[:60]!r}")


def _split_top_level(text: str) -> list[str]:
    """Split on commas that are not inside brackets or quotes."""
    parts: list[str] = []
    depth = 0
    in_quote = False
    cur: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if in_quote:
            cur.append(c)
            if c == "\\" and i + 1 < len(text):
                cur.append(text[i + 1])
                i += 2
                continue
            if c == '"':
                in_quote = False
        elif c == '"':
            in_quote = True
            cur.append(c)
        elif c in "({[":
            depth += 1
            cur.append(c)
        elif c in ")}]":
            depth -= 1
            cur.append(c)
        elif c == "," and depth == 0:
            parts.append("".join(cur).strip())
            cur = []
        else:
            cur.append(c)
        i += 1
    tail = "".join(cur).strip()
    if tail:
        parts.append(tail)
    return parts


@dataclass
class _SourceTables:
    files: dict[int, str] = field(default_factory=dict)
    locations: dict[int, tuple[int, int]] = field(default_factory=dict)  # id -> (file id, line)
    frames: dict[int, int] = field(default_factory=dict)  # frame id -> location id

    def resolve(self, frame_id: int) -> tuple[str, int]:
        loc = self.locations.get(self.frames.get(frame_id, -1))
        if loc is None:
            return "", 0
        return self.files.get(loc[0], ""), loc[1]


_COMMENT = re.compile(r"/\*.*?\*/")


def _parse_instruction(line: str, computation: str, tables: _SourceTables) -> HloInstruction:
    # XLA prints /*index=5*/ markers inside long tuple shapes and operand lists; they are not HLO.
    raw_line = line
    if "/*" in line:
        line = _COMMENT.sub("", line)
    m = _INSTRUCTION.match(line)
    if not m:
        raise ValueError(f"not an instruction: {line.strip()[:80]!r}")
    is_root = bool(m.group(1))
    name = m.group(2)
    shape, rest = _parse_shape_prefix(m.group(3))
    rest = rest.lstrip()
    om = _OPCODE.match(rest)
    if not om:
        raise ValueError(f"no opcode in {line.strip()[:80]!r}")
    opcode = om.group(1)
    open_idx = om.end() - 1
    close_idx = _find_closing(rest, open_idx)
    operand_text = rest[open_idx + 1:close_idx]
    attr_text = rest[close_idx + 1:].lstrip().lstrip(",")

    operands: list[str] = []
    parameter_number: int | None = None
    if opcode == "parameter":
        try:
            parameter_number = int(operand_text.strip())
        except ValueError:
            parameter_number = None
    elif opcode not in ("constant", "iota", "rng-get-and-update-state"):
        for tok in _split_top_level(operand_text):
            if not tok:
                continue
            ref = tok.split()[-1]
            operands.append(ref.lstrip("%"))

    called: list[str] = []
    fusion_kind = ""
    attributes: list[tuple[str, str]] = []
    op_name = ""
    source_file = ""
    source_line = 0
    for part in _split_top_level(attr_text):
        if "=" not in part:
            continue
        key, _, value = part.partition("=")
        key = key.strip()
        value = value.strip()
        if key == "metadata":
            fields = {k: v.strip('"') for k, v in _META_FIELD.findall(value)}
            op_name = fields.get("op_name", "")
            if "source_file" in fields:
                source_file = fields["source_file"]
                source_line = int(fields.get("source_line", "0") or 0)
            elif "stack_frame_id" in fields:
                source_file, source_line = tables.resolve(int(fields["stack_frame_id"]))
            continue
        if key in ("calls", "to_apply", "body", "condition", "true_computation", "false_computation"):
            called.extend(v.strip().lstrip("%") for v in value.strip("{}").split(","))
        elif key == "branch_computations":
            called.extend(v.strip().lstrip("%") for v in value.strip("{}").split(","))
        elif key == "kind":
            fusion_kind = value
        attributes.append((key, value))
    return HloInstruction(
        name=name, opcode=opcode, shape=shape, operands=tuple(operands), computation=computation,
        is_root=is_root, parameter_number=parameter_number, called_computations=tuple(called),
        fusion_kind=fusion_kind, attributes=tuple(attributes), op_name=op_name,
        source_file=source_file, source_line=source_line, raw=raw_line.strip(),
    )


def _parse_tables(lines: list[str]) -> _SourceTables:
    tables = _SourceTables()
    section = ""
    for line in lines:
        s = line.strip()
        if s in ("FileNames", "FunctionNames", "FileLocations", "StackFrames"):
            section = s
            continue
        if not s or s.endswith("{") and not s[0].isdigit():
            if s:
                section = ""
            continue
        if section == "FileNames":
            m = _FILE_NAME.match(s)
            if m:
                tables.files[int(m.group(1))] = m.group(2)
        elif section in ("FileLocations", "StackFrames"):
            m = _FILE_LOCATION.match(s)
            if not m:
                continue
            fields = dict(kv.split("=", 1) for kv in m.group(2).split() if "=" in kv)
            if section == "FileLocations":
                tables.locations[int(m.group(1))] = (
                    int(fields.get("file_name_id", 0)), int(fields.get("line", 0)))
            else:
                tables.frames[int(m.group(1))] = int(fields.get("file_location_id", 0))
    return tables


def parse_module(text: str, *, program_id: int | None = None, origin: str = "") -> HloModule:
    """Parse one HLO module from text. ``origin`` names the file in error messages."""
    lines = text.splitlines()
    header_idx = next((i for i, ln in enumerate(lines) if _HEADER.match(ln)), None)
    if header_idx is None:
        raise InputError(f"{origin or 'HLO text'}: no 'HloModule' header",
                         "pass optimized HLO text (compiled.as_text() or an --xla_dump_to file)")
    hm = _HEADER.match(lines[header_idx])
    assert hm is not None
    name = hm.group(1)
    aliases: list[tuple[str, int]] = []
    header_rest = hm.group(2)
    if "input_output_alias=" in header_rest:
        start = header_rest.index("input_output_alias=") + len("input_output_alias=")
        end = _find_closing(header_rest, start, "{", "}")
        for out_idx, param in _ALIAS.findall(header_rest[start:end + 1]):
            aliases.append((out_idx.replace(" ", ""), int(param)))
    tables = _parse_tables(lines[header_idx + 1:])

    computations: list[tuple[str, bool, list[HloInstruction]]] = []
    current: tuple[str, bool, list[HloInstruction]] | None = None
    try:
        for ln in lines[header_idx + 1:]:
            s = ln.strip()
            if current is None:
                cm = _COMPUTATION.match(ln)
                if cm and not s[0].isdigit():
                    current = (cm.group(2), bool(cm.group(1)), [])
                continue
            if s == "}":
                computations.append(current)
                current = None
                continue
            if not s or s.startswith("//"):
                continue
            current[2].append(_parse_instruction(ln, current[0], tables))
    except ValueError as exc:
        raise InputError(f"{origin or 'HLO text'}: cannot parse module {name}: {exc}",
                         "pass HLO text as XLA prints it") from exc
    if current is not None:
        raise InputError(f"{origin or 'HLO text'}: module {name} is truncated (unclosed computation)",
                         "pass the whole module")
    if not computations:
        raise InputError(f"{origin or 'HLO text'}: module {name} has no computations",
                         "pass optimized HLO text")
    fusion_bodies = {
        c for _, _, insts in computations for i in insts if i.opcode == "fusion"
        for c in i.called_computations[:1]
    }
    entry = next((n for n, is_entry, _ in computations if is_entry), computations[-1][0])
    comps = tuple(
        HloComputation(n, tuple(insts), is_entry=(n == entry), is_fusion=(n in fusion_bodies))
        for n, _, insts in computations
    )
    return HloModule(name=name, computations=comps, entry_name=entry,
                     input_output_alias=tuple(aliases), program_id=program_id, text=text)


def parse_modules(text: str, *, origin: str = "") -> list[HloModule]:
    """Parse a text holding one or more modules (each starting with ``HloModule``)."""
    starts = [i for i, ln in enumerate(text.splitlines()) if _HEADER.match(ln)]
    lines = text.splitlines()
    out = []
    for k, start in enumerate(starts):
        end = starts[k + 1] if k + 1 < len(starts) else len(lines)
        out.append(parse_module("\n".join(lines[start:end]), origin=origin))
    return out


def module_text_from_proto(data: bytes, *, origin: str = "") -> str:
    """HLO text (with metadata and stack frames) from serialized ``HloProto`` or ``HloModuleProto`` bytes.

    xprof writes ``<module>(<program_id>).hlo_proto.pb`` files holding an ``HloProto`` whose field 1
    is the ``HloModuleProto``; a bare ``HloModuleProto`` (field 1 is its name, a string) is accepted too.
    """
    from jax._src.lib import xla_client

    module_bytes = _hlo_module_field(data)
    for candidate in (module_bytes, data):
        if candidate is None:
            continue
        try:
            return str(xla_client.XlaComputation(candidate).get_hlo_module().to_string())
        except Exception:  # noqa: BLE001 - try the other reading, then report
            continue
    raise InputError(f"{origin or 'HLO proto'}: not a serialized HLO module",
                     "pass an .hlo_proto.pb written by xprof or a serialized HloModuleProto")


def _hlo_module_field(data: bytes) -> bytes | None:
    """Field 1 of an ``HloProto`` when it is a message (length-delimited), else None."""
    from google.protobuf.internal.decoder import _DecodeVarint  # type: ignore[attr-defined]

    try:
        tag, pos = _DecodeVarint(data, 0)
        if tag != (1 << 3 | 2):
            return None
        length, pos = _DecodeVarint(data, pos)
        if pos + length > len(data):
            return None
        inner = data[pos:pos + length]
        # An HloModuleProto's field 1 is its name (a string); an HloProto's field 1 is a message
        # whose own first tag is again field 1 / length-delimited (the module name). Peek.
        itag, _ = _DecodeVarint(inner, 0) if inner else (0, 0)
        return inner if itag == (1 << 3 | 2) else None
    except Exception:  # noqa: BLE001
        return None


# ---------------------------------------------------------------------------------------------
# Helpers the rules share
# ---------------------------------------------------------------------------------------------

def real_work(inst: HloInstruction) -> bool:
    """True for an instruction that does work (not plumbing such as tuple/parameter/bitcast)."""
    return inst.opcode not in PLUMBING_OPCODES


def fused_opcodes(module: HloModule, inst: HloInstruction) -> list[str]:
    """Opcodes inside a fusion's body (recursively), excluding plumbing; ``[opcode]`` otherwise."""
    body = module.fusion_body(inst)
    if body is None:
        return [inst.opcode]
    out: list[str] = []
    for i in body.instructions:
        if i.opcode == "fusion":
            out.extend(fused_opcodes(module, i))
        elif real_work(i):
            out.append(i.opcode)
    return out


def is_convert_only(module: HloModule, inst: HloInstruction) -> bool:
    """True for a bare ``convert`` or a fusion whose only work is converts (``wrapped_convert``)."""
    if inst.opcode == "convert":
        return True
    ops = fused_opcodes(module, inst) if inst.opcode == "fusion" else []
    return bool(ops) and all(o == "convert" for o in ops)


def operand_shapes(module: HloModule, inst: HloInstruction) -> list[HloShape]:
    return [o.shape for o in module.operands_of(inst)]
