"""Connects a `weir.ProcessFunction` subclass to the component's `process-function` export.

componentize-py (0.25) looks in the app module for a class named after the exported
interface, `ProcessFunction`, and calls its `init(ctx)`, `process_element(element)` and
`on_timer(timer)` with the raw WIT records. `export(MyUdf)` builds that class: it keeps
the one `MyUdf` instance in a closure (an instance of the returned class holds nothing, so
it does not matter how often componentize-py creates one), wraps the raw records in the
SDK's types, and turns every exception into the contract's `error` result:

- `weir.Reject` -> the `dead-letters.reject` import and a successful return (the host
  takes the call back and dead-letters the element with the reason);
- `weir.StateDecodeError` -> kind `state-decode` (the host dead-letters the element);
- `weir.Error` -> kind `failed`, its message alone;
- anything else -> kind `failed`, `Type: message` and the Python traceback, with the
  glue's own frame left out, so the host's report shows where the UDF failed.

Two things about componentize-py shape the tracebacks. The source files are there only
while the component is built (when the app module is imported and the interpreter's state
snapshotted), not when it runs, so `export` reads the UDF's sources into `linecache` then,
and tracebacks show source lines. And the module path's folders are mounted as `/0`,
`/1`, ..., which the traceback leaves out: `File "app.py", line 12`.

Built with the batch export (`WEIR_GUEST_BATCH=1`, world `keyed-process-with-batch`),
componentize-py also looks for a class `Batch`: `export` puts one in the app module (see
`weir._batch`), so the UDF's code is the same either way.

In plain CPython `export` works too (the app module imports natively), but nothing calls
the class it returns: `weir.testing.TestHost` runs the `ProcessFunction` subclass itself
and lets its exceptions through as they are.
"""

import linecache
import os
import re
import sys
import traceback

from . import _batch
from . import _bindings as _host
from .context import Context, Element, Error, InitContext, TimeDomain, Timer, _in_chain, _rejection
from .state import StateDecodeError

__all__ = ["ProcessFunction", "export"]

_Err = _host.Err
_ErrorKind = _host.types.ErrorKind
_WitError = _host.types.Error


class ProcessFunction:
    """A keyed process function, in the sense of Flink's `KeyedProcessFunction`.

    Subclass it, override the methods, and export the class from the app module with
    `ProcessFunction = weir.export(MyFunction)`. The host may create a fresh instance
    (and call `init` again) at any time, so anything that must survive belongs in keyed
    state, not in `self`.
    """

    def init(self, ctx):
        """Reads the config and declares states and outputs (`ctx` is an
        `InitContext`). Keyed state and timers cannot be used here."""

    def process_element(self, ctx, element):
        """Handles one input element; state and timers are scoped to its key."""
        raise NotImplementedError("process_element is not implemented")

    def on_timer(self, ctx, timer):
        """Handles a firing timer; state and timers are scoped to its key. Functions
        that never register timers need not implement it."""


_MOUNT = re.compile(r'File "/\d+/')


def _keep_sources(*folders):
    """Reads the sources of the loaded modules under `folders` into `linecache`, as
    entries it never drops (no mtime), so they survive into the snapshot."""
    prefixes = tuple(os.path.join(folder, "") for folder in folders)
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if not path or not path.endswith(".py") or not path.startswith(prefixes):
            continue
        lines = linecache.getlines(path)
        if lines:
            linecache.cache[path] = (sum(map(len, lines)), None, lines, path)


def _caused_by_state_decode(e):
    """Whether `e` or an exception in its chain is a `StateDecodeError`."""
    return _in_chain(e, StateDecodeError) is not None


def _wit_error(e):
    """The contract's `error` for exception `e`, caught in a glue method."""
    if _caused_by_state_decode(e):
        return _WitError(str(e), _ErrorKind.STATE_DECODE)
    if isinstance(e, Error):
        message = str(e)
        if e.__cause__ is not None:  # `raise Error(...) from cause`, like anyhow's chain
            message += f": {type(e.__cause__).__name__}: {e.__cause__}"
        return _WitError(message, _ErrorKind.FAILED)
    summary = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
    # The first traceback entry is the glue method that caught `e`: leave it out.
    lines = traceback.format_exception(type(e), e, e.__traceback__.tb_next)
    text = _MOUNT.sub('File "', "".join(lines).rstrip("\n"))
    if text.endswith("\n" + summary):  # the summary is already the first line
        text = text[: -len(summary) - 1]
    return _WitError(f"{summary}\n{text}", _ErrorKind.FAILED)


