"""A tpu-inference tree as verify sees it: its real ``sample()``, the dtype its precompile menu is
keyed on, the dtype its runner passes, and the compiled greedy program read as HLO."""

from __future__ import annotations

import ast
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Protocol, TypeAlias

from hlo_doctor.core.errors import InputError

if TYPE_CHECKING:
    import jax
    from jax.sharding import Mesh

MODEL_DTYPE = "bfloat16"
"""The logits dtype of the model (Gemma's, and what every bf16 checkpoint gives the runner)."""
# Every axis name either ShardingAxisName flavour of the releases uses, each of size 1 (one device).
MESH_AXES = ("data", "attn_dp", "attn_dp_expert", "expert", "model", "dcp")
RUNNER_FUNCTION = "_sample_from_logits"
MENU_FUNCTION = "_precompile_sampling"


SampleOutput: TypeAlias = tuple["jax.Array", "jax.Array | None"]
"""What a greedy ``sample()`` returns: the tokens, and the float32 logits when logprobs are on."""


class JittedSample(Protocol):
    """A release's jitted ``sample()``, as verify uses it: called, lowered, its cache cleared."""

    __wrapped__: Callable[..., object]

    def __call__(self, *args: object) -> SampleOutput: ...

    def lower(self, *args: object) -> jax.stages.Lowered: ...

    def clear_cache(self) -> None: ...


@dataclass(frozen=True, slots=True)
class SourceFacts:
    """What a tree's source says about the dtype at ``sample()``'s boundary."""

    runner_dtype: str
    """``float32`` when ``_sample_from_logits`` widens before ``sample()``, else the model dtype."""
    runner_widens: bool
    runner_site: str
    menu_dtype: str
    """The dtype ``_precompile_sampling``'s dummy logits are built with (``float32`` / ``bfloat16``)."""
    menu_site: str


def _function(path: Path, name: str) -> ast.FunctionDef | None:
    tree = ast.parse(path.read_text(), filename=str(path))
    return next((n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name), None)


def _dtype_word(expr: str) -> str:
    if "float32" in expr:
        return "float32"
    if "bfloat16" in expr:
        return "bfloat16"
    # A model-dtype expression (self.runner.model_config.dtype, ...): the model's dtype.
    return MODEL_DTYPE


def _enclosing_ifs(func: ast.FunctionDef, target: ast.AST) -> set[int]:
    out: set[int] = set()

    def walk(node: ast.AST, ifs: tuple[int, ...]) -> bool:
        if node is target:
            out.update(ifs)
            return True
        for child in ast.iter_child_nodes(node):
            if walk(child, ifs + ((id(node),) if isinstance(node, ast.If) else ())):
                return True
        return False

    walk(func, ())
    return out


def source_facts(runner: Path, precompile: Path) -> SourceFacts:
    """Read the runner's and the precompile menu's logits dtype from the tree's source."""
    func = _function(runner, RUNNER_FUNCTION)
    if func is None:
        raise InputError(f"{runner} has no {RUNNER_FUNCTION}", "pass a tpu-inference tree (0.23.0 or later)")
    calls = [n for n in ast.walk(func) if isinstance(n, ast.Call) and ast.unparse(n.func) == "sample"]
    if not calls:
        raise InputError(f"{runner}: {RUNNER_FUNCTION} does not call sample()", "pass a tpu-inference tree")
    call = min(calls, key=lambda c: c.lineno)
    call_ifs = _enclosing_ifs(func, call)
    widen = None
    for node in ast.walk(func):
        if (isinstance(node, ast.Assign) and node.lineno < call.lineno and ast.unparse(node.targets[0]) == "logits"
                and "astype" in ast.unparse(node.value) and "float32" in ast.unparse(node.value)
                and _enclosing_ifs(func, node) <= call_ifs):
            widen = node
    runner_site = f"{runner.name}:{(widen or call).lineno}"
    menu = _function(precompile, MENU_FUNCTION)
    menu_dtype, menu_site = "unknown", precompile.name
    if menu is not None:
        for node in ast.walk(menu):
            if isinstance(node, ast.Call) and ast.unparse(node.func).endswith("_create_dummy_tensor"):
                dtype = next((k.value for k in node.keywords if k.arg == "dtype"), None)
                if dtype is None and len(node.args) > 1:
                    dtype = node.args[1]
                if dtype is not None and "num_reqs" in ast.unparse(node.args[0]):
                    menu_dtype, menu_site = _dtype_word(ast.unparse(dtype)), f"{precompile.name}:{node.lineno}"
                    break
    return SourceFacts("float32" if widen is not None else MODEL_DTYPE, widen is not None, runner_site,
                       menu_dtype, menu_site)


def mesh() -> Mesh:
    """A one-device mesh with every axis name the releases use."""
    import jax
    import numpy as np
    from jax.sharding import Mesh

    return Mesh(np.array(jax.devices()[:1]).reshape((1,) * len(MESH_AXES)), MESH_AXES)


def metadata(metadata_module: ModuleType, logprobs: bool) -> object:
    """Greedy sampling metadata as the precompile pass builds it (a collision dummy per logprobs flag).

    An instance of the tree's own ``TPUSupportedSamplingMetadata``: verify only passes it to ``sample()``.
    """
    import jax.numpy as jnp

    cls = metadata_module.TPUSupportedSamplingMetadata
    return cls(do_sampling=False, logprobs=logprobs,
               _cache_collision_dummy=jnp.zeros((1 if logprobs else 2,), jnp.int32))


def lower_error(sample: JittedSample, args: tuple[object, ...]) -> str | None:
    """Why ``sample`` (as the release jits it) cannot be lowered and compiled here; None when it can."""
    try:
        sample.lower(*args).compile()
    except Exception as exc:  # noqa: BLE001 - any failure means the check cannot run; say why
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return f"{type(exc).__name__}: {first[:200]}"
    return None


def static_argnames(sample: JittedSample) -> tuple[str, ...]:
    """The static arguments of a jitted ``sample`` (by the names its releases use)."""
    wrapped = getattr(sample, "__wrapped__", sample)
    params = inspect.signature(wrapped).parameters
    return tuple(n for n in ("mesh", "allow_distributed_sampling") if n in params)
