"""A captured program as StableHLO this machine can compile again, and the edits a fix makes to it.

A capture's ``HloModuleProto`` is the module XLA optimized: fused, laid out, scheduled. jaxlib turns
it into MLIR (``hlo_to_stablehlo``), but a fusion kept as ``mhlo.fusion`` can crash XLA:CPU's
emitters when compiled a second time, and a layout ``mhlo.bitcast`` names layouts the StableHLO
tensors no longer carry. So each fusion's body is inlined where it was called and each bitcast
becomes the reshape it is on row-major tensors: XLA then fuses the program again as it did the
first time (the same fusions come back in the compiled module), and the edits below work on plain
ops. Runs in the replay's child process only (:mod:`.child`): it imports jax.
"""

from __future__ import annotations

import re
from typing import Any

from hlo_doctor.lint.replay.proto_repair import drop_tiled_layout_constraints, widen_narrowed_reductions

MONOTONE_UNARY = frozenset({"stablehlo.exponential", "stablehlo.logistic", "stablehlo.tanh", "stablehlo.log",
                            "stablehlo.exponential_minus_one", "stablehlo.log_plus_one"})
"""Maps that keep every row's order (an argmax over their result is the argmax over their input)."""
ROW_BINARY = frozenset({"stablehlo.subtract", "stablehlo.add", "stablehlo.divide", "stablehlo.multiply"})
"""With one side a broadcast value per row (softmax's max and sum), these keep a row's order too."""


def module_text(module_proto: bytes, portable: bool = False) -> str:
    """StableHLO text of a serialized ``HloModuleProto``, fusions inlined, bitcasts as reshapes.
    ``portable``: no MHLO op left that StableHLO lacks (a PJRT plugin such as XLA:TPU's takes the
    module as a portable StableHLO artifact and refuses them): each copy is its operand."""
    from jax._src.interpreters import mlir
    from jax._src.lib import _jax
    from jax._src.lib.mlir import ir

    module_proto, _ = widen_narrowed_reductions(module_proto)
    module_proto, _ = drop_tiled_layout_constraints(module_proto)
    with mlir.make_ir_context():
        module = ir.Module.parse(_jax.mlir.hlo_to_stablehlo(module_proto))
        _inline_fusions(module)
        _bitcasts_as_reshapes(module)
        _async_as_calls(module)
        _assumptions_as_values(module)
        if portable:
            _copies_as_values(module)
            for name in _PLACEMENT_ATTRIBUTES:
                if name in module.operation.attributes:
                    del module.operation.attributes[name]
        return str(module)


_PLACEMENT_ATTRIBUTES = ("mhlo.cross_program_prefetches", "mhlo.xla_entry_computation_parameter_layouts",
                         "mhlo.xla_entry_computation_parameter_tiles", "mhlo.xla_entry_computation_result_layout",
                         "mhlo.xla_entry_computation_result_tiles")
"""The captured program's placement decisions (prefetches, tiled entry layouts) a portable artifact
cannot carry: the compiler, building the program again, makes its own."""


def _copies_as_values(module: Any) -> None:
    """Each ``mhlo.copy`` (a value copied to another buffer or layout, which StableHLO tensors do not
    name) replaced by its operand: XLA, compiling the module again, makes the copies its buffers need
    (an output that is a parameter not donated gets one, as in the capture)."""
    for copy in _ops(module.operation, "mhlo.copy"):
        copy.results[0].replace_all_uses_with(copy.operands[0])
        copy.erase()


_ASSUMPTIONS = frozenset({"AssumeGatherIndicesInBound"})
"""Custom calls XLA puts in an optimized module that return their operand and only tell its later
passes something about it (a gather's indices are in bounds): XLA compiling the module again puts
them back where it can prove them, and no backend but the one that wrote them knows the target."""


def _assumptions_as_values(module: Any) -> None:
    """Each custom call in :data:`_ASSUMPTIONS` replaced by its operand (its result is that value)."""
    for call in _ops(module.operation, "stablehlo.custom_call"):
        target = str(call.attributes["call_target_name"]).strip('"')
        if target in _ASSUMPTIONS and len(call.operands) == 1 and len(call.results) == 1 \
                and call.operands[0].type == call.results[0].type:
            call.results[0].replace_all_uses_with(call.operands[0])
            call.erase()


