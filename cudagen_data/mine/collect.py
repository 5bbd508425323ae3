"""Import one Python file and gather every Warp kernel it defines (runs in a worker).

Kernels defined at module level, in class bodies, or made by factories that run at import
are created by the import itself; a hook on Warp's ``Kernel`` constructor records each
one made while the file is imported (a module's registry keeps only the last kernel of a
name).  Kernels defined inside
functions (test methods, say) exist only when the function runs, and running tests is
neither fast nor safe: such a ``def`` is *replayed* instead.  Its enclosing functions'
preceding definitions (``@wp.func``, structs, constants, imports) are executed in a copy
of the module's globals, then the def itself, with the ``__qualname__`` Python would have
given it (Warp derives the kernel's CUDA name from it).  A def that needs its enclosing
function's arguments or loop variables fails to replay and is reported.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import sys
import types
from dataclasses import dataclass
from pathlib import Path

import xxhash

from .. import warp_boundary as warp_env
from ..contracts.reject import RejectReason, error_line
from ..warp_boundary import mining as warp_mining
from .discover import KernelDef, SourceFile, is_kernel_decorator, kernel_defs


class CollectStage:
    """Mining's own stage, before the extract, compile and dedup stages it shares with the
    synthetic rows (what ``generate`` is to them): a file imported in a worker, its kernels
    gathered.  These are the reasons it rejects a kernel with (:mod:`..contracts.reject`)."""

    name = "collect"
    reasons = (
        RejectReason.NEEDS_GPU,
        RejectReason.MISSING_DEPENDENCY,
        RejectReason.SYNTAX_ERROR,
        RejectReason.IMPORT_ERROR,
        RejectReason.NOT_REPLAYABLE,
        RejectReason.NOT_CREATED,
        RejectReason.GENERIC_NO_OVERLOADS,
        RejectReason.TIMEOUT,
        RejectReason.CRASH,
        RejectReason.MINING_ERROR,
    )


@dataclass
class FoundKernel:
    kernel: object  # the wp.Kernel (a generic parent is expanded by the caller)
    qualname: str
    line: int  # first decorator line in the file
    nested: bool  # made by replaying a def inside a function


@dataclass
class FileKernels:
    source: str
    defs: list[KernelDef]
    found: list[FoundKernel]
    import_error: str | None = None
    replay_errors: list[tuple[KernelDef, str]] | None = None


def module_name_for(path: Path, relpath: str) -> tuple[str, str, bool]:
    """(module name, folder to put on sys.path, whether it is a package module)."""
    parts = [] if path.name == "__init__.py" else [path.stem]
    folder = path.parent
    while (folder / "__init__.py").exists():
        parts.insert(0, folder.name)
        folder = folder.parent
    if len(parts) > 1 or (path.name == "__init__.py" and parts):
        return ".".join(parts), str(folder), True
    # A loose script: a name of its own, so ``utils.py`` never shadows another module.
    return f"cudagen_mined_{xxhash.xxh3_64_hexdigest(relpath.encode())[:10]}_{path.stem}", str(path.parent), False


def import_file(src: SourceFile) -> tuple[types.ModuleType | None, str | None]:
    """Import the file as a module (its main block does not run); (module, error line)."""
    path = Path(src.path)
    name, folder, is_package = module_name_for(path, src.relpath)
    if folder not in sys.path:
        sys.path.append(folder)  # appended: never shadows installed packages
    if not is_package and str(path.parent) not in sys.path:
        sys.path.append(str(path.parent))
    try:
        if is_package:
            module = importlib.import_module(name)
            if Path(getattr(module, "__file__", "") or "").resolve() != path.resolve():
                return None, f"ImportError: {name} resolves to another installed module"
        else:
            warp_mining.forget_kernels_of(str(path))  # those of its last run here, if any: stale
            spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
        return module, None
    except BaseException as exc:  # noqa: BLE001 - arbitrary code: SystemExit, unittest.SkipTest, ...
        return None, error_line(exc)


def collect(src: SourceFile) -> FileKernels:
    """Import ``src`` and gather its kernels (see the module docstring)."""
    warp_mining.install_kernel_hook()
    wp = warp_env.warp()
    source = Path(src.path).read_text(encoding="utf-8", errors="replace")
    try:
        defs = kernel_defs(ast.parse(source))
        tree = ast.parse(source)
    except SyntaxError as exc:
        return FileKernels(source, [], [], import_error=f"SyntaxError: {exc.msg} (line {exc.lineno})")
    if not defs:
        return FileKernels(source, defs, [])
    warp_mining.reset_process_state()
    with warp_mining.importing_mined_file():
        module, error = import_file(src)
    if module is None:
        return FileKernels(source, defs, [], import_error=error)
    real = str(Path(src.path).resolve())
    by_line = {d.line: d for d in defs}
    found: dict[int, FoundKernel] = {}
    # Registry first (kernels made before the hook, e.g. while Warp itself was imported),
    # then every kernel created while a mined file was imported (this one, or one that
    # imported it before).
    for k in warp_mining.known_kernels():
        code = getattr(k.func, "__code__", None)
        if code is None or k.generic_parent is not None or _resolved(code.co_filename) != real:
            continue
        d = by_line.get(code.co_firstlineno)
        if d is None:
            continue
        found.setdefault(id(k), FoundKernel(k, k.func.__qualname__, d.line, False))
    # One kernel per definition site (a factory called twice makes two: keep both).
    seen_lines = {f.line for f in found.values()}
    replay_errors = []
    for d in defs:
        if d.line in seen_lines or not d.nested or "<locals>" not in d.qualname:
            continue
        kernel, err = replay(module, tree, d)
        if kernel is None:
            replay_errors.append((d, err))
        else:
            found[id(kernel)] = FoundKernel(kernel, d.qualname, d.line, True)
    del wp
    ordered = sorted(found.values(), key=lambda f: (f.line, f.qualname))
    return FileKernels(source, defs, ordered, None, replay_errors)


def _resolved(filename: str) -> str:
    try:
        return str(Path(filename).resolve())
    except OSError:
        return filename


# --------------------------------------------------------------------------- replay


def _chain(tree: ast.Module, target: KernelDef) -> list[ast.AST] | None:
    """Enclosing function/class nodes from the module down to the kernel def itself."""
    parents = _parents(tree)
    node = next(
        (
            n
            for n in parents
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            and n.lineno == target.def_line
            and n.name == target.name
        ),
        None,
    )
    if node is None:
        return None
    chain = [node]
    while (node := parents.get(node)) is not None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            chain.insert(0, node)
    return chain


_parent_cache: dict[int, dict] = {}


def _parents(tree: ast.Module) -> dict[ast.AST, ast.AST | None]:
    """Each node's parent (computed once per parsed file)."""
    if id(tree) not in _parent_cache:
        _parent_cache.clear()
        parents: dict[ast.AST, ast.AST | None] = {}
        for parent in ast.walk(tree):
            for child in ast.iter_child_nodes(parent):
                parents[child] = parent if parent is not tree else None
        _parent_cache[id(tree)] = parents
    return _parent_cache[id(tree)]


