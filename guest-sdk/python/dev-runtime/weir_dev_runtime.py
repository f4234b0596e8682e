"""`weir dev`'s Python development runtime: the app module of a component (world
`keyed-process-dev` of wit/weir.wit) that holds CPython, the `weir` SDK and a set of
standard library modules, and runs a project's sources that the host hands it at `init`.

`weir dev` builds it once per SDK version with componentize-py (the build imports this
module, which imports the modules of PRELOAD, and snapshots the interpreter) and keeps it
compiled; a save of the project's sources is then a new instance of the same component
with the new sources, not a new component.

What a UDF sees must be what the component `./build.sh` makes would show it, so:

- The preloaded modules are taken out of `sys.modules` once imported (kept in a stash),
  with what each one imported while it loaded. At `init`, while the project's app module
  runs its top level, an import of a stashed module puts it back together with those it
  had imported, exactly as importing it at build time would have left `sys.modules`.
- Once the app module has loaded, nothing more is served: an `import` first run inside a
  function fails with `ModuleNotFoundError`, as it does in a built component.
- A standard library module the app needs (even one it imports inside `try`) that the
  runtime does not hold makes `init` fail with a message naming it
  (`weir-dev: missing-module NAME`): `weir dev` then builds the component instead.
- Project modules get the paths a built component gives them (`/1/app.py`), and their
  sources go into `linecache`, so tracebacks read the same.
"""

import builtins
import sys

import _frozen_importlib as _bootstrap

from componentize_py_types import Err
from wit_world.imports import dev_sources, types

# Everything loaded before the preloading: a built component has these too (the bindings
# are imported by componentize-py's runtime and the SDK alike).
_BASE = set(sys.modules)

PRELOAD = [
    "weir",
    "weir.codec",
    "weir.context",
    "weir.duration",
    "weir.state",
    "weir.time",
    "abc",
    "array",
    "base64",
    "binascii",
    "bisect",
    "calendar",
    "cmath",
    "collections",
    "collections.abc",
    "colorsys",
    "contextlib",
    "copy",
    "csv",
    "dataclasses",
    "datetime",
    "decimal",
    "difflib",
    "enum",
    "fnmatch",
    "fractions",
    "functools",
    "graphlib",
    "hashlib",
    "heapq",
    "hmac",
    "html",
    "io",
    "ipaddress",
    "itertools",
    "json",
    "keyword",
    "math",
    "numbers",
    "operator",
    "pprint",
    "random",
    "re",
    "reprlib",
    "secrets",
    "shlex",
    "statistics",
    "string",
    "struct",
    "textwrap",
    "time",
    "types",
    "typing",
    "unicodedata",
    "urllib.parse",
    "uuid",
    "warnings",
    "weakref",
    "zlib",
]

# Project modules are given the path the second `-p` folder of a build has.
_PROJECT = "/1/"

# What each module imported while it loaded (and on later imports of it from its code).
_imports = {}
_loading = []


def _record(importer, name):
    if importer is not None and importer != name:
        _imports.setdefault(importer, set()).add(name)


def _resolve(name, globals, level):
    if not level:
        return name
    package = (globals or {}).get("__package__") or ""
    try:
        return _bootstrap._resolve_name(name, package, level)
    except Exception:  # noqa: BLE001 - the import itself reports it
        return name


_real_import = builtins.__import__
_real_load = _bootstrap._load_unlocked


def _recording_import(name, globals=None, locals=None, fromlist=(), level=0):
    module = _real_import(name, globals, locals, fromlist, level)
    importer = _loading[-1] if _loading else None
    resolved = _resolve(name, globals, level)
    parts = resolved.split(".")
    for i in range(1, len(parts) + 1):
        _record(importer, ".".join(parts[:i]))
    for item in fromlist or ():
        if f"{resolved}.{item}" in sys.modules:
            _record(importer, f"{resolved}.{item}")
    return module


def _recording_load(spec):
    _record(_loading[-1] if _loading else None, spec.name)
    _loading.append(spec.name)
    try:
        return _real_load(spec)
    finally:
        _loading.pop()


builtins.__import__ = _recording_import
_bootstrap._load_unlocked = _recording_load
try:
    PRELOADED = []
    for _name in PRELOAD:
        try:
            __import__(_name)
            PRELOADED.append(_name)
        except ImportError:
            pass
finally:
    builtins.__import__ = _real_import
    _bootstrap._load_unlocked = _real_load

import linecache  # noqa: E402  (a preloaded module: weir imports it)

import weir  # noqa: E402
from weir import _export  # noqa: E402