def _async_as_calls(module: Any) -> None:
    """Each ``async_start`` ... ``async_done`` pair (XLA:TPU's ``copy-start``/``copy-done``, which
    move a buffer between memory spaces the importer no longer names) as a plain call of the
    computation it runs: XLA, compiling the module again, schedules its own."""
    from jax._src.lib.mlir import ir

    for done in _ops(module.operation, "mhlo.async_done"):
        chain, start = [done], _owner(done.operands[0])
        while start is not None and start.name == "mhlo.async_update":
            chain.append(start)
            start = _owner(start.operands[0])
        if start is None or start.name != "mhlo.async_start":
            continue
        with ir.InsertionPoint(done), done.location:
            call = ir.Operation.create("func.call", results=[r.type for r in done.results],
                                       operands=list(start.operands),
                                       attributes={"callee": start.attributes["called_computation"]})
        for old, new in zip(done.results, call.results, strict=True):
            old.replace_all_uses_with(new)
        for op in chain:
            op.erase()
        if not any(True for _ in start.results[0].uses):
            start.erase()


def _ops(op: Any, name: str) -> list[Any]:
    """Every operation called ``name`` nested anywhere in ``op``, outermost first."""
    found: list[Any] = []
    for region in op.regions:
        for block in region.blocks:
            for child in block.operations:
                child = child.operation
                if child.name == name:
                    found.append(child)
                found.extend(_ops(child, name))
    return found


def _inline_fusions(module: Any) -> None:
    # A fusion nested in a fusion's body is moved out with that body: repeat until none is left.
    while fusions := _ops(module.operation, "mhlo.fusion"):
        for fusion in fusions:
            body = fusion.regions[0].blocks[0]
            for arg, operand in zip(body.arguments, fusion.operands, strict=True):
                arg.replace_all_uses_with(operand)
            ops = [o.operation for o in body.operations]
            for op in ops[:-1]:
                op.move_before(fusion)
            for result, value in zip(fusion.results, ops[-1].operands, strict=True):
                result.replace_all_uses_with(value)
            fusion.erase()


def _bitcasts_as_reshapes(module: Any) -> None:
    """Each HLO ``bitcast`` as the StableHLO op it stands for: a reshape where it keeps the element
    type; where it changes it (a sort's total-order compare reads an f32 as an s32), a
    ``bitcast_convert`` to the new element type, then a reshape where the shape changes too."""
    from jax._src.lib.mlir import ir

    for bitcast in _ops(module.operation, "mhlo.bitcast"):
        source, result = bitcast.operands[0], bitcast.results[0].type
        before, after = ir.RankedTensorType(source.type), ir.RankedTensorType(result)
        with ir.InsertionPoint(bitcast), bitcast.location:
            value = source
            if str(before.element_type) != str(after.element_type):
                retyped = ir.RankedTensorType.get(before.shape, after.element_type)
                value = ir.Operation.create("stablehlo.bitcast_convert", results=[retyped],
                                            operands=[value]).results[0]
            if list(before.shape) != list(after.shape) or value == source:
                value = ir.Operation.create("stablehlo.reshape", results=[result], operands=[value]).results[0]
        bitcast.results[0].replace_all_uses_with(value)
        bitcast.erase()


def _main(module: Any) -> Any:
    for op in module.body.operations:
        op = op.operation
        if op.name == "func.func" and str(op.attributes["sym_name"]).strip('"') == "main":
            return op
    raise ValueError("the module has no main function")


def narrow_parameter(text: str, number: int, narrow: str) -> str:
    """``text`` with parameter ``number`` taken in ``narrow`` (an MLIR element type: ``bf16``) and
    converted to its old type inside the program, where XLA can fuse the convert into its readers."""
    from jax._src.interpreters import mlir
    from jax._src.lib.mlir import ir

    with mlir.make_ir_context():
        module = ir.Module.parse(text)
        main = _main(module)
        block = main.regions[0].blocks[0]
        arg = block.arguments[number]
        wide = arg.type
        shaped = ir.RankedTensorType(wide)
        narrow_type = ir.RankedTensorType.get(shaped.shape, ir.Type.parse(narrow), loc=main.location)
        arg.set_type(narrow_type)
        with ir.InsertionPoint.at_block_begin(block), main.location:
            convert = ir.Operation.create("stablehlo.convert", results=[wide], operands=[arg])
        arg.replace_all_uses_except(convert.results[0], convert)
        ftype = ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value)
        inputs = [narrow_type if i == number else t for i, t in enumerate(ftype.inputs)]
        main.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(inputs, ftype.results))
        return str(module)


