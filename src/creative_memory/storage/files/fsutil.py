"""Durable file helpers: atomic whole-file writes and private directories."""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path


def fsync_path(path: Path, flags: int = os.O_RDONLY) -> None:
    """fsync what ``path`` names (a file: every byte written to it through any descriptor;
    ``FileNotFoundError`` when it is gone)."""
    fd = os.open(path, flags)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: Path) -> None:
    """Flush a directory's entries to disk."""
    fsync_path(path, os.O_RDONLY | os.O_DIRECTORY)


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically: temp file, fsync, rename, directory fsync."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        try:
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


def make_private_dir(path: Path) -> None:
    """Create ``path`` (and parents) with mode 0700 if missing, fsyncing the parent."""
    if path.is_dir():
        return
    if not path.parent.exists():
        make_private_dir(path.parent)
    try:
        path.mkdir(mode=0o700)
    except FileExistsError:
        return
    os.chmod(path, 0o700)
    fsync_dir(path.parent)
