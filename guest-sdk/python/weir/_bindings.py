"""The host's imports, as componentize-py generates them from wit/weir.wit.

Inside a component built with `componentize-py -d wit -w keyed-process componentize`,
the package `wit_world` exists and every function below calls into the host. Outside one
(plain CPython, e.g. to try the pure helpers in `weir.time` and `weir.duration`) it does
not: then the names are stand-ins that raise, so `import weir` still works.

Every other module of the SDK reaches the host only through this one, which mirrors the
WIT imports one for one.
"""

try:
    from componentize_py_types import Err
    from wit_world.imports import logging, output, state, timers, types

    IN_COMPONENT = True
except ImportError:  # plain CPython: no host
    import enum
    from dataclasses import dataclass
    from types import SimpleNamespace

    IN_COMPONENT = False

    class Err(Exception):  # noqa: N818 - the name componentize-py uses
        """Stand-in for `componentize_py_types.Err`."""

        def __init__(self, value):
            super().__init__(value)
            self.value = value

    class _TimeDomain(enum.Enum):
        EVENT_TIME = 0
        PROCESSING_TIME = 1

    class _StateKind(enum.Enum):
        VALUE = 0
        LIST = 1
        MAP = 2

    class _LogLevel(enum.Enum):
        TRACE = 0
        DEBUG = 1
        INFO = 2
        WARN = 3
        ERROR = 4

    class _ErrorKind(enum.Enum):
        FAILED = 0
        STATE_DECODE = 1

    @dataclass
    class _Error:
        message: str
        kind: _ErrorKind

    def _no_host(*_args, **_kwargs):
        raise RuntimeError("weir: the host's imports exist only inside a wasm component")

    types = SimpleNamespace(
        TimeDomain=_TimeDomain,
        StateKind=_StateKind,
        LogLevel=_LogLevel,
        ErrorKind=_ErrorKind,
        Error=_Error,
    )
    state = SimpleNamespace(
        **{
            name: _no_host
            for name in (
                "declare value_get value_set list_get list_append list_set map_get "
                "map_put map_remove map_entries clear clear_all"
            ).split()
        }
    )
    timers = SimpleNamespace(
        register=_no_host,
        delete=_no_host,
        current_watermark=_no_host,
        current_processing_time=_no_host,
    )
    output = SimpleNamespace(declare=_no_host, emit=_no_host)
    logging = SimpleNamespace(log=_no_host)

TimeDomain = types.TimeDomain
LogLevel = types.LogLevel