def alias_output(text: str, number: int, outputs: tuple[int, ...]) -> str:
    """``text`` returning parameter ``number`` itself at ``outputs`` (its copy dropped), the parameter
    donated to the first of them: the output is the input's buffer and no copy runs."""
    from jax._src.interpreters import mlir
    from jax._src.lib.mlir import ir

    with mlir.make_ir_context():
        module = ir.Module.parse(text)
        main = _main(module)
        arg = main.regions[0].blocks[0].arguments[number]
        ret = [o.operation for o in main.regions[0].blocks[0].operations][-1]
        for index in outputs:
            ret.operands[index] = arg
        # A narrowed parameter returned itself changes that output's type with it.
        ftype = ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value)
        results = [arg.type if i in outputs else t for i, t in enumerate(ftype.results)]
        main.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(ftype.inputs, results))
        aliases = str(module.operation.attributes["mhlo.input_output_alias"]) \
            if "mhlo.input_output_alias" in module.operation.attributes else "[]"
        entry = (f'{{alias = {{kind = "may_alias", parameter_index = array<i64>, parameter_number = {number} : i64}}, '
                 f"output_index = array<i64: {outputs[0]}>}}")
        merged = entry if aliases.strip() == "[]" else aliases.strip()[1:-1] + ", " + entry
        module.operation.attributes["mhlo.input_output_alias"] = ir.Attribute.parse(f"[{merged}]")
        return str(module)


def drop_monotone_maps(text: str) -> tuple[str, int]:
    """``text`` with every argmax/argmin/max/min in main fed the value before the order-keeping maps
    that precede it (softmax, an exp in the LM head's fusion); the maps' other users keep them.
    Where none is found, the functions main calls (XLA:CPU's custom fusions come back as calls) are
    inlined first, as XLA's own call inliner would, and main looked at again. Returns the text and
    how many reductions were rewired (0: nothing to drop)."""
    from jax._src.interpreters import mlir
    from jax._src.lib.mlir import ir, passmanager

    with mlir.make_ir_context():
        module = ir.Module.parse(text)
        rewired = _rewire_selections(module)
        if not rewired:
            passmanager.PassManager.parse("builtin.module(inline)").run(module.operation)
            rewired = _rewire_selections(module)
        return str(module), rewired


def _rewire_selections(module: Any) -> int:
    """Each selection in main fed the value before its maps, through the selects that only set
    special values (argmax's -0 and NaN handling): they then test the value before the maps too."""
    rewired = 0
    for reduce in _ops(_main(module), "stablehlo.reduce"):
        if not _is_selection(reduce):
            continue
        slot, index = reduce, 0
        value = reduce.operands[0]
        while (owner := _owner(value)) is not None and owner.name == "stablehlo.select" \
                and _is_row_value(owner.operands[1]):
            slot, index, value = owner, 2, owner.operands[2]
        source = _before_maps(value)
        if source is None or str(source.type) != str(value.type):
            continue
        if slot is not reduce:
            _replace_uses(slot.operands[0], value, source, depth=12)
        slot.operands[index] = source
        rewired += 1
    # A top-k XLA:CPU keeps as its TopK custom call: its operand fed the value before the maps.
    for top in _ops(_main(module), "stablehlo.custom_call"):
        if str(top.attributes["call_target_name"]).strip('"') != "TopK" or len(top.operands) != 1:
            continue
        value = top.operands[0]
        source = _before_maps(value)
        if source is None or str(source.type) != str(value.type):
            continue
        top.operands[0] = source
        rewired += 1
    return rewired


def _owner(value: Any) -> Any | None:
    from jax._src.lib.mlir import ir

    return value.owner.operation if isinstance(value.owner, (ir.Operation, ir.OpView)) else None


def _replace_uses(root: Any, old: Any, new: Any, depth: int) -> None:
    """In the ops ``root`` is computed by (``depth`` deep), each use of ``old`` made a use of ``new``."""
    op = _owner(root)
    if op is None or depth <= 0:
        return
    for i, operand in enumerate(op.operands):
        if operand == old:
            op.operands[i] = new
        else:
            _replace_uses(operand, old, new, depth - 1)


def _before_maps(value: Any) -> Any | None:
    """The value a chain of order-keeping maps ending in ``value`` starts from; None without one."""
    from jax._src.lib.mlir import ir

    seen = False
    while isinstance(value.owner, (ir.Operation, ir.OpView)):
        op = value.owner.operation
        if op.name in MONOTONE_UNARY:
            value = op.operands[0]
        elif op.name in ROW_BINARY and len(op.operands) == 2:
            a, b = op.operands
            if _is_row_value(b):
                value = a
            elif _is_row_value(a) and op.name in ("stablehlo.add", "stablehlo.multiply"):
                value = b
            else:
                break
        else:
            break
        seen = True
    return value if seen else None


