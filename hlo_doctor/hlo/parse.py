"""The HLO text parser: modules, computations, instructions and the source (stack-frame) tables."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from hlo_doctor.core.errors import InputError
from hlo_doctor.hlo.module import HloComputation, HloInstruction, HloModule
from hlo_doctor.hlo.shape import _parse_shape_prefix

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
