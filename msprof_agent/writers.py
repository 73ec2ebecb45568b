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
    writer will write that much, is checked against the free space first: a full disk is said before,
    not midway. ``exclusive``: create ``path`` only if absent
    (FileExistsError otherwise; whoever was first keeps their file), for files several ranks may write."""
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=directory)
    try:
        if size:
            _check_space(directory, size)
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


def _check_space(directory: str, size: int) -> None:
    """ENOSPC before hundreds of megabytes are written, not after. Not posix_fallocate: on ext4 the
    O_DIRECT writes into its unwritten extents took twice as long as writes that allocate."""
    stats = os.statvfs(directory)
    free = stats.f_bavail * stats.f_frsize
    if free < size:
        raise OSError(errno.ENOSPC, f"{size} bytes to write, {free} free", directory)


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