def replay(module: types.ModuleType, tree: ast.Module, target: KernelDef) -> tuple[object | None, str]:
    """Re-create a kernel defined inside a function, without running the function."""
    wp = warp_env.warp()
    chain = _chain(tree, target)
    if not chain:
        return None, "definition not found"
    namespace = dict(vars(module))
    prefix = ""
    for outer, inner in zip(chain, chain[1:], strict=False):
        prefix += f"{outer.name}.<locals>." if not isinstance(outer, ast.ClassDef) else f"{outer.name}."
        if isinstance(outer, ast.ClassDef):
            continue
        _bind_defaults(outer, namespace)
        for stmt in outer.body:
            if stmt is inner or _contains(stmt, inner):
                break
            _define(stmt, namespace, prefix, silent=True)
    try:
        obj = _define(chain[-1], namespace, prefix, silent=False)
    except Exception as exc:  # noqa: BLE001 - the def's own decorator or annotations failed
        return None, _unresolved(exc)
    if not isinstance(obj, wp.Kernel):
        return None, "decorator did not return a kernel"
    return obj, ""


def _contains(stmt: ast.stmt, node: ast.AST) -> bool:
    return any(n is node for n in ast.walk(stmt))


def _bind_defaults(fn: ast.FunctionDef, namespace: dict) -> None:
    """Parameters with a default value take it (a factory's ``dtype=wp.float32``)."""
    args = fn.args
    positional = args.posonlyargs + args.args
    pairs = list(zip(positional[len(positional) - len(args.defaults) :], args.defaults, strict=False))
    pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=False) if d is not None]
    for arg, default in pairs:
        try:
            namespace[arg.arg] = eval(compile(ast.Expression(default), "<default>", "eval"), namespace)
        except Exception:  # noqa: BLE001
            pass


def _define(stmt: ast.stmt, namespace: dict, prefix: str, *, silent: bool):
    """Execute one definition statement; functions and classes get their true qualname.

    Only definitions run: calls (launches, assertions) are skipped, and a definition
    that raises is skipped when ``silent`` (it needed the function's arguments)."""
    filename = namespace.get("__file__") or "<mined>"
    if isinstance(stmt, (ast.FunctionDef, ast.ClassDef)):
        if silent and isinstance(stmt, ast.FunctionDef) and any(is_kernel_decorator(d) for d in stmt.decorator_list):
            return None  # a sibling kernel is replayed on its own turn
        # Decorators are applied after __qualname__ is set; identity placeholders keep their
        # lines, so co_firstlineno (and the source Warp hashes) starts at the first one.
        placeholders = [ast.copy_location(ast.Name(id=_IDENTITY, ctx=ast.Load()), d) for d in stmt.decorator_list]
        bare = type(stmt)(**{**{f: getattr(stmt, f) for f in stmt._fields}, "decorator_list": placeholders})
        ast.copy_location(bare, stmt)
        namespace[_IDENTITY] = _identity
        try:
            decorators = [eval(compile(ast.Expression(d), filename, "eval"), namespace) for d in stmt.decorator_list]
            exec(compile(ast.Module(body=[bare], type_ignores=[]), filename, "exec"), namespace)
            obj = namespace[stmt.name]
            obj.__qualname__ = prefix + stmt.name
            for dec in reversed(decorators):
                obj = dec(obj)
            namespace[stmt.name] = obj
            return obj
        except Exception:
            if silent:
                return None
            raise
    if silent and isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.Import, ast.ImportFrom)):
        try:
            exec(compile(ast.Module(body=[stmt], type_ignores=[]), filename, "exec"), namespace)
        except Exception:  # noqa: BLE001
            pass
    return None


_IDENTITY = "__cudagen_identity__"


def _identity(obj):
    return obj


def _unresolved(exc: BaseException) -> str:
    if isinstance(exc, NameError):
        return f"needs its enclosing function's variables ({error_line(exc)})"
    return error_line(exc)
