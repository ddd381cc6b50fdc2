"""Reading a file the user names (a profile, a kubeconfig, an audit export): bounded, and regular files only.

``/dev/zero`` never ends and a FIFO blocks until someone writes to it, so a plain ``read_bytes()`` of
either hangs or fills memory. The file is opened without blocking, checked to be a regular file
on the open descriptor (no window to swap it for a FIFO after a check), and read up to a bound
before anything parses it. Standard input is read up to the same bound.
"""

from __future__ import annotations

import os
import pathlib
import stat
from typing import BinaryIO

from orchestrator import errors

PROFILE_BYTES = 1 << 20  # a real profile is a few KiB (orchestrator.profile.strictyaml refuses more than this)
KUBECONFIG_BYTES = 4 << 20  # hundreds of clusters with their CA certificates inline
EXPORT_BYTES = 256 << 20  # every revision's manifests of a long-lived release


def read(path: str | os.PathLike[str], what: str, limit: int) -> bytes:
    """At most ``limit`` + 1 bytes of the regular file ``path`` (one more than ``limit``: the caller
    can tell a file that is too large); :class:`~orchestrator.errors.UsageError` (exit 1) naming ``what``
    for a missing path, a directory, a FIFO, a device or a socket."""
    p = pathlib.Path(path)
    fd, _ = _open_regular(p, what)
    try:
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read(limit + 1)
    except OSError as e:
        raise errors.UsageError(f"cannot read {what} {p}: {e.strerror}") from e
    finally:
        os.close(fd)


def check(path: str | os.PathLike[str], what: str, limit: int) -> None:
    """Refuse ``path`` as :func:`read` would, and a file of more than ``limit`` bytes: for a library that
    reads the file itself (the kubernetes client reads the kubeconfig)."""
    p = pathlib.Path(path)
    fd, size = _open_regular(p, what)
    os.close(fd)
    if size > limit:
        raise errors.UsageError(f"{what} {p} is {size:,} bytes, more than {limit:,}; is it the right file?")


def _open_regular(p: pathlib.Path, what: str) -> tuple[int, int]:
    """A blocking descriptor of the regular file ``p``, and its size."""
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except FileNotFoundError as e:
        raise errors.UsageError(f"{what} {p} does not exist; check the path") from e
    except IsADirectoryError as e:
        raise errors.UsageError(f"{p} is a directory; give the path of the {what} file") from e
    except PermissionError as e:
        raise errors.UsageError(f"cannot read {what} {p}: permission denied") from e
    except OSError as e:
        raise errors.UsageError(f"cannot read {what} {p}: {e.strerror}") from e
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise errors.UsageError(f"{p} is a directory; give the path of the {what} file")
        if not stat.S_ISREG(st.st_mode):
            raise errors.UsageError(
                f"{what} {p} is not a regular file but {_kind(st.st_mode)}, which could block or never end; "
                "give the path of a file (save the stream to one first)"
            )
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd, st.st_size


def read_stream(stream: BinaryIO, what: str, limit: int) -> bytes:
    """At most ``limit`` + 1 bytes of ``stream`` (standard input)."""
    try:
        return stream.read(limit + 1)
    except OSError as e:
        raise errors.UsageError(f"cannot read {what} from standard input: {e.strerror}") from e


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"
