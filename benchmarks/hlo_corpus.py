"""How much of what XLA prints does ``hlo_doctor.hlo`` read, and does it read it right?

The corpus is a directory of ``*.hlo`` files, each one module as XLA's own parser re-prints it
(``hlo_module_from_text(text).to_string()``). For each module this parses the text with
``parse_module`` and compares with XLA's reading of the same text:

- the entry computation's name, its root instruction's name and shape;
- the computations, and the number of instructions in each;
- every instruction's shape text (layout, tiles and memory space included).

A module *parses* when ``parse_module`` returns; it *matches* when every comparison above holds.
Prints both rates and the top failure classes (the error message or the first difference, with
names and numbers stripped so that one cause counts once).

A corpus is built outside this repository from XLA's public sources: every ``.hlo`` file and every
raw string literal holding an ``HloModule`` line in its ``*_test.cc`` files, each re-printed by
``jaxlib._hlo.hlo_module_from_text(text).to_string()``, keeping those XLA accepts. Modules XLA does not
read back from its own print are counted and left out.

Usage::

    python benchmarks/hlo_corpus.py CORPUS_DIR [--limit N] [--examples K] [--json OUT] [--xla-cache F]

``--xla-cache`` keeps XLA's readings (the slow half) in a JSON file, so that reruns time our parser.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections import Counter
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any


@dataclass(frozen=True, slots=True)
class XlaView:
    """What XLA reads in a module: entry, root, and each computation's instruction shapes."""

    entry: str
    root_name: str
    root_shape: str
    shapes: dict[str, dict[str, str]]
    """computation -> instruction name -> shape text."""


@cache
def _proto_classes() -> Any:
    """Message classes for the few ``HloModuleProto`` fields read here (entry and root ids)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    f = descriptor_pb2.FieldDescriptorProto
    file = descriptor_pb2.FileDescriptorProto(name="bench/hlo_ids.proto", package="bench", syntax="proto3")
    inst = file.message_type.add(name="Inst")
    inst.field.add(name="name", number=1, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL)
    inst.field.add(name="id", number=35, type=f.TYPE_INT64, label=f.LABEL_OPTIONAL)
    comp = file.message_type.add(name="Comp")
    comp.field.add(name="name", number=1, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL)
    comp.field.add(name="instructions", number=2, type=f.TYPE_MESSAGE, label=f.LABEL_REPEATED,
                   type_name=".bench.Inst")
    comp.field.add(name="root_id", number=6, type=f.TYPE_INT64, label=f.LABEL_OPTIONAL)
    mod = file.message_type.add(name="Module")
    mod.field.add(name="entry_computation_name", number=2, type=f.TYPE_STRING, label=f.LABEL_OPTIONAL)
    mod.field.add(name="computations", number=3, type=f.TYPE_MESSAGE, label=f.LABEL_REPEATED,
                  type_name=".bench.Comp")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("bench.Module"))


def _shape_prefix(text: str) -> str:
    """The shape at the start of XLA's instruction text after ``name = `` (up to a top-level space)."""
    depth = 0
    for i, c in enumerate(text):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == " " and depth == 0:
            return text[:i]
    return text


_INDEX_COMMENT = re.compile(r"/\*index=\d+\*/")


def xla_view(text: str) -> XlaView:
    """XLA's reading of ``text``: names from its module, shapes from its instruction printer.

    Computations XLA holds but does not print (the wrapped computations of async collectives, printed
    as syntax sugar) are left out: no reader of the text can see them.
    """
    from jaxlib import _hlo

    module = _hlo.hlo_module_from_text(text)
    proto = _proto_classes().FromString(module.as_serialized_hlo_module_proto())
    printed_names = set(re.findall(r"^(?:ENTRY )?%?([^\s(%]+) \(", text, re.M))
    shapes: dict[str, dict[str, str]] = {}
    for comp in module.computations():
        if comp.name not in printed_names:
            continue
        per: dict[str, str] = {}
        for inst in comp.instructions():
            printed = inst.to_string().split(" = ", 1)[1]
            per[inst.name] = _INDEX_COMMENT.sub("", _shape_prefix(printed))
        shapes[comp.name] = per
    entry = next(c for c in proto.computations if c.name == proto.entry_computation_name)
    root = next(i.name for i in entry.instructions if i.id == entry.root_id)
    return XlaView(proto.entry_computation_name, root, shapes[entry.name][root], shapes)


_NUMBERS = re.compile(r"\d+")
_QUOTED = re.compile(r"'[^']*'|\"[^\"]*\"")


def _class_of(message: str) -> str:
    """A failure message with names, quotes and numbers stripped: one cause, one class."""
    message = message.split("\n")[0]
    message = re.sub(r"^[^:]*: ", "", message, count=1)  # the origin (file name)
    message = _QUOTED.sub("'…'", message)
    message = re.sub(r"module \S+", "module …", message)
    return _NUMBERS.sub("N", message)[:140]


