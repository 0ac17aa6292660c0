"""On-disk cache of compiled descriptor sets, keyed by the content of the inputs."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

CACHE_ENV = "DLXTOOL_CACHE_DIR"
FORMAT_VERSION = "1"


def cache_dir(env: Mapping[str, str] | None = None) -> Path:
    """``$DLXTOOL_CACHE_DIR``, else ``$XDG_CACHE_HOME/dlxtool/proto``, else ``~/.cache/dlxtool/proto`` — of `env`
    (dlxtool passes the command's environment; None: this process's, for the library used on its own)."""
    env = os.environ if env is None else env
    override = env.get(CACHE_ENV)
    if override:
        return Path(override)
    xdg = env.get("XDG_CACHE_HOME")
    base = Path(xdg) if xdg else Path.home() / ".cache"
    return base / "dlxtool" / "proto"


def content_key(parts: list[tuple[str, bytes]], salt: str = "") -> str:
    """A stable key for named byte contents (order-independent, names included)."""
    # Here, not at the top: every peek asks cache_dir, only a schema load hashes; hashlib loads OpenSSL's libcrypto
    # (about 3 ms of a peek of JSON bodies, least of 21 fresh imports; issue 40's start-up)
    import hashlib

    h = hashlib.sha256()
    h.update(f"proto_registry-cache/{FORMAT_VERSION}/{salt}\0".encode())
    for name, data in sorted(parts, key=lambda p: p[0]):
        h.update(name.encode("utf-8", "surrogateescape"))
        h.update(b"\0")
        h.update(hashlib.sha256(data).digest())
    return h.hexdigest()


def read(directory: Path, key: str) -> bytes | None:
    try:
        return (directory / f"{key}.binpb").read_bytes()
    except OSError:
        return None


def write(directory: Path, key: str, data: bytes) -> bool:
    """Store atomically; a cache that cannot be written is not an error (returns False)."""
    import tempfile  # only on a miss: a warm start does not pay for it
    try:
        directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{key}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, directory / f"{key}.binpb")
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    except OSError:
        return False
    return True
