"""The host's imports, as componentize-py generates them from wit/weir.wit.

Inside a component built with `componentize-py -d wit -w keyed-process componentize`,
the package `wit_world` exists and every function below calls into the host. Outside one
(plain CPython) it does not: then the same names come from `weir._native`, an in-memory
host that `weir.testing.TestHost` drives, so a UDF runs natively in unit tests with the
same SDK code. Outside a TestHost call they raise, and `import weir` still works (the
pure helpers in `weir.time` and `weir.duration` need no host).

The choice is made once, at import time, and the other modules call these names
directly, so inside a component a call costs what it did before there was a choice.

Every other module of the SDK reaches the host only through this one, which mirrors the
WIT imports one for one.
"""

try:
    from componentize_py_types import Err
    from wit_world.imports import dead_letters, logging, output, state, timers, types

    IN_COMPONENT = True
except ImportError:  # plain CPython: the in-memory host
    from ._native import Err, dead_letters, logging, output, state, timers, types

    IN_COMPONENT = False

TimeDomain = types.TimeDomain
LogLevel = types.LogLevel
TtlRefresh = types.TtlRefresh