def _is_selection(reduce: Any) -> bool:
    """A reduce that selects (argmax, argmin, max, min), not one that sums: its body compares or
    takes a maximum/minimum and adds nothing."""
    names = {op.operation.name for op in reduce.regions[0].blocks[0].operations}
    return bool(names & {"stablehlo.compare", "stablehlo.maximum", "stablehlo.minimum"}) \
        and not names & {"stablehlo.add", "stablehlo.multiply"}


def _is_row_value(value: Any) -> bool:
    """A broadcast (of a per-row value or a constant) or a constant: the same across a row."""
    from jax._src.lib.mlir import ir

    owner = value.owner
    if not isinstance(owner, (ir.Operation, ir.OpView)):
        return False
    return owner.operation.name in ("stablehlo.broadcast_in_dim", "stablehlo.constant", "stablehlo.broadcast")


def narrow_reads(text: str, number: int) -> tuple[str, int]:
    """``text`` (already through :func:`narrow_parameter`) with the selections that read the widened
    parameter reading the narrow one itself, compared in its dtype (what "reduce the bf16 tensor"
    does). An argmax/argmin whose value output is used keeps the widened read; a plain max or min
    reduces the narrow tensor and widens its results (exact: the convert keeps order). Returns the
    text and how many selections now read the narrow tensor."""
    lines = text.split("\n")
    convert = re.compile(rf"^\s*(%[\w.]+) = stablehlo\.convert %arg{number} : \(tensor<(?:\d+x)*(\w+)>\) -> "
                         r"tensor<(?:\d+x)*(\w+)>")
    found = next(((i, m) for i, line in enumerate(lines) if (m := convert.match(line))), None)
    if found is None:
        return text, 0
    _, m = found
    widened, narrow, wide = m.group(1), m.group(2), m.group(3)
    rewired = 0
    i = 0
    while i < len(lines):
        head = re.match(rf"^(\s*)(%[\w.]+):2 = stablehlo\.reduce\({re.escape(widened)} init: (%[\w.]+)\)", lines[i])
        end = i + 1
        while head and end < len(lines) and lines[end].strip() != "}":
            end += 1
        if not head or end >= len(lines) or re.search(rf"{re.escape(head.group(2))}#0\b", "\n".join(lines[end:])) \
                or "stablehlo.compare" not in "\n".join(lines[i:end]):
            i += 1
            continue
        indent, result, init = head.groups()
        block = "\n".join(lines[i:end + 1]).replace(f"x{wide}>", f"x{narrow}>").replace(f"<{wide}>", f"<{narrow}>")
        block = block.replace(f"({widened} init: {init})", f"(%arg{number} init: {init}_narrow{rewired})", 1)
        cast = f"{indent}{init}_narrow{rewired} = stablehlo.convert {init} : (tensor<{wide}>) -> tensor<{narrow}>"
        lines[i:end + 1] = [cast, *block.split("\n")]
        rewired += 1
        i = end + 2
    # A max or min whose value is the output: the widening convert keeps order and is exact, so
    # max(widen(x)) == widen(max(x)): reduce the narrow tensor, widen the row results.
    plain = re.compile(rf"^(\s*)(%[\w.]+) = stablehlo\.reduce\({re.escape(widened)} init: (%[\w.]+)\) applies "
                       rf"stablehlo\.(maximum|minimum) across dimensions = (\[[\d, ]*\]) : "
                       rf"\(tensor<((?:\d+x)*){wide}>, tensor<{wide}>\) -> tensor<((?:\d+x)*){wide}>$")
    for i, line in enumerate(list(lines)):
        m = plain.match(line)
        if m is None:
            continue
        indent, result, init, op, dims, shape, out = m.groups()
        n = f"%narrow{rewired}_{result[1:]}"  # an SSA name that starts with a digit is digits only
        lines[i] = "\n".join((
            f"{indent}{init}_narrow{rewired} = stablehlo.convert {init} : (tensor<{wide}>) -> tensor<{narrow}>",
            f"{indent}{n} = stablehlo.reduce(%arg{number} init: {init}_narrow{rewired}) applies stablehlo.{op} "
            f"across dimensions = {dims} : (tensor<{shape}{narrow}>, tensor<{narrow}>) -> tensor<{out}{narrow}>",
            f"{indent}{result} = stablehlo.convert {n} : (tensor<{out}{narrow}>) -> tensor<{out}{wide}>"))
        rewired += 1
    return "\n".join(lines), rewired
