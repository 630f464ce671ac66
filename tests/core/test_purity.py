"""The core reads no clock, no randomness, no network, no disk (docs/design.md I2).

Checked on the source with `ast`, so an import hidden inside a function (or
`__import__`/`importlib`) is caught as well as one at the top of a module.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

import haqueue.core

CORE = Path(haqueue.core.__file__).parent
MODULES = sorted(CORE.glob("*.py"))

# Standard library modules that would let state depend on something other
# than the log: time, randomness, I/O, threads, the node's identity.
FORBIDDEN = {
    "time", "datetime", "random", "secrets", "uuid", "socket", "ssl", "select", "selectors",
    "asyncio", "os", "sys", "pathlib", "shutil", "tempfile", "threading",
    "multiprocessing", "concurrent", "subprocess", "signal", "platform", "getpass", "logging",
    "pysyncobj",
}


def _imports(path: Path) -> set[str]:
    """Top-level names of every module `path` imports, wherever it does it."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: inside haqueue.core by construction
                found.add("haqueue")
            elif node.module:
                found.add(node.module.split(".")[0])
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "__import__":
            found.add("__import__")
    return found


def test_the_core_has_modules_to_check():
    names = {p.name for p in MODULES}
    assert {"__init__.py", "commands.py", "job.py", "state.py", "tube.py"} <= names


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_core_module_imports_only_the_standard_library_and_the_core(path):
    for name in _imports(path):
        if name == "haqueue":
            continue
        assert name in sys.stdlib_module_names, f"{path.name} imports {name}, not in the standard library"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_core_module_imports_no_clock_randomness_io_or_threads(path):
    bad = _imports(path) & (FORBIDDEN | {"__import__", "importlib"})
    assert not bad, f"{path.name} imports {sorted(bad)}"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_core_module_imports_from_haqueue_only_the_core(path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("haqueue"):
            assert node.module == "haqueue.core" or node.module.startswith("haqueue.core."), (
                f"{path.name} imports {node.module}: imports point one way, core -> standard library"
            )
        if isinstance(node, ast.Import):
            for alias in node.names:
                assert not alias.name.startswith("haqueue") or alias.name.startswith("haqueue.core"), alias.name


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_core_module_calls_no_builtin_that_reaches_outside(path):
    # open/input/print touch files or terminals; hash() of a str differs per
    # process (PYTHONHASHSEED), so state must not depend on it; id() differs
    # per process too.
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            assert node.func.id not in {"open", "input", "print", "hash", "id", "exec", "eval"}, (
                f"{path.name}:{node.lineno} calls {node.func.id}()"
            )


def test_the_checker_sees_a_forbidden_import_inside_a_function(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("def f():\n    import time\n    from os import path\n    return __import__('random')\n")
    assert {"time", "os", "__import__"} <= _imports(sample)
