"""Plug-ins: the functions a config names, built-in or in a user's own file.

A reference is either the name of a built-in (`rnn`, `ohlc_returns`, ...), looked up in
the registry its caller passes, or `path/to/file.py:function` for a function in the user's
own file, the path relative to the working folder. Both come back as a plain function, so
there is one code path from here on. A user's file is read once per import, and the bytes
read are the bytes hashed and run; a file is imported once per process and content: a warm
worker that runs job after job (rnnfleet.runner.warm) imports it again when the file has changed
since. A reference that cannot be resolved raises UserError naming the config key, the file
and the function.

A model file names plug-ins too, and a model file may come from anyone: model_file_sources
reads the ones it names and lets through only those the user trusts (see there); they are
then resolved from those vetted bytes, never from the disk again.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import MappingProxyType

from rnnfleet.errors import UserError, one_line

NO_SOURCES: Mapping[str, bytes] = MappingProxyType({})  # for resolve: no user file may be imported
_modules: dict[tuple[str, str], object] = {}  # (absolute path, sha256 of its bytes) -> module
_imported_sha256: dict[str, str] = {}  # absolute path -> sha256 of the bytes last imported from it


class PluginRefused(UserError):
    """A model file names a plug-in file the user has not trusted; nothing was imported."""


# The built-in model builder (rnnfleet.train.models.BUILDERS): model.builder's default.
DEFAULT_BUILDER = "rnn"


def is_file_reference(reference: str) -> bool:
    """True for `path/to/file.py:function` (a user's file), False for a built-in name."""
    path, _, function_name = reference.rpartition(":")
    return path.endswith(".py") and bool(function_name)


def reference_file(reference: str) -> str | None:
    """The file a reference names (as written), or None for a built-in."""
    return reference.rpartition(":")[0] if is_file_reference(reference) else None


def reference_files(references: Iterable[str]) -> list[str]:
    """The user's own files among plug-in references (built-in names have none), in order, once each."""
    return list(dict.fromkeys(filter(None, map(reference_file, references))))


def sha256_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def resolve(
    reference: str, registry: dict[str, Callable], config_key: str, sources: Mapping[str, bytes] | None = None
) -> Callable:
    """The function `reference` names: registry[reference] for a built-in, else the function
    in the user's file (imported once per process and content). sources: None reads the
    file (one the user named in the config); else a model file's vetted plug-ins
    (model_file_sources), and a file not among them is refused, not read."""
    if not is_file_reference(reference):
        if reference in registry:
            return registry[reference]
        raise UserError(
            f"config key '{config_key}' = {reference!r} is neither a built-in ({', '.join(registry)}) "
            "nor a 'path/to/file.py:function' reference"
        )
    path, function_name = reference.rsplit(":", 1)
    if sources is None:
        data = _read(path, f"config key '{config_key}' = {reference!r}")
    elif path in sources:
        data = sources[path]
    else:
        raise PluginRefused(f"{path}: not imported: it is not among the model file's vetted plug-in files")
    module = _import(path, data, reference, config_key)
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


def _read(path: str, named_by: str) -> bytes:
    absolute = Path(path).resolve()
    if not absolute.is_file():
        raise UserError(f"{path}: no such file ({named_by}; paths are relative to the working folder {os.getcwd()})")
    try:
        return absolute.read_bytes()
    except OSError as error:
        raise UserError(f"{path}: cannot be read ({error.strerror}) ({named_by})") from None


def _import(path: str, data: bytes, reference: str, config_key: str):
    """The module `data` (the bytes of `path`) defines: compiled and run from those bytes,
    never read again, so what was hashed is what runs."""
    absolute = str(Path(path).resolve())
    digest = sha256_of(data)
    version = (absolute, digest)
    if version not in _modules:
        # A name per file, so that two users' files called model.py do not replace each other.
        module_name = f"rnnfleet_plugin_{Path(path).stem}_{hashlib.sha1(absolute.encode()).hexdigest()[:10]}"
        module = importlib.util.module_from_spec(importlib.util.spec_from_file_location(module_name, absolute))
        sys.modules[module_name] = module
        try:
            exec(compile(data, absolute, "exec", dont_inherit=True), module.__dict__)
        except Exception as error:
            del sys.modules[module_name]
            raise UserError(
                f"{path}: importing it failed ({type(error).__name__}: {one_line(error)}) "
                f"(config key '{config_key}' = {reference!r})"
            ) from None
        _modules[version] = module
    _imported_sha256[absolute] = digest
    return _modules[version]


def imported_sha256(references: Iterable[str]) -> dict[str, str]:
    """{file as written: sha256 of the bytes this process last imported from it} for the
    user's files among `references` (what a model file records, see model_file_sources)."""
    hashes = {}
    for path in reference_files(references):
        digest = _imported_sha256.get(str(Path(path).resolve()))
        if digest is not None:
            hashes[path] = digest
    return hashes


def model_file_sources(
    references: Iterable[str], recorded_sha256: Mapping[str, str], model_path: str | os.PathLike, trusted: Iterable[str]
) -> dict[str, bytes]:
    """{file as written: its bytes} for each user file among a model file's `references`,
    read once, for resolve(sources=...). A file is let through only when the user trusts it:
    it is one of `trusted` (files the user names: predict's --trust, the run's config), or
    it lies inside the working folder and its bytes have the sha256 the model file recorded
    at training. Any other raises PluginRefused (one line) before anything is imported."""
    project = Path.cwd().resolve()
    trusted_paths = {Path(path).resolve() for path in trusted}
    sources = {}
    for path in reference_files(references):
        absolute = Path(path).resolve()
        if absolute in trusted_paths:
            sources[path] = _read(path, f"named by the model file {model_path}")
            continue
        if not absolute.is_relative_to(project):
            where = "" if str(absolute) == path else f" (it is {absolute})"  # e.g. through a symlink
            raise _refusal(model_path, path, f"it lies outside the project folder {project}{where}")
        if path not in recorded_sha256:
            raise _refusal(model_path, path, "the model file records no content hash for it")
        data = _read(path, f"named by the model file {model_path}")
        if sha256_of(data) != recorded_sha256[path]:
            raise _refusal(model_path, path, "its content is not what the model was trained with (sha256 differs)")
        sources[path] = data
    return sources


def _refusal(model_path: str | os.PathLike, path: str, reason: str) -> PluginRefused:
    return PluginRefused(
        f"{model_path}: refused to import plug-in file {path}: {reason}; nothing was imported. "
        f"If you trust that file, name it: python -m rnnfleet.cli.predict --trust {path} "
        "(in the workflow: the config's model.builder or features)"
    )


def describe(reference: str) -> str:
    """How messages name a reference: 'my/file.py: function build' or "built-in 'rnn'"."""
    if is_file_reference(reference):
        path, function_name = reference.rsplit(":", 1)
        return f"{path}: function {function_name}"
    return f"built-in {reference!r}"
