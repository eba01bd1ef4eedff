"""pandas imported where the table is first used, not where a module names it.

The op table is built from columns read out of a capture; the read itself needs numpy only. pandas
(with pyarrow where it is installed) is 35-77 MiB of resident memory and 0.3 s of imports: imported
after the read, it is not in memory while the read's columns are at their peak. Every module that
uses pandas at run time names it through :data:`pd`, so no ``import pandas`` loads it early. The
first attribute read (``pd.DataFrame``) loads it (the standard library's ``importlib.util.LazyLoader``).
"""

from __future__ import annotations

import importlib.util
import sys
import threading
from types import ModuleType
from typing import TYPE_CHECKING

__all__ = ["lazy_module", "pd"]

_lock = threading.Lock()


def lazy_module(name: str) -> ModuleType:
    """``name`` as a module loaded on its first attribute read (the module itself where it is
    already imported, or cannot be found: then the import raises as usual)."""
    with _lock:
        if name in sys.modules:
            return sys.modules[name]
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return importlib.import_module(name)
        loader = importlib.util.LazyLoader(spec.loader)
        spec.loader = loader
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        loader.exec_module(module)
        return module


if TYPE_CHECKING:
    import pandas as pd
else:
    pd = lazy_module("pandas")
