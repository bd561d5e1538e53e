"""The engine's one change to the garbage collector.

A worker allocates and frees many small objects per step (coroutines,
futures, records), so CPython's collector runs often, and each full
collection walks every object the process holds: the modules, classes and
functions that the imports made (tens of thousands before the application
adds its own), which never become garbage. `freeze_startup_heap` moves
them out of its way: at the first engine start in a process (unless
``Engine(freeze_gc=False)``), one `gc.collect` frees what is garbage by
then, and `gc.freeze` moves every object still alive to the collector's
permanent generation. Frozen objects are still freed when their reference
count drops to zero; only a reference cycle among them that becomes
garbage later is never collected. In the 500 x 10 workload of
``benchmarks/compare_dbos.py`` this cut the CPU per step by about 9%
(session 11 of issue 20).
"""

from __future__ import annotations

import gc

__all__ = ["freeze_startup_heap"]

_frozen = False


def freeze_startup_heap() -> bool:
    """Once per process: `gc.collect`, then `gc.freeze` (see the module
    docstring). True if this call did it."""
    global _frozen
    if _frozen:
        return False
    _frozen = True
    gc.collect()
    gc.freeze()
    return True
