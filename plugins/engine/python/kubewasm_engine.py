"""kubewasm's Python engine (wit/engine@0.1.0): CPython, the SDK and the contract's bindings,
pre-initialized by componentize-py at build time; a plugin's source arrives at run time through
`source.compile` (once per plugin version, in the host) and `source.load` (once per instance).

componentize-py puts into the component only the modules imported while it pre-initializes (its
issue 23): a plugin may import the SDK and the standard library modules in STDLIB below, nothing
else. The list is part of the engine's version: a module added is a new engine, none is removed
within a minor version."""

import importlib
import importlib.abc
import importlib.util
import marshal
import sys
import traceback
import types

import kubewasm  # noqa: F401
import kubewasm.cache, kubewasm.client, kubewasm.conditions, kubewasm.events, kubewasm.finalizers, kubewasm.log  # noqa: F401,E401

# The standard library a plugin may import (besides what the SDK and this module import): imported
# here, at build time, so the snapshot holds them. Kept in step with plugins/engine/python/README.md.
STDLIB = """base64 bisect collections copy dataclasses datetime enum fnmatch functools hashlib heapq
ipaddress itertools json math operator random re string textwrap typing urllib.parse uuid""".split()
for _name in STDLIB:
    importlib.import_module(_name)

import wit_world  # noqa: E402
from componentize_py_types import Err  # noqa: E402
from wit_world.exports import source as _source  # noqa: E402

# The file name plugin code is compiled under: tells the plugin's frames from the engine's.
_PREFIX = "<plugin>/"


def _module_name(path: str) -> str:
    name = path[: -len(".py")] if path.endswith(".py") else path
    name = name.replace("/", ".")
    return name[: -len(".__init__")] if name.endswith(".__init__") else name


class _Files(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves a plugin of several files as modules: source or what `compile` made of it."""

    def __init__(self, files):
        self.code = {}  # module name -> (path, source bytes or code object, is a package)
        for f in files:
            compiled = f.path.endswith(".pyc")
            path = f.path[: -len(".pyc")] + ".py" if compiled else f.path
            body = marshal.loads(f.contents) if compiled else f.contents
            self.code[_module_name(path)] = (path, body, path.endswith("__init__.py"))
        # A directory of the plugin's without an `__init__.py` is a package all the same, as a
        # namespace package is (PEP 420).
        for name in list(self.code):
            parts = name.split(".")
            for i in range(1, len(parts)):
                package = ".".join(parts[:i])
                self.code.setdefault(package, ("/".join(parts[:i]) + "/__init__.py", b"", True))

    def find_spec(self, name, path=None, target=None):
        if name not in self.code:
            return None
        path, _, is_package = self.code[name]
        return importlib.util.spec_from_loader(name, self, origin=_PREFIX + path, is_package=is_package)

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        path, body, _ = self.code[module.__name__]
        if isinstance(body, (bytes, bytearray)):
            body = compile(body, _PREFIX + path, "exec", dont_inherit=True)
        module.__file__ = _PREFIX + path
        exec(body, module.__dict__)


def _error(kind: str, exc: BaseException) -> "_source.SourceError":
    """A source error with the place in the plugin's files it comes from, if it is there."""
    location = None
    if isinstance(exc, SyntaxError) and (exc.filename or "").startswith(_PREFIX):
        file = exc.filename[len(_PREFIX):]
        location = _source.Location(file=file, line=exc.lineno or 0, column=exc.offset or 0)
        message = f"{type(exc).__name__}: {exc.msg}"
    else:
        message = f"{type(exc).__name__}: {exc}"
        # The innermost frame in the plugin's code: where its import failed.
        for frame in reversed(traceback.extract_tb(exc.__traceback__)):
            if frame.filename.startswith(_PREFIX):
                location = _source.Location(file=frame.filename[len(_PREFIX):], line=frame.lineno or 0, column=0)
                break
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return _source.SourceError(kind=kind, message=message, location=location, traceback=tb)


_plugin = None  # the loaded plugin's WitWorld instance


class Source(wit_world.exports.Source):
    def compile(self, files):
        out = []
        for f in files:
            try:
                code = compile(f.contents, _PREFIX + f.path, "exec", dont_inherit=True)
            except SyntaxError as exc:
                raise Err(_error("syntax", exc))
            out.append(_source.File(path=f.path[: -len(".py")] + ".pyc", contents=marshal.dumps(code)))
        return out

    def load(self, files, entry):
        global _plugin
        try:
            if len(files) == 1 and files[0].path.endswith(".pyc"):
                # One compiled file: no import machinery, run its code as module `entry`.
                module = types.ModuleType(entry)
                module.__file__ = _PREFIX + files[0].path[: -len(".pyc")] + ".py"
                sys.modules[entry] = module
                exec(marshal.loads(files[0].contents), module.__dict__)
            else:
                sys.meta_path.insert(0, _Files(files))
                module = importlib.import_module(entry)
        except SyntaxError as exc:
            raise Err(_error("syntax", exc))
        except ImportError as exc:
            raise Err(_error("import", exc))
        except Exception as exc:
            raise Err(_error("exception", exc))
        world = getattr(module, "WitWorld", None)
        if world is None:
            message = f"module {entry} has no @reconciler"
            raise Err(_source.SourceError(kind="exception", message=message, location=None, traceback=""))
        _plugin = world()


def _loaded():
    if _plugin is None:
        raise RuntimeError("no plugin loaded: the host calls source.load first")
    return _plugin


class WitWorld(wit_world.WitWorld):
    """The controller exports, served by the plugin `load` loaded."""

    def describe(self):
        return _loaded().describe()

    def reconcile(self, request):
        return _loaded().reconcile(request)

    def map(self, kind, obj):
        return _loaded().map(kind, obj)