# The SDK's sources, for tracebacks (a build's `weir.export` reads them the same way).
_export._keep_sources(weir.__path__[0])

_stash = {name: sys.modules.pop(name) for name in list(sys.modules) if name not in _BASE}


def _closure(name):
    """`name` and everything it imported, transitively, that is in the stash."""
    seen, todo = set(), [name]
    while todo:
        n = todo.pop()
        if n in seen or n not in _stash:
            continue
        seen.add(n)
        todo.extend(_imports.get(n, ()))
        parent = n.rpartition(".")[0]
        if parent:
            todo.append(parent)
    return seen


class _StashLoader:
    """Puts a stashed module (and what it had imported) back into `sys.modules`."""

    def create_module(self, spec):
        return _stash[spec.name]

    def exec_module(self, module):
        name = module.__name__
        module.__spec__ = _specs[name]
        for other in _closure(name):
            sys.modules.setdefault(other, _stash[other])


class _SourceLoader:
    """Runs a project module from the sources the host handed over."""

    def __init__(self, path, source):
        self.path, self.source = path, source

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        module.__file__ = self.path
        exec(compile(self.source, self.path, "exec", dont_inherit=True), module.__dict__)


_specs = {name: getattr(module, "__spec__", None) for name, module in _stash.items()}


class _Finder:
    """Serves project modules and stashed ones until the app module has loaded."""

    def __init__(self, files):
        self.sealed = False
        self.missing = []
        self.modules = {}
        for path, source in files:
            if not path.endswith(".py"):
                continue
            parts = path[:-3].split("/")
            package = parts[-1] == "__init__"
            if package:
                parts.pop()
            if parts and all(p.isidentifier() for p in parts):
                self.modules[".".join(parts)] = (_PROJECT + path, source, package)

    def find_spec(self, name, path=None, target=None):
        if self.sealed:
            return None
        if name in self.modules:
            file, source, package = self.modules[name]
            spec = _bootstrap.spec_from_loader(
                name, _SourceLoader(file, source), origin=file, is_package=package
            )
            if package:
                spec.submodule_search_locations = [file.rpartition("/")[0]]
            spec.has_location = True
            return spec
        if name in _stash:
            return _bootstrap.ModuleSpec(name, _StashLoader(), is_package=hasattr(_stash[name], "__path__"))
        if (
            _bootstrap.BuiltinImporter.find_spec(name) is None
            and _bootstrap.FrozenImporter.find_spec(name) is None
            and name.partition(".")[0] in sys.stdlib_module_names
            and name not in self.missing
        ):
            self.missing.append(name)
        return None


def _error(message):
    return Err(types.Error(message, types.ErrorKind.FAILED))


_app = None  # the app module's export class, once loaded in this instance


def _load_app():
    files = dev_sources.sources()
    if not files:
        raise _error("this is weir dev's Python development runtime: it runs only under `weir dev`")
    files = [(path, bytes(source).decode("utf-8")) for path, source in files]
    for path, source in files:
        lines = source.splitlines(keepends=True)
        if lines and not lines[-1].endswith("\n"):
            lines[-1] += "\n"
        linecache.cache[_PROJECT + path] = (len(source), None, lines, _PROJECT + path)
    finder = _Finder(files)
    sys.meta_path.insert(0, finder)
    try:
        try:
            app = __import__("app")
        except BaseException as e:  # noqa: BLE001 - every failure goes to the host
            if finder.missing:
                raise _missing(finder.missing) from None
            raise Err(_export._wit_error(e)) from None
        if finder.missing:
            raise _missing(finder.missing)
    finally:
        finder.sealed = True
    export = getattr(app, "ProcessFunction", None)
    if export is None or not hasattr(export, "udf_class"):
        raise _error("app.py defines no `ProcessFunction = weir.export(MyFunction)`")
    return export


def _missing(names):
    listed = ", ".join(f"`{n}`" for n in names)
    return _error(
        f"weir-dev: missing-module {names[0]}: the Python development runtime does not hold "
        f"the standard library module {listed}, which app.py imports"
    )


class ProcessFunction:
    """The `process-function` export: loads the app on the first `init` of the instance,
    then passes every call to the app's own export."""

    def init(self, ctx):
        global _app
        if _app is None:
            _app = _load_app()()
        _app.init(ctx)

    def process_element(self, element):
        if _app is None:
            raise _error("weir: called before a successful init")
        _app.process_element(element)

    def on_timer(self, timer):
        if _app is None:
            raise _error("weir: called before a successful init")
        _app.on_timer(timer)
