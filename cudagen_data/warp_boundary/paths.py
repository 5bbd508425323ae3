"""Machine paths out of everything Warp and NVRTC write: the same bytes on any machine.

No ``warp._src`` here: only where the ``warp`` package is installed.

Warp writes the absolute path of a function's source file above the CUDA of every
``@wp.func`` it emits (``// /home/me/.venv/lib/python3.11/site-packages/warp/_src/math.py:0``
for a library function such as ``wp.norm_l1``), and ``#line`` directives when line info
is on; NVRTC's logs name the headers it included from the installed Warp.  Left as they
are, these name a person's directories and make the CUDA (and its hash) depend on where
Python is installed.

The rule (stated in the dataset card, :data:`PATH_RULE`): a path inside the imported Warp
package becomes relative to the folder that holds the package (``warp/_src/math.py``); a
user's file becomes relative to the root it was given under; any other file relative to
the ``sys.path`` entry it was imported from (its import path); anything else keeps only
its file name.  Pseudo file names (``<cudagen:...>``) are already machine-independent.

Pure functions over text; the roots are looked up once per process.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import sys

PATH_RULE = (
    "Source-location comments in the CUDA (`// <file>:<line>`) and paths in compiler logs never "
    "name the machine that made the data: files of Warp itself are given relative to the folder "
    "holding the `warp` package (`warp/_src/math.py:0`), any other file relative to the root or "
    "import path it came from, or by its name alone."
)

# `// /abs/file.py:12` ending a line (Warp's function templates), and `#line 12 "/abs/file.py"`.
# Both start with a literal, which the regex engine scans for quickly.
_LOCATION_COMMENT = re.compile(r"// (?P<path>(?:/|[A-Za-z]:[\\/])[^\n]*?):(?P<line>\d+)[ \t]*$", re.M)
_LINE_DIRECTIVE = re.compile(r'#line (?P<n>\d+) "(?P<path>(?:/|[A-Za-z]:[\\/])[^"\n]*)"')
# An absolute path inside free text (a compiler log, an exception message): starts at a
# separator not preceded by a word character, runs to whitespace, a quote, a bracket or a
# `:line` / `(line)` suffix.
_ABSOLUTE_PATH = re.compile(r"(?<![\w.~/-])(?:/|[A-Za-z]:\\)[^\s\"'<>()\[\]{},;:]+")


@functools.lru_cache(maxsize=1)
def warp_package_dir() -> str:
    """The folder of the ``warp`` package this process imports (without importing it)."""
    spec = importlib.util.find_spec("warp")
    if spec is None or not spec.submodule_search_locations:
        return ""
    return os.path.realpath(list(spec.submodule_search_locations)[0])


def _import_roots() -> list[str]:
    """Folders a file may be relative to, most specific first: Warp's parent folder, then
    every ``sys.path`` entry (site-packages, the standard library ...)."""
    roots = []
    warp_dir = warp_package_dir()
    if warp_dir:
        roots.append(os.path.dirname(warp_dir))
    for entry in sys.path:
        if entry and os.path.isabs(entry):
            roots.append(os.path.realpath(entry))
    return roots


def _under(path: str, root: str) -> str | None:
    """``path`` relative to ``root`` (POSIX separators), or None if it is not inside it."""
    root = root.rstrip("/\\")
    if not root or not path.startswith(root) or path[len(root) : len(root) + 1] not in ("/", "\\"):
        return None
    return path[len(root) + 1 :].replace("\\", "/")


def machine_independent_path(path: str, root: str | os.PathLike | None = None) -> str:
    """The machine-independent name of a source file (see the module's rule).

    ``root`` is the folder a user's files were given under (``cudagen extract``: the
    file's folder; mining: the repository root).  Relative paths and pseudo names
    (``<cudagen:...>``) come back unchanged.
    """
    if not (path.startswith("/") or re.match(r"[A-Za-z]:[\\/]", path)):
        return path
    return _machine_independent_path(path, None if root is None else os.fspath(root), tuple(sys.path))


@functools.lru_cache(maxsize=4096)
def _machine_independent_path(path: str, root: str | None, _sys_path: tuple[str, ...]) -> str:
    # cached per (path, root, sys.path): resolving a path touches the file system
    candidates = [path]
    real = os.path.realpath(path)
    if real != path:
        candidates.append(real)
    # Warp's own files are always named from `warp/`; then the user's root; then the
    # import root that holds the file most closely.
    warp_dir = warp_package_dir()
    if warp_dir:
        for p in candidates:
            rel = _under(p, os.path.dirname(warp_dir))
            if rel is not None and rel.startswith("warp/"):
                return rel
    for base in (os.path.realpath(root), os.path.abspath(root)) if root is not None else ():
        for p in candidates:
            rel = _under(p, base)
            if rel is not None:
                return rel
    best = None
    for base in _import_roots():
        for p in candidates:
            rel = _under(p, base)
            if rel is not None and (best is None or len(rel) < len(best)):
                best = rel
    if best is not None:
        return best
    return re.split(r"[\\/]", path)[-1]


def normalize_generated_text(text: str, root: str | os.PathLike | None = None) -> str:
    """CUDA (or C++) text as Warp emits it, with every source-location comment and
    ``#line`` directive naming a machine-independent path."""
    if "// /" not in text and "#line " not in text and ":\\" not in text:
        return text  # the common case: a substring scan

    def comment(m: re.Match) -> str:
        return f"// {machine_independent_path(m['path'], root)}:{m['line']}"

    def directive(m: re.Match) -> str:
        return f'#line {m["n"]} "{machine_independent_path(m["path"], root)}"'

    return _LINE_DIRECTIVE.sub(directive, _LOCATION_COMMENT.sub(comment, text))


def scrub_paths(text: str, root: str | os.PathLike | None = None) -> str:
    """Free text (a compiler log, an exception message) with each absolute path of an
    existing file or folder replaced by its machine-independent name."""
    if not text or ("/" not in text and "\\" not in text):
        return text

    def one(m: re.Match) -> str:
        path = m.group(0)
        if not os.path.exists(path):
            return path  # not a path on this machine (a C++ `/` operator, a URL part ...)
        return machine_independent_path(path, root)

    return _ABSOLUTE_PATH.sub(one, text)