def _shape_class(ours: str, theirs: str) -> str:
    features = [k for k, pat in (("dynamic ?", "?"), ("bounded <=", "<="), ("memory space S()", "S("),
                                 ("tiles T()", "T("), ("buffer b()", "b("), ("element size E()", "E("))
                if pat in theirs and pat not in ours]
    return "shape differs: " + (", ".join(features) if features else "other")


def compare(text: str, origin: str, view: XlaView) -> tuple[str, str]:
    """``("match" | "mismatch" | "error" | "crash", failure class)`` for one module."""
    from hlo_doctor.core.errors import InputError
    from hlo_doctor.hlo import parse_module

    try:
        ours = parse_module(text, origin=origin)
    except InputError as exc:
        return "error", "InputError: " + _class_of(str(exc))
    except Exception as exc:  # noqa: BLE001 - an escaping exception is a finding of this benchmark
        return "crash", f"{type(exc).__name__}: " + _class_of(str(exc))
    if ours.entry_name != view.entry:
        return "mismatch", "entry computation differs"
    root = ours.entry.root
    if root.name != view.root_name:
        return "mismatch", "entry root differs"
    if root.shape.text() != view.root_shape:
        return "mismatch", "entry root " + _shape_class(root.shape.text(), view.root_shape)
    ours_comps = {c.name: c for c in ours.computations}
    if set(ours_comps) != set(view.shapes):
        return "mismatch", "computations differ"
    for name, per in view.shapes.items():
        comp = ours_comps[name]
        if len(comp.instructions) != len(per):
            return "mismatch", "instruction count differs"
        for inst in comp.instructions:
            theirs = per.get(inst.name)
            if theirs is None:
                return "mismatch", "instruction names differ"
            if inst.shape.text() != theirs:
                return "mismatch", _shape_class(inst.shape.text(), theirs)
    return "match", ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("corpus", type=Path, help="directory of *.hlo files (one module each)")
    parser.add_argument("--limit", type=int, default=0, help="read only the first N modules")
    parser.add_argument("--examples", type=int, default=2, help="files named per failure class")
    parser.add_argument("--top", type=int, default=15, help="failure classes shown")
    parser.add_argument("--json", type=Path, help="write every module's outcome here")
    parser.add_argument("--xla-cache", type=Path,
                        help="keep XLA's readings in this JSON file (read back on the next run)")
    args = parser.parse_args(argv)
    cache: dict[str, Any] = {}
    if args.xla_cache and args.xla_cache.exists():
        cache = json.loads(args.xla_cache.read_text())

    files = sorted(args.corpus.rglob("*.hlo"))[: args.limit or None]
    if not files:
        print(f"{args.corpus}: no *.hlo files; pass the corpus directory", file=sys.stderr)
        return 2
    outcomes: dict[str, tuple[str, str]] = {}
    classes: Counter[str] = Counter()
    examples: dict[str, list[str]] = {}
    skipped = 0
    start = time.perf_counter()
    for path in files:
        text = path.read_text()
        key = f"{path.relative_to(args.corpus)}:{len(text)}"
        if key not in cache:
            try:
                v = xla_view(text)
                cache[key] = [v.entry, v.root_name, v.root_shape, v.shapes]
            except Exception:  # noqa: BLE001 - XLA itself rejects it: not part of the corpus
                cache[key] = None
        if cache[key] is None:
            skipped += 1
            continue
        status, why = compare(text, path.name, XlaView(*cache[key]))
        outcomes[path.name] = (status, why)
        if status != "match":
            key = f"{status}: {why}"
            classes[key] += 1
            examples.setdefault(key, []).append(path.name)
    elapsed = time.perf_counter() - start
    n = len(outcomes)
    counts = Counter(s for s, _ in outcomes.values())
    parsed = n - counts["error"] - counts["crash"]
    print(f"modules: {n} (XLA rejected {skipped}, skipped) in {elapsed:.1f} s")
    print(f"parse rate:       {parsed}/{n} = {100 * parsed / n:.2f}%")
    print(f"exact-match rate: {counts['match']}/{n} = {100 * counts['match'] / n:.2f}%")
    print(f"errors (InputError): {counts['error']}, other exceptions: {counts['crash']}, "
          f"parsed but different: {counts['mismatch']}")
    if classes:
        print("top failure classes:")
        for key, count in classes.most_common(args.top):
            print(f"  {count:6d}  {key}   e.g. {', '.join(examples[key][: args.examples])}")
    if args.xla_cache:
        args.xla_cache.write_text(json.dumps(cache))
    if args.json:
        args.json.write_text(json.dumps(outcomes, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
