"""Plug-ins: the functions a config names, built-in or in a user's own file.

A reference is either the name of a built-in (`rnn`, `ohlc_returns`, ...), looked up in
the registry its caller passes, or `path/to/file.py:function` for a function in the user's
own file, the path relative to the working folder. Both come back as a plain function, so
there is one code path from here on. A user's file is imported once per process and
version: a warm worker that runs job after job (rnnfleet.warm) imports it again when the
file has changed since. A reference that cannot be resolved raises UserError naming the
config key, the file and the function.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from collections.abc import Callable
from pathlib import Path

from rnnfleet.errors import UserError, one_line

_imported_files: dict[tuple[str, int, int], object] = {}  # (absolute path, mtime in ns, size) -> module


def is_file_reference(reference: str) -> bool:
    """True for `path/to/file.py:function` (a user's file), False for a built-in name."""
    path, _, function_name = reference.rpartition(":")
    return path.endswith(".py") and bool(function_name)


def reference_file(reference: str) -> str | None:
    """The file a reference names (as written), or None for a built-in."""
    return reference.rpartition(":")[0] if is_file_reference(reference) else None


def resolve(reference: str, registry: dict[str, Callable], config_key: str) -> Callable:
    """The function `reference` names: registry[reference] for a built-in, else the function
    in the user's file (imported once per process)."""
    if not is_file_reference(reference):
        if reference in registry:
            return registry[reference]
        raise UserError(
            f"config key '{config_key}' = {reference!r} is neither a built-in ({', '.join(registry)}) "
            "nor a 'path/to/file.py:function' reference"
        )
    path, function_name = reference.rsplit(":", 1)
    module = _import_file(path, reference, config_key)
    function = getattr(module, function_name, None)
    if function is None:
        raise UserError(f"{path}: has no function {function_name!r} (config key '{config_key}' = {reference!r})")
    if not callable(function):
        raise UserError(f"{path}: {function_name!r} is not a function (config key '{config_key}' = {reference!r})")
    return function


def require_file(reference: str, config_key: str) -> None:
    """UserError naming the file and the config key when the file a reference names is not there."""
    path = reference_file(reference)
    if path is not None and not os.path.isfile(path):
        raise UserError(
            f"{path}: no such file (config key '{config_key}' = {reference!r}; paths are relative to "
            f"the working folder {os.getcwd()})"
        )


def _import_file(path: str, reference: str, config_key: str):
    absolute = str(Path(path).resolve())
    require_file(reference, config_key)
    file_info = os.stat(absolute)
    version = (absolute, file_info.st_mtime_ns, file_info.st_size)
    if version in _imported_files:
        return _imported_files[version]
    # A name per file, so that two users' files called model.py do not replace each other.
    module_name = f"rnnfleet_plugin_{Path(path).stem}_{hashlib.sha1(absolute.encode()).hexdigest()[:10]}"
    spec = importlib.util.spec_from_file_location(module_name, absolute)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as error:
        del sys.modules[module_name]
        raise UserError(
            f"{path}: importing it failed ({type(error).__name__}: {one_line(error)}) "
            f"(config key '{config_key}' = {reference!r})"
        ) from None
    _imported_files[version] = module
    return module


def describe(reference: str) -> str:
    """How messages name a reference: 'my/file.py: function build' or "built-in 'rnn'"."""
    if is_file_reference(reference):
        path, function_name = reference.rsplit(":", 1)
        return f"{path}: function {function_name}"
    return f"built-in {reference!r}"
