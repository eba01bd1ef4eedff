"""The HLO text parser: modules, computations, instructions and the source (stack-frame) tables.

The text is read as XLA prints it, by statements rather than lines: a statement ends at a newline
outside brackets and quotes, so that attributes spanning lines (a ``backend_config`` JSON, an
``origin_recovery_table`` holding a whole module in a string) stay within their instruction. Anything
that is not a module header, a computation, an instruction or a source table is an error naming the
line: nothing is skipped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from hlo_doctor.core.errors import InputError
from hlo_doctor.hlo.frames import Frame
from hlo_doctor.hlo.module import HloComputation, HloInstruction, HloModule
from hlo_doctor.hlo.shape import _parse_shape_prefix
from hlo_doctor.hlo.text import (
    _find_closing,
    _split_top_level,
    _statement_end,
    _strip_comments,
    _Truncated,
)

_HEADER = re.compile(r"HloModule\s+([^\s,]+)")
_INSTRUCTION = re.compile(r"\s*(ROOT\s+)?%?([^\s=%]+)\s*=\s*(.*)$", re.S)
_COMPUTATION_NAME = re.compile(r"(ENTRY\s+)?%?([^\s({%]+)\s*")
_OPCODE = re.compile(r"([a-z][\w\-]*)\(")
_META_FIELD = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|[^\s}]+)')
_FILE_NAME = re.compile(r'^(\d+)\s+"(.*)"\s*$', re.S)
_FILE_LOCATION = re.compile(r"^(\d+)\s+\{(.*)\}\s*$", re.S)
_ALIAS = re.compile(r"\{([\d,\s]*)\}:\s*\((\d+)")
_TABLES = ("FileNames", "FunctionNames", "FileLocations", "StackFrames")
_CALL_KEYS = ("calls", "to_apply", "body", "condition", "true_computation", "false_computation",
              "branch_computations", "called_computations")


@dataclass
class _SourceTables:
    """The module's source tables, as printed after its header, and the stacks they make.

    Ids are 1-based and 0 is "no parent" in the serialized ``StackFrameIndexProto``. XLA prints a
    frame's parent as ``parent_frame_id + 1`` (``HloModule::PrintStackFrameIndex``): a printed 1 is
    "no parent", a printed N > 1 frame N - 1. Frames are interned outermost first, so frame 1 has
    no parent: printed as 1 it confirms that convention; printed as 0, the parents are raw ids.
    """

    files: dict[int, str] = field(default_factory=dict)
    functions: dict[int, str] = field(default_factory=dict)
    locations: dict[int, tuple[int, int, int]] = field(default_factory=dict)  # id -> (file, function, line)
    frames: dict[int, tuple[int, int]] = field(default_factory=dict)  # id -> (location id, printed parent)
    _stacks: dict[int, tuple[Frame, ...]] = field(default_factory=dict)
    _frames: dict[int, Frame | None] = field(default_factory=dict)  # location id -> its frame (stacks share them)

    def stack(self, frame_id: int) -> tuple[Frame, ...]:
        """The stack of frame ``frame_id``, innermost first; () when the id names no frame."""
        hit = self._stacks.get(frame_id)
        if hit is not None:
            return hit
        offset = 0 if self.frames.get(1, (0, 1))[1] == 0 else 1
        out: list[Frame] = []
        seen: set[int] = set()
        cur = frame_id
        while cur in self.frames and cur not in seen:  # a malformed table may loop: stop there
            seen.add(cur)
            location, parent = self.frames[cur]
            if location in self._frames:
                frame = self._frames[location]
            else:
                loc = self.locations.get(location)
                frame = self._frames[location] = None if loc is None else \
                    Frame(self.files.get(loc[0], ""), loc[2], self.functions.get(loc[1], ""))
            if frame is not None:
                out.append(frame)
            cur = parent - offset
        stack = tuple(out)
        self._stacks[frame_id] = stack
        return stack

    def add(self, section: str, entry: str) -> None:
        if section in ("FileNames", "FunctionNames"):
            m = _FILE_NAME.match(entry)
            if m:
                names = self.files if section == "FileNames" else self.functions
                names[int(m.group(1))] = _unescape(m.group(2))
            return
        m = _FILE_LOCATION.match(entry)
        if m is None:
            return
        fields = dict(kv.split("=", 1) for kv in m.group(2).split() if "=" in kv)
        if section == "FileLocations":
            self.locations[int(m.group(1))] = (int(fields.get("file_name_id", 0)),
                                               int(fields.get("function_name_id", 0)), int(fields.get("line", 0)))
        else:
            self.frames[int(m.group(1))] = (int(fields.get("file_location_id", 0)),
                                            int(fields.get("parent_frame_id", 0)))


def _unescape(text: str) -> str:
    """A name as XLA printed it with ``absl::CEscape`` (``\\"`` and ``\\\\``), unescaped."""
    if "\\" not in text:
        return text
    try:
        return text.encode("latin-1", "backslashreplace").decode("unicode_escape").encode("latin-1").decode("utf-8")
    except (UnicodeDecodeError, UnicodeEncodeError):
        return text


@dataclass
class _Instruction:
    """An instruction statement, read before the source tables (printed after it) are known."""

    computation: str
    text: str
    line: int


def _parse_instruction(stmt: _Instruction, tables: _SourceTables) -> HloInstruction:
    line = _strip_comments(stmt.text)
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
    attr_text = rest[close_idx + 1:].lstrip()
    if attr_text and not attr_text.startswith(","):
        raise ValueError(f"unexpected text after the operands: {attr_text[:60]!r}")

    operands: list[str] = []
    parameter_number: int | None = None
    if opcode == "parameter":
        try:
            parameter_number = int(operand_text.strip())
        except ValueError:
            parameter_number = None
    elif opcode not in ("constant", "iota", "rng-get-and-update-state"):
        for tok in _split_top_level(operand_text):
            if tok:
                operands.append(tok.split()[-1].lstrip("%"))

    called: list[str] = []
    fusion_kind = ""
    attributes: list[tuple[str, str]] = []
    op_name = ""
    stack: tuple[Frame, ...] = ()
    for part in _split_top_level(attr_text.lstrip(",")):
        key, eq, value = part.partition("=")
        if not eq:
            raise ValueError(f"not an attribute: {part[:60]!r}")
        key = key.strip()
        value = value.strip()
        if key == "metadata":
            fields = {k: v.strip('"') for k, v in _META_FIELD.findall(value)}
            op_name = fields.get("op_name", "")
            if "stack_frame_id" in fields:
                stack = tables.stack(int(fields["stack_frame_id"]))
            if not stack and fields.get("source_file"):
                stack = (Frame(fields["source_file"], int(fields.get("source_line", "0") or 0)),)
            continue
        if key in _CALL_KEYS:
            called.extend(v.strip().lstrip("%") for v in value.strip("{}").split(","))
        elif key == "kind":
            fusion_kind = value
        attributes.append((key, value))
    return HloInstruction(
        name=name, opcode=opcode, shape=shape, operands=tuple(operands), computation=stmt.computation,
        is_root=is_root, parameter_number=parameter_number, called_computations=tuple(called),
        fusion_kind=fusion_kind, attributes=tuple(attributes), op_name=op_name,
        source_file=stack[0].file if stack else "", source_line=stack[0].line if stack else 0, stack=stack,
        raw=stmt.text.strip(),
    )


@dataclass
class _Reader:
    """A cursor over one module's text, with line numbers for errors."""

    text: str
    origin: str
    pos: int = 0

    def line_of(self, pos: int) -> int:
        return self.text.count("\n", 0, pos) + 1

    def fail(self, pos: int, what: str) -> InputError:
        return InputError(f"{self.origin or 'HLO text'}:{self.line_of(pos)}: {what}",
                          "pass HLO text as XLA prints it (compiled.as_text() or an --xla_dump_to file)")

    def skip_blank(self) -> None:
        """Skip whitespace and ``//`` line comments."""
        text, n = self.text, len(self.text)
        while self.pos < n:
            c = text[self.pos]
            if c.isspace():
                self.pos += 1
            elif text.startswith("//", self.pos):
                end = text.find("\n", self.pos)
                self.pos = n if end < 0 else end + 1
            else:
                return

    def statement(self) -> tuple[str, int]:
        """The statement at the cursor and its closing depth (-1: it ends at an unopened ``}``)."""
        start = self.pos
        try:
            end, depth = _statement_end(self.text, start)
        except _Truncated as exc:
            raise self.fail(start, f"truncated: {exc} before the text ends") from None
        self.pos = end
        return self.text[start:end], depth


def _computation_header(text: str) -> tuple[str, bool, int]:
    """``(name, is_entry, index of the body's {)`` of a computation header, or raise ValueError."""
    m = _COMPUTATION_NAME.match(text)
    if not m:
        raise ValueError("not a computation")
    pos = m.end()
    if text.startswith("(", pos):
        pos = _find_closing(text, pos) + 1
    rest = text[pos:].lstrip()
    offset = len(text) - len(rest)
    if rest.startswith("->"):
        _, after = _parse_shape_prefix(rest[2:])
        offset = len(text) - len(after.lstrip())
    if not text.startswith("{", offset):
        raise ValueError("not a computation")
    return m.group(2), bool(m.group(1)), offset


def _read_module(reader: _Reader, program_id: int | None) -> HloModule:
    """Read one module from the cursor (at its ``HloModule`` header) to the next module or the end."""
    text = reader.text
    start = reader.pos
    header, _ = reader.statement()
    hm = _HEADER.match(header)
    if hm is None:
        raise reader.fail(start, "no 'HloModule' header")
    name = hm.group(1)
    header_attributes: list[tuple[str, str]] = []
    for part in _split_top_level(_strip_comments(header[hm.end():]).lstrip().lstrip(",")):
        key, _, value = part.partition("=")
        header_attributes.append((key.strip(), value.strip()))
    aliases = [(out.replace(" ", ""), int(param)) for key, value in header_attributes
               if key == "input_output_alias" for out, param in _ALIAS.findall(value)]

    statements: list[_Instruction] = []
    computations: list[tuple[str, bool, str, int, int]] = []  # name, entry, thread, first, end
    tables = _SourceTables()
    section = ""
    while True:
        reader.skip_blank()
        pos = reader.pos
        if pos >= len(text) or text.startswith("HloModule", pos):
            break
        word = text[pos:pos + 16].split(None, 1)[0] if text[pos:pos + 16].strip() else ""
        if word in _TABLES:
            section = word
            reader.pos = pos + len(word)
            continue
        if section and text[pos].isdigit():
            entry, _ = reader.statement()
            try:
                tables.add(section, entry)
            except ValueError:
                raise reader.fail(pos, f"not a {section} entry: {entry[:80]!r}") from None
            continue
        section = ""
        line_end = text.find("\n", pos)
        head = (text[pos:] if line_end < 0 else text[pos:line_end]).rstrip()
        try:
            # XLA prints a header on one line ending with the body's brace; /*index=N*/ marks may
            # sit inside its signature.
            comp_name, is_entry, brace = _computation_header(_strip_comments(head))
            if brace != len(_strip_comments(head)) - 1:
                raise ValueError("text after the body's brace")
        except ValueError:
            raise reader.fail(pos, f"not a computation: {head[:80]!r}") from None
        reader.pos = pos + len(head)
        first = len(statements)
        while True:
            reader.skip_blank()
            at = reader.pos
            if at >= len(text):
                raise reader.fail(pos, f"truncated: computation {comp_name} is not closed")
            if text[at] == "}":
                reader.pos = at + 1
                trailer, _ = reader.statement()
                thread = ""
                for part in _split_top_level(trailer.strip().lstrip(",")):
                    key, _, value = part.partition("=")
                    if key.strip() != "execution_thread":
                        raise reader.fail(at, f"unexpected text after computation {comp_name}: {part[:60]!r}")
                    thread = value.strip().strip('"')
                if first == len(statements):
                    raise reader.fail(pos, f"computation {comp_name} has no instructions")
                computations.append((comp_name, is_entry, thread, first, len(statements)))
                break
            body, depth = reader.statement()
            if depth < 0:
                raise reader.fail(at, f"unbalanced brackets: {body.strip()[:80]!r}")
            statements.append(_Instruction(comp_name, body, at))
    if not computations:
        raise reader.fail(start, f"module {name} has no computations")

    try:
        instructions = [_parse_instruction(s, tables) for s in statements]
    except ValueError as exc:
        bad = next(s for s in statements if not _parses(s, tables))
        raise reader.fail(bad.line, f"cannot parse an instruction of module {name}: {exc}") from None
    fusion_bodies = {c for i in instructions if i.opcode == "fusion" for c in i.called_computations[:1]}
    if not any(c[1] for c in computations):
        # XLA prints every module with an ENTRY computation, last: without one the text was cut off.
        raise reader.fail(reader.pos, f"truncated: module {name} has no ENTRY computation")
    entry = next(c[0] for c in computations if c[1])
    comps = tuple(
        HloComputation(n, tuple(instructions[first:end]), is_entry=(n == entry),
                       is_fusion=(n in fusion_bodies), execution_thread=thread)
        for n, _, thread, first, end in computations
    )
    return HloModule(name=name, computations=comps, entry_name=entry, input_output_alias=tuple(aliases),
                     program_id=program_id, text=text[start:reader.pos],
                     is_scheduled=dict(header_attributes).get("is_scheduled") == "true",
                     attributes=tuple(header_attributes))


def _parses(stmt: _Instruction, tables: _SourceTables) -> bool:
    try:
        _parse_instruction(stmt, tables)
    except ValueError:
        return False
    return True


MAX_LINE = 8 << 20
"""The longest line read (8 MiB): XLA prints none near it but for a constant printed whole; a longer one
(a 100 MB name in a metadata string) would cost the parser minutes and gigabytes."""


def _check_lines(text: str, origin: str) -> None:
    if len(text) <= MAX_LINE:  # the common case: no line can be too long
        return
    pos = 0
    while pos < len(text):
        end = text.find("\n", pos)
        end = len(text) if end < 0 else end
        if end - pos > MAX_LINE:
            line = text.count("\n", 0, pos) + 1
            raise InputError(f"{origin or 'HLO text'}:{line}: a line of {(end - pos) >> 20} MiB, past the "
                             f"{MAX_LINE >> 20} MiB hlo-doctor reads", "pass HLO text as XLA prints it")
        pos = end + 1


def _modules(text: str, origin: str, program_id: int | None = None) -> list[HloModule]:
    _check_lines(text, origin)
    reader = _Reader(text, origin)
    reader.skip_blank()
    if not text.startswith("HloModule", reader.pos):
        raise InputError(f"{origin or 'HLO text'}: no 'HloModule' header",
                         "pass optimized HLO text (compiled.as_text() or an --xla_dump_to file)")
    out = []
    while reader.pos < len(text):
        out.append(_read_module(reader, program_id))
        reader.skip_blank()
    return out


def parse_module(text: str, *, program_id: int | None = None, origin: str = "") -> HloModule:
    """Parse one HLO module from text. ``origin`` names the file in error messages."""
    modules = _modules(text, origin, program_id)
    if len(modules) > 1:
        raise InputError(f"{origin or 'HLO text'}: holds {len(modules)} modules, one expected",
                         "pass one module per file")
    return modules[0]


def parse_modules(text: str, *, origin: str = "") -> list[HloModule]:
    """Parse a text holding one or more modules (each starting with ``HloModule``)."""
    return _modules(text, origin)
