"""The Weir guest SDK for Python: write a keyed process function (a UDF) in plain
Python and build it into a WebAssembly component with componentize-py.

A UDF subclasses `weir.ProcessFunction` (Flink's `KeyedProcessFunction`): `init` once per
instance to read the config and declare states and outputs, then `process_element` per
record and `on_timer` per firing timer, each scoped by the host to one key. Everything
stateful (keyed state, timers, watermarks) lives in the host, so the instance holds only
handles and config. The app module exports it under the name componentize-py looks for:

    import weir

    class Echo(weir.ProcessFunction):
        def init(self, ctx):
            self.out = ctx.main_output()

        def process_element(self, ctx, element):
            self.out.emit(element.json(), key=ctx.current_key())

    ProcessFunction = weir.export(Echo)

The API follows the Rust SDK (`guest-sdk/src`, documented in docs/udf-authoring.md):
`ctx.value_state(...)`, `ctx.output(...)`, `ctx.register_event_timer(...)`,
`weir.time.format_millis(...)` and so on, so the two read alike.

Build: `scripts/toolchain/build-python.sh SRC_DIR OUT.wasm` in a Weir checkout, which runs
`componentize-py -d wit -w keyed-process componentize -p guest-sdk/python -p SRC_DIR app`.

Rules, beyond those of the Rust SDK:

- Import every module at the top level of the app (or of modules it imports). The
  component is a snapshot of the interpreter taken after importing the app at build
  time; the source files are not in it, so an `import` first run inside a function fails
  with `ModuleNotFoundError`.
- Times are `int` milliseconds since the epoch. Python's integers do not overflow, but
  the host takes 64-bit ones: clamp with `MIN_TIMESTAMP` / `MAX_TIMESTAMP` where a sum
  may pass them (the Rust SDK's `saturating_add`).
- An exception fails the call; what the run does then is the pipeline's `[udf] on_error`
  (stop, the default; dead-letter; retry), and the host prints `Type: message` and the
  traceback. `weir.Error("...")` is reported by its message alone (for bad config and
  the like). `raise weir.Reject("reason")` rejects the record instead: the host takes
  the call back and sends the record to the dead-letter output with the reason.
  A state value its codec cannot read raises `StateDecodeError`, which the host handles
  by sending the element to the dead-letter output.
- A state may have a time-to-live (`ctx.value_state("seen", ttl=weir.StateTtl.event_time(
  "1h"))`, Flink's `StateTtlConfig`, in event or processing time): the host removes each
  entry that long after it was last written (or read), without calling the UDF.
- State and outputs are JSON by default (see `weir.codec`), not the Rust SDK's postcard:
  a Python version of a UDF cannot read the state a Rust version wrote, or vice versa.
  `weir.MarshalCodec(SomeDataclass)` (or `weir.MARSHAL`) stores state in Python's
  binary `marshal` format instead: several times faster on big states, and exact.
- The sandbox grants nothing: no files, no environment, clocks frozen at 1970
  (`ctx.current_processing_time()` is the host's clock), and `print` output is dropped:
  log with `ctx.log_info(...)` (stderr goes to the host's log at debug level).

Test natively: `weir.testing.TestHost(MyFunction, config={...})` runs the UDF with plain
CPython against an in-memory host (`python3 -m unittest`, no wasm); see docs/udf-python.md.

Modules: `context` (contexts, elements, timers, outputs, config), `state` (value, list and
map state, and their time-to-live), `codec` (how values become bytes: JSON by default),
`duration` and `time` (pure helpers, usable outside a component too), `testing` (the
in-memory `TestHost`; not imported by `weir` itself, so not in the component), `_export`
(the glue to the component's exports), `_bindings` (the host's imports; the only module
that talks to the host), `_batch` (the batch export, built with `WEIR_GUEST_BATCH=1`: the
imports answered from a batch buffer) and `_native` (those imports in plain CPython: the
in-memory host).
"""

from . import time
from ._bindings import IN_COMPONENT
from ._export import ProcessFunction, export
from .codec import JSON, MARSHAL, RAW, TEXT, Codec, JsonCodec, MarshalCodec, to_json
from .context import (
    Context,
    Element,
    Error,
    InitContext,
    LogLevel,
    Output,
    Reject,
    TimeDomain,
    Timer,
)
from .duration import ParseDurationError, format_duration, parse_duration
from .state import ListState, MapState, StateDecodeError, StateTtl, ValueState
from .time import format_millis, format_seconds, parse_millis

#: The smallest and largest timestamps the host accepts (i64 milliseconds). Python's
#: integers do not overflow, so clamp sums that may pass them: `min(ts + w, MAX_TIMESTAMP)`.
MIN_TIMESTAMP = -(2**63)
MAX_TIMESTAMP = 2**63 - 1

__all__ = [
    "IN_COMPONENT",
    "MIN_TIMESTAMP",
    "MAX_TIMESTAMP",
    "ProcessFunction",
    "export",
    "Error",
    "Reject",
    "StateDecodeError",
    "InitContext",
    "Context",
    "Element",
    "Timer",
    "Output",
    "TimeDomain",
    "LogLevel",
    "ValueState",
    "StateTtl",
    "ListState",
    "MapState",
    "Codec",
    "JsonCodec",
    "MarshalCodec",
    "JSON",
    "MARSHAL",
    "TEXT",
    "RAW",
    "to_json",
    "ParseDurationError",
    "parse_duration",
    "format_duration",
    "format_millis",
    "format_seconds",
    "parse_millis",
    "time",
]
