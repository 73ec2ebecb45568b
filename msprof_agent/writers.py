"""Atomic file writers: a reader (the viewer, MindInsight, another rank) never sees half a file.

Each writer writes to a temporary name in the target directory and renames it into place.
"""
from __future__ import annotations

import contextlib
import csv
import errno
import io
import os
import tempfile

import orjson

TYPE_CHECKING = False  # typing is not imported at run time: the agent starts inside every training process
if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator, Sequence
    from typing import IO


@contextlib.contextmanager
def replacing(path: str, size: int | None = None, exclusive: bool = False) -> Iterator[IO[bytes]]:
    """A file to write (or stream) into that replaces ``path`` only once complete. ``size``, when the
    writer will write exactly that much, is reserved up front: one extent allocation instead of one
    per write, and a full disk said before, not midway. ``exclusive``: create ``path`` only if absent
    (FileExistsError otherwise; whoever was first keeps their file), for files several ranks may write."""
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=directory)
    try:
        if size:
            _reserve(fd, size)
        with os.fdopen(fd, "wb") as handle:
            yield handle
        os.chmod(tmp, 0o644)
        if exclusive:
            os.link(tmp, path)
            os.remove(tmp)
        else:
            os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise


def _reserve(fd: int, size: int) -> None:
    """Allocate the file's blocks at once where the file system can; elsewhere writing allocates them."""
    try:
        os.posix_fallocate(fd, 0, size)
    except (AttributeError, OSError) as exc:  # no such call (macOS), or a file system without it
        if getattr(exc, "errno", None) not in (None, errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            raise  # ENOSPC: better now than after writing hundreds of megabytes


def write_bytes(path: str, data: bytes) -> None:
    with replacing(path) as handle:
        handle.write(data)


def write_json(path: str, value: object, pretty: bool = False) -> None:
    option = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS | (orjson.OPT_INDENT_2 if pretty else 0)
    write_bytes(path, orjson.dumps(value, option=option))


def write_csv(path: str, header: Sequence[str], rows: Iterable[Sequence[object]]) -> None:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    write_bytes(path, buffer.getvalue().encode())


def write_text(path: str, lines: Sequence[str]) -> None:
    write_bytes(path, ("\n".join(lines) + ("\n" if lines else "")).encode())
