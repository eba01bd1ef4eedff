"""What ``bf16-greedy-sampler`` looks for in the compilation manager (the precompile menu).

``_precompile_sampling`` builds dummy logits (``self._create_dummy_tensor(shape, dtype)``) and runs
``sample`` on them: that dtype is what the precompiled menu is keyed on. The model dtype expression
the codemod writes is one the file already uses (evidence it is valid there).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import libcst as cst

from hlo_doctor.fixes.bf16_greedy_sampler.elements import MODEL_DTYPE_EXPRESSIONS
from hlo_doctor.fixes.cst import (
    assigned_name,
    calls_in,
    dotted,
    find_function,
    is_float32,
    iter_blocks,
    positional_args,
    single_assign,
)


@dataclass(frozen=True, slots=True)
class PrecompileFacts:
    """The anchors found in ``_precompile_sampling`` and the logprobs menu's dummy dtypes."""

    dtype_arg: cst.Arg
    dtype_stmt: cst.CSTNode
    is_f32: bool
    model_dtype: str
    gather_dtypes: tuple[str, ...]


def analyze_precompile(module: cst.Module, source: str) -> tuple[PrecompileFacts | None, list[str]]:
    func = find_function(module, "_precompile_sampling", method=True)
    if func is None:
        return None, ["method _precompile_sampling"]
    logits_var = None
    for call in calls_in(func):
        if not (dotted(call.func) or "").endswith("_run_compilation"):
            continue
        args = positional_args(call)
        for i, arg in enumerate(args):
            if dotted(arg.value) == "sample" and len(args) > i + 3:
                logits_var = dotted(args[i + 3].value)
    if logits_var is None:
        return None, ["`self._run_compilation(name, sample, rng, mesh, logits, metadata, ...)` in _precompile_sampling"]
    dtype_arg, dtype_stmt = None, None
    for block in iter_blocks(func):
        for stmt in block.body:
            assign = single_assign(stmt)
            if assign is None or assigned_name(assign) != logits_var or not isinstance(assign.value, cst.Call):
                continue
            call = assign.value
            if not (dotted(call.func) or "").endswith("_create_dummy_tensor"):
                continue
            keyword = [a for a in call.args if a.keyword is not None and a.keyword.value == "dtype"]
            positional = positional_args(call)
            dtype_arg = keyword[0] if keyword else (positional[1] if len(positional) > 1 else None)
            dtype_stmt = stmt
    if dtype_arg is None or dtype_stmt is None:
        return None, [f"`{logits_var} = self._create_dummy_tensor(shape, dtype, ...)` in _precompile_sampling"]
    current = dotted(dtype_arg.value)
    model_dtype = _model_dtype(func, source, current)
    if model_dtype is None:
        return None, ["an expression for the model dtype (e.g. self.runner.model_config.dtype) in the compilation manager"]
    if not is_float32(dtype_arg.value) and current != model_dtype:
        return None, [f"dummy logits dtype float32 or {model_dtype} in _precompile_sampling (found {current})"]
    gather = find_function(module, "_precompile_gather_logprobs", method=True)
    gather_dtypes: list[str] = []
    if gather is not None:
        for call in calls_in(gather):
            name = dotted(call.func) or ""
            if name.endswith("_create_dummy_tensor") or name.endswith("ShapeDtypeStruct"):
                pos = positional_args(call)
                if len(pos) > 1 and isinstance(pos[0].value, cst.Tuple) and len(pos[0].value.elements) == 2:
                    gather_dtypes.append(dotted(pos[1].value) or "?")
    return PrecompileFacts(dtype_arg, dtype_stmt, is_float32(dtype_arg.value), model_dtype, tuple(gather_dtypes)), []


def _model_dtype(func: cst.FunctionDef, source: str, current: str | None) -> str | None:
    """The model dtype expression: one the file already uses outside this menu, whose root name is in
    scope in ``func`` (``self``, or a local such as ``runner = self.runner``)."""
    local_names = {
        assigned_name(a)
        for block in iter_blocks(func)
        for stmt in block.body
        if (a := single_assign(stmt)) is not None
    }
    return next(
        (
            e
            for e in MODEL_DTYPE_EXPRESSIONS
            if re.search(rf"(?<![\w.]){re.escape(e)}\b", source) is not None
            and len(re.findall(rf"(?<![\w.]){re.escape(e)}\b", source)) > (1 if current == e else 0)
            and (e.startswith("self.") or e.split(".")[0] in local_names)
        ),
        None,
    )


@dataclass(frozen=True, slots=True)
class GatherMenuFacts:
    """The logprobs menu entry of the non-speculative path (``_precompile_gather_logprobs``).

    ``state``: ``original`` when its dummy logits are float32, ``fixed`` when they are float32 only
    for processed logprobs and the model dtype otherwise (what the runner then passes).
    """

    func: cst.FunctionDef
    dtype_arg: cst.Arg
    dtype_stmt: cst.CSTNode
    state: str
    model_dtype: str


def _dummy_dtype_arg(call: cst.Call) -> cst.Arg | None:
    keyword = [a for a in call.args if a.keyword is not None and a.keyword.value == "dtype"]
    positional = positional_args(call)
    return keyword[0] if keyword else (positional[1] if len(positional) > 1 else None)


def analyze_gather_menu(module: cst.Module, source: str) -> tuple[GatherMenuFacts | None, list[str]]:
    """Facts about the logprobs menu; the anchors not found."""
    func = find_function(module, "_precompile_gather_logprobs", method=True)
    if func is None:
        return None, ["method _precompile_gather_logprobs"]
    logits_var = None
    for call in calls_in(func):
        args = positional_args(call)
        names = [dotted(a.value) for a in args]
        if (dotted(call.func) or "").endswith("_run_compilation") and "compute_and_gather_logprobs" in names:
            at = names.index("compute_and_gather_logprobs")
            logits_var = names[at + 1] if len(names) > at + 1 else None
            break
    anchor = "`logits = self._create_dummy_tensor((num_reqs, vocab), dtype, ...)` feeding compute_and_gather_logprobs"
    if logits_var is None:
        return None, [f"{anchor} in _precompile_gather_logprobs"]
    for block in iter_blocks(func):
        for stmt in block.body:
            assign = single_assign(stmt)
            if assign is None or assigned_name(assign) != logits_var or not isinstance(assign.value, cst.Call):
                continue
            name = dotted(assign.value.func) or ""
            dtype_arg = _dummy_dtype_arg(assign.value)
            if not (name.endswith("_create_dummy_tensor") or name.endswith("ShapeDtypeStruct")) or dtype_arg is None:
                continue
            if is_float32(dtype_arg.value):
                state = "original"
            elif isinstance(dtype_arg.value, cst.IfExp) and is_float32(dtype_arg.value.body):
                state = "fixed"
            else:
                return None, [f"dummy logits dtype float32 in _precompile_gather_logprobs (found {dotted(dtype_arg.value)})"]
            model_dtype = _model_dtype(func, source, None)
            if model_dtype is None:
                return None, ["an expression for the model dtype in _precompile_gather_logprobs"]
            return GatherMenuFacts(func, dtype_arg, stmt, state, model_dtype), []
    return None, [f"{anchor} in _precompile_gather_logprobs"]
