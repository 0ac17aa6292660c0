"""The methods dataclasses writes, compiled once and kept on disk, as Python keeps a module's bytecode (issue 40).

On Python 3.11 and 3.12 the `dataclass` decorator writes each class's `__init__`, `__repr__`, `__eq__`, `__hash__`
and, when frozen, `__setattr__`/`__delattr__` as source text and compiles that text with `exec` while the module is
imported (3.13 and later: one text per class, kept the same way): some 230 compilations on a peek's path, ~20 ms of
a start-up of ~140 ms, the same every run. The text depends only on the class's definition, and compiling a text
always gives the same code object, so the code can be kept: `install` puts an `exec` into the dataclasses module's
namespace (dataclasses looks the name up there before the builtins) that compiles each text once and keeps the code
object, keyed by the text itself, in one marshal file per interpreter build
(`methods-2-cpython-311-30b07f0-O0.marshal`). What runs is what dataclasses would have compiled; only the compiling
is skipped.

The file holds code that runs, so it is read only when it is this user's own and no one else may write it (as ssh
treats its keys), and it is written as 0600 (`tempfile.mkstemp`: a name of its own per writer, whatever the umask).
The file starts with a CRC-32 of the rest, checked before anything in it is unmarshalled: marshal is not made for
damaged data, and a damaged code object can crash the interpreter, not only raise. A file that cannot be read, is
not ours, fails its check or is not a map of text → bytes is ignored; an entry that does not unmarshal to code is
compiled again; a cache that cannot be written is no error. Like `.pyc` files, nothing is written under
`python -B` / PYTHONDONTWRITEBYTECODE (what is there is still read). Nothing here is needed for dlxtool to work:
without the file every text is compiled, as without this module.
"""

from __future__ import annotations

import atexit
import binascii
import builtins
import contextlib
import dataclasses
import marshal
import os
import stat
import sys
from collections.abc import Mapping
from pathlib import Path
from types import CodeType
from typing import Any

CACHE_ENV = "DLXTOOL_CACHE_DIR"  # the same variable as the schema cache's (proto_registry.cache)
FORMAT_VERSION = "2"  # in the file's name: a change to what is kept, or how it is compiled, starts a new file
MAX_ENTRIES = 5_000  # past this (many versions' classes), a save keeps only the texts this run compiled or used


class MethodCache:
    """The text → code map of one interpreter build, and whether this run added to it.

    Each code object is kept marshalled on its own and unmarshalled when its text comes: the whole map as bytes loads
    in under 1 ms, where one marshal of ~230 code objects took 6.5 ms to load (measured on Python 3.11)."""

    def __init__(self, path: Path, kept: dict[str, bytes]) -> None:
        self.path = path
        self.kept = kept
        self.used: set[str] = set()
        self.added = False

    def exec(self, source: Any, globals: dict[str, Any] | None = None,
             locals: Mapping[str, object] | None = None) -> None:
        """builtins.exec, with a text compiled at most once per machine."""
        if type(source) is str:
            source = self._code(source)
        # dataclasses always passes its globals; without them exec would take this frame's, not dataclasses'
        builtins.exec(source, dataclasses.__dict__ if globals is None else globals, locals)

    def _code(self, text: str) -> CodeType:
        code = _unmarshal(self.kept.get(text))
        if code is None:
            # As dataclasses' own exec(text) compiles it: no __future__ flags (this module's `annotations` would turn
            # the methods' annotations into the names of dataclasses' locals)
            code = compile(text, "<string>", "exec", dont_inherit=True)
            self.kept[text] = marshal.dumps(code)
            self.added = True
        self.used.add(text)
        return code

    def save(self) -> None:
        """Write the map if this run compiled something new; atomically, and silently not where it cannot. It runs
        at exit, after the command said everything: nothing here may print a traceback or change the exit code, and
        a Ctrl-C that lands in these few milliseconds only leaves the file as it was."""
        if not self.added:
            return
        import tempfile  # only when something new was compiled: a warm start does not pay for it

        tmp: str | None = None
        try:
            kept = self.kept if len(self.kept) <= MAX_ENTRIES else {t: self.kept[t] for t in self.used}
            data = marshal.dumps(kept)
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.", suffix=".tmp")
            with os.fdopen(fd, "wb") as fh:
                fh.write(binascii.crc32(data).to_bytes(4, "big"))
                fh.write(data)
            os.replace(tmp, self.path)
        except (Exception, KeyboardInterrupt):  # noqa: BLE001 - a cache not written is no error (the module docstring)
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)


def _unmarshal(entry: bytes | None) -> CodeType | None:
    """The code of a kept entry, or None: absent, or not code (the file passed its check; still, nothing here may
    stop a command)."""
    if entry is None:
        return None
    try:
        code = marshal.loads(entry)
    except Exception:  # noqa: BLE001 - a bad entry raises ValueError, EOFError, TypeError, even SystemError: compile
        return None
    return code if type(code) is CodeType else None


def cache_path(env: Mapping[str, str]) -> Path:
    """`$DLXTOOL_CACHE_DIR/methods-TAG.marshal`, else `$XDG_CACHE_HOME/dlxtool/…`, else `~/.cache/dlxtool/…`."""
    # the interpreter build and its -O level: what compiling a text gives depends on both, as .pyc names say
    name = (f"methods-{FORMAT_VERSION}-{sys.implementation.cache_tag}-{sys.hexversion:x}-"
            f"O{sys.flags.optimize}.marshal")
    override = env.get(CACHE_ENV)
    if override:
        return Path(override) / name
    xdg = env.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "dlxtool" / name


MAX_FILE_BYTES = 64 << 20  # far past what every dataclass of dlxtool makes (0.5 MB): a larger file is not ours


def load(path: Path) -> dict[str, bytes]:
    """The kept map, or an empty one: absent, unreadable, not a regular file (a FIFO would block the open), not this
    user's own, writable by others, too large, damaged (its CRC-32), or not a map."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        with open(fd, "rb") as fh:
            info = os.fstat(fd)
            if (not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid()
                    or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) or info.st_size > MAX_FILE_BYTES):
                return {}
            data = fh.read()
    except (OSError, MemoryError):
        return {}
    body = memoryview(data)[4:]
    if len(data) <= 4 or binascii.crc32(body) != int.from_bytes(data[:4], "big"):
        return {}
    try:
        kept = marshal.loads(body)
    except Exception:  # noqa: BLE001 - the check passed, so this is not damage; still, never stop a command here
        return {}
    if not isinstance(kept, dict):
        return {}
    return {text: code for text, code in kept.items() if type(text) is str and type(code) is bytes}


def install(env: Mapping[str, str] | None = None) -> MethodCache | None:
    """Route dataclasses' compiling through the kept map, for the rest of this process; None without `os.getuid`
    (Windows: no owner to check) or a home directory. Python 3.13 and later write one text per class, not one per
    method: kept the same way."""
    if not hasattr(os, "getuid"):
        return None
    try:
        path = cache_path(os.environ if env is None else env)
    except RuntimeError:  # no home directory to find
        return None
    cache = MethodCache(path, load(path))
    # A module global shadows the builtin for dataclasses' own `exec(...)` calls, and for nothing else.
    setattr(dataclasses, "exec", cache.exec)  # noqa: B010 (the stub has no such attribute)
    if not sys.dont_write_bytecode:  # -B / PYTHONDONTWRITEBYTECODE: no compiled code written, as for .pyc files
        atexit.register(cache.save)
    return cache
