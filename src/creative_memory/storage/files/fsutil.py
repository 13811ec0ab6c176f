"""Durable file helpers: atomic whole-file writes and private directories."""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import stat
from pathlib import Path

#: The errors of a write this process may not make where it tried: a read-only file system,
#: files or directories of another account (docs/storage.md, "A store you cannot write").
NOT_WRITABLE: frozenset[int] = frozenset({errno.EROFS, errno.EACCES, errno.EPERM})


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


#: A path that names one of the process's open descriptors (``/dev/stdout``,
#: ``/dev/fd/N``, ``/proc/self/fd/N``): writing to it must reach that descriptor's file.
_DESCRIPTOR_PATH = re.compile(
    r"/dev/std(?:in|out|err)|/dev/fd/[0-9]+|/proc/(?:self|thread-self|[0-9]+)"
    r"(?:/task/[0-9]+)?/fd/[0-9]+"
)


def _names_a_descriptor(path: Path) -> bool:
    """Whether ``path``, or a symlink on its way to a file, names an open descriptor."""
    p = os.path.abspath(path)
    for _ in range(40):  # the kernel's own limit on symlinks followed
        head, tail = os.path.split(p)
        p = os.path.join(os.path.realpath(head), tail)
        if _DESCRIPTOR_PATH.fullmatch(p):
            return True
        try:
            link = os.readlink(p)
        except OSError:
            return False
        p = os.path.normpath(os.path.join(head, link))
    return False


def _write_through(path: Path, data: bytes) -> None:
    """Write ``data`` into the existing ``path`` as it is (a FIFO, a device, a descriptor)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically: temp file, fsync, rename, directory fsync
    (docs/storage.md, "Durability guarantees").

    A symlink stays a symlink: the file it resolves to is replaced. An existing ``path``
    that is not a regular file (a FIFO, a device such as ``/dev/null``) or that names an
    open descriptor (``/dev/stdout``, ``/dev/fd/N``, a shell's ``>(…)``) is written into
    as it is, never replaced. Errors name ``path``, never the temp file."""
    try:
        st: os.stat_result | None = os.stat(path)
    except OSError:
        st = None
    try:
        if (
            st is not None
            and not stat.S_ISDIR(st.st_mode)
            and (not stat.S_ISREG(st.st_mode) or _names_a_descriptor(path))
        ):
            _write_through(path, data)
            return
        target = Path(os.path.realpath(path)) if os.path.islink(path) else path
        _replace(target, data)
    except OSError as exc:
        if exc.errno is None:
            raise
        raise OSError(exc.errno, exc.strerror, os.fspath(path)) from exc


def _replace(path: Path, data: bytes) -> None:
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