def _reject_or_raise(e):
    """For exception `e` of a keyed call: a rejection goes to the host's import (and the
    call returns), anything else is the call's error."""
    rejection = _rejection(e)
    if rejection is None:
        raise _Err(_wit_error(e)) from None
    _host.dead_letters.reject(rejection.reason)


def _failed(message):
    return _Err(_WitError(message, _ErrorKind.FAILED))


_DOMAINS = (TimeDomain.EVENT_TIME, TimeDomain.PROCESSING_TIME)


def _batch_error(e):
    """The contract's `error` for a batch that failed with `e`. The host does not report
    it: it runs the batch's entries again one call at a time, which report exactly."""
    if isinstance(e, _batch.BatchFailed):
        return _WitError(f"weir: {e}", _ErrorKind.FAILED)
    return _wit_error(e)


def export(cls):
    """Returns the class componentize-py exports, running `cls` (a `ProcessFunction`
    subclass). Use it once, in the app module: `ProcessFunction = weir.export(MyUdf)`."""
    if not (isinstance(cls, type) and issubclass(cls, ProcessFunction)):
        raise TypeError(f"weir.export: {cls!r} is not a subclass of weir.ProcessFunction")
    app_file = getattr(sys.modules.get(cls.__module__), "__file__", None)
    if app_file and _host.IN_COMPONENT:  # natively the files stay where they are
        _keep_sources(os.path.dirname(app_file), os.path.dirname(__file__))
    slot = {}  # "udf": the live instance, "inputs": the input names

    class Export:
        def init(self, ctx):
            slot.clear()
            try:
                udf = cls()
                init = InitContext(ctx.config, ctx.inputs)
                udf.init(init)
            except BaseException as e:  # noqa: BLE001 - every failure goes to the host
                raise _Err(_wit_error(e)) from None
            slot["udf"] = udf
            slot["inputs"] = list(ctx.inputs)

        def process_element(self, element):
            udf = slot.get("udf")
            if udf is None:
                raise _failed("weir: called before a successful init")
            inputs = slot["inputs"]
            index = element.input
            if index >= len(inputs):
                raise _failed(
                    f"weir: element from input #{index} but only {len(inputs)} inputs "
                    "are connected"
                )
            key, timestamp = element.key, element.timestamp
            try:
                udf.process_element(
                    Context(key, timestamp),
                    Element(inputs[index], index, key, element.value, timestamp),
                )
            except BaseException as e:  # noqa: BLE001
                _reject_or_raise(e)

        def on_timer(self, timer):
            udf = slot.get("udf")
            if udf is None:
                raise _failed("weir: called before a successful init")
            key, timestamp = timer.key, timer.timestamp
            try:
                udf.on_timer(Context(key, timestamp), Timer(timer.domain, timestamp, key))
            except BaseException as e:  # noqa: BLE001
                _reject_or_raise(e)

    class Batch:
        def process_batch(self, batch):
            udf = slot.get("udf")
            if udf is None:
                raise _failed("weir: called before a successful init")
            try:
                return _batch.run(udf, slot["inputs"], batch, Context, Element, Timer, _DOMAINS)
            except BaseException as e:  # noqa: BLE001 - every failure goes to the host
                raise _Err(_batch_error(e)) from None

    Batch.__doc__ = f"The component's `batch` export, running {cls.__name__}."
    Export.__name__ = Export.__qualname__ = "ProcessFunction"
    Export.udf_class = cls  # for weir.testing.TestHost(app.ProcessFunction)
    Export.__doc__ = f"The component's `process-function` export, running {cls.__name__}."
    # The batch export (world `keyed-process-with-batch`): componentize-py looks for a
    # class named after it in the app module, so it is put there, beside
    # `ProcessFunction`, without the UDF's code naming it. A `Batch` of the module's own
    # is left alone (the component then cannot take batches: rename it).
    Export.Batch = Batch
    sys._getframe(1).f_globals.setdefault("Batch", Batch)
    return Export
