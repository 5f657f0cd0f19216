"""Reading a cache entry as untrusted input (issue 39): anyone who can write the cache folder can plant one.

What an entry may not do, and what happens when one does (docs/hardening.md): a value file may not be a symbolic
link (nor sit in a linked folder), a FIFO, a device or another size than the index says; an inline value may not be
larger than vitlab writes one; an array entry may not hold a compressed member (it could inflate), a member whose
``.npy`` header claims another size than its bytes, an object, string or structured dtype, or other names and shapes
than its caller expects. Each is :class:`BadEntry`: the store drops it and the caller recomputes it. Nothing is read
before it is checked: a link is never followed, a FIFO never waited on, an array never allocated beyond its bytes.
"""

from __future__ import annotations

import errno
import io
import math
import os
import re
import sqlite3
import stat
import time
import zipfile
from pathlib import Path

import numpy as np

MIN_FILE = 1 << 16  # diskcache's disk_min_file_size here: smaller values live in the database, larger ones in files
ARRAY_KINDS = "biufcmM"  # the dtypes vitlab stores (bool, integers, floats, complex, times); never object, str, void
_MODE_RAW, _MODE_BINARY, _MODE_TEXT = 1, 2, 3  # diskcache's modes (diskcache.core.MODE_*); 4 (pickle) is refused
_VALUE_PATH = re.compile(r"[0-9a-f]{2}/[0-9a-f]{2}/[0-9a-f]{28}\.val")  # diskcache.Disk.filename's names


class BadEntry(ValueError):
    """A cache entry that is not what vitlab writes, or not what its caller expects: read as a miss."""


def unpack(blob: bytes, shapes: dict[str, tuple] | None = None, kinds: str = ARRAY_KINDS) -> dict[str, np.ndarray]:
    """The arrays :func:`pack` wrote, read as untrusted input (:class:`BadEntry` on anything else). Every member must
    be stored uncompressed, so nothing inflates: its size in the file is its size in memory, and the ``.npy`` header's
    shape × itemsize must equal it (checked before any array is read). ``shapes``: the member names the caller
    expects, each with its shape (``None`` for a free axis, or ``None`` for any shape); ``kinds``: allowed dtypes."""
    try:
        zf = zipfile.ZipFile(io.BytesIO(blob))
        members = zf.infolist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as e:
        raise BadEntry(f"not an npz ({e})") from e
    names = [m.filename[:-4] for m in members]
    if any(not m.filename.endswith(".npy") for m in members) or len(set(names)) != len(names):
        raise BadEntry("an npz member vitlab never writes")
    if shapes is not None and set(names) != set(shapes):
        raise BadEntry(f"arrays {sorted(names)} where {sorted(shapes)} were expected")
    if sum(m.file_size for m in members) > len(blob):
        raise BadEntry("members larger than the entry")
    for m, name in zip(members, names):
        _check_member(zf, m, name, None if shapes is None else shapes[name], kinds)
    try:
        with np.load(io.BytesIO(blob), allow_pickle=False) as z:
            return {k: z[k] for k in names}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:  # e.g. a CRC mismatch (a flipped bit)
        raise BadEntry(f"unreadable array ({e})") from e


def _check_member(zf: zipfile.ZipFile, m: zipfile.ZipInfo, name: str, shape, kinds: str) -> None:
    """One npz member's size, dtype and shape, from its zip record and ``.npy`` header alone (nothing inflated)."""
    from numpy.lib import format as npy

    if m.compress_type != zipfile.ZIP_STORED or m.compress_size != m.file_size:
        raise BadEntry(f"array '{name}' is compressed (vitlab stores arrays uncompressed): it could inflate")
    try:
        with zf.open(m) as f:
            version = npy.read_magic(f)
            read_header = npy.read_array_header_1_0 if version == (1, 0) else npy.read_array_header_2_0
            got, _, dtype = read_header(f)
            header = f.tell()
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
        raise BadEntry(f"array '{name}' has no readable header ({e})") from e
    if dtype.hasobject or dtype.kind not in kinds or dtype.fields is not None:
        raise BadEntry(f"array '{name}' of dtype {dtype} where a {'/'.join(kinds)} array belongs")
    if math.prod(got) * dtype.itemsize != m.file_size - header:
        raise BadEntry(f"array '{name}' of shape {got} does not fill its {m.file_size - header} bytes")
    if shape is not None and (len(got) != len(shape) or any(w is not None and w != g for g, w in zip(got, shape))):
        raise BadEntry(f"array '{name}' of shape {got} where {shape} was expected")


def read_regular(directory: Path, filename: str, size: int, limit: int) -> bytes:
    """The bytes of the value file ``directory/filename`` (``ab/cd/<28 hex digits>.val``), read as untrusted input:
    each folder and the file opened without following a symbolic link and without blocking (a FIFO never hangs the
    open), the file read only when it is a regular file of exactly ``size`` bytes (the index's size), at most
    ``limit``; :class:`BadEntry` otherwise."""
    if not _VALUE_PATH.fullmatch(str(filename).replace(os.sep, "/")):
        raise BadEntry(f"a value file named {str(filename)[:80]!r} (not one diskcache makes)")
    if not (isinstance(size, int) and 0 < size <= limit):
        raise BadEntry(f"a value file the index sizes at {size!r} bytes (the most allowed: {limit})")
    *folders, name = str(filename).replace(os.sep, "/").split("/")
    fd = _open_folder(directory, folders)
    try:
        opened = _open_at(name, _FILE_FLAGS | getattr(os, "O_NOFOLLOW", 0), fd)
        os.close(fd)
        fd = opened
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise BadEntry(f"a value file that is not a regular file (mode {stat.filemode(st.st_mode)})")
        if st.st_size != size:
            raise BadEntry(f"a value file of {st.st_size} bytes where the index says {size}")
        chunks, left = [], size
        while left > 0 and (chunk := os.read(fd, min(left, 1 << 24))):
            chunks.append(chunk)
            left -= len(chunk)
        if left or os.read(fd, 1):
            raise BadEntry("a value file that changed size while read")
        return b"".join(chunks)
    finally:
        os.close(fd)


# O_NONBLOCK: opening a FIFO for reading returns at once instead of waiting for a writer (fstat then refuses it)
_FILE_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


def _open_folder(directory: Path, folders: list[str]) -> int:
    """A descriptor of ``directory/folders...``, each of ``folders`` opened without following a symbolic link."""
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(directory, flags)
    try:
        for part in folders:
            opened = _open_at(part, flags | getattr(os, "O_NOFOLLOW", 0), fd)
            os.close(fd)
            fd = opened
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_at(name: str, flags: int, dir_fd: int) -> int:
    try:
        return os.open(name, flags, dir_fd=dir_fd)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
            raise BadEntry(f"'{name}' in the cache is a symbolic link or not a folder: not followed") from e
        if e.errno == errno.ENOENT:
            raise BadEntry(f"the value file '{name}' is missing") from e
        raise


# one entry as the index holds it; an inline value is fetched only when it is no larger than vitlab writes one
_SELECT = ("SELECT rowid, mode, filename, size, length(value), CASE WHEN length(value) < ? THEN value END "
           "FROM Cache WHERE key = ? AND raw = 1 AND (expire_time IS NULL OR expire_time > ?)")


def fetch(query, directory: Path, key: str, limit: int):
    """(rowid, the raw value: bytes or str) of ``key`` via ``query(sql, args) -> row``, or None when absent; every
    value is checked before it is read (:func:`read_regular`), a pickled or oversized one is :class:`BadEntry`."""
    row = query(_SELECT, (MIN_FILE, key, time.time()))
    if row is None:
        return None
    rowid, mode, filename, size, length, value = row
    if mode == _MODE_RAW:
        if length is not None and length >= MIN_FILE or not isinstance(value, (bytes, str)):
            raise BadEntry(f"an inline cache value of {length} bytes (vitlab keeps those under {MIN_FILE})")
        return rowid, value
    if mode in (_MODE_BINARY, _MODE_TEXT) and filename is not None:
        data = read_regular(directory, filename, size, limit)
        if mode == _MODE_BINARY:
            return rowid, data
        try:
            return rowid, data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise BadEntry("a text value that is not UTF-8") from e
    raise BadEntry("a cache entry of a kind vitlab never writes (a pickle): not read")


def _is_plain(path: Path, want_dir: bool) -> bool:
    """A real file or folder (not a symbolic link)."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return False
    return stat.S_ISDIR(mode) if want_dir else stat.S_ISREG(mode)


class ReadOnlyCache:
    """A diskcache database read without writing anything (a read-only or full folder, a shared cache): ``get``,
    ``len``, ``volume`` and ``size_limit`` of diskcache's ``Cache``. Only the raw kinds of entries vitlab writes
    are read (bytes and text, in the database or in value files inside the folder), never a pickle."""

    def __init__(self, directory: Path):
        import threading
        from urllib.parse import quote

        self.directory = Path(directory)
        db = self.directory / "cache.db"
        if not _is_plain(db, False):
            raise ValueError(f"no database in '{directory}'")
        self._lock = threading.Lock()
        err: Exception | None = None
        # mode=ro needs the -shm file of a WAL database or the right to make it; immutable=1 reads a folder
        # nobody can write (a shared read-only cache) without either
        for flags in ("mode=ro", "immutable=1"):
            try:
                con = sqlite3.connect(f"file:{quote(str(db))}?{flags}", uri=True, check_same_thread=False)
                con.execute("SELECT count(*) FROM Cache").fetchone()
                self._con = con
                break
            except sqlite3.Error as e:
                err = e
        else:
            raise err
        row = self._query("SELECT value FROM Settings WHERE key = 'size_limit'")
        self.size_limit = int(row[0]) if row and isinstance(row[0], int) else 0

    def _query(self, sql: str, args: tuple = ()):
        with self._lock:
            return self._con.execute(sql, args).fetchone()

    def get(self, key: str):
        found = fetch(self._query, self.directory, key, 1 << 62)
        return None if found is None else found[1]

    def set(self, key: str, value) -> None:
        raise OSError(30, "read-only cache")

    def delete(self, key: str) -> bool:
        return False

    def __len__(self) -> int:
        return int(self._query("SELECT count(*) FROM Cache")[0])

    def volume(self) -> int:
        pages = self._query("PRAGMA page_count")[0] * self._query("PRAGMA page_size")[0]
        return int(pages + (self._query("SELECT coalesce(sum(size), 0) FROM Cache")[0] or 0))

    def iterkeys(self):
        with self._lock:
            rows = self._con.execute("SELECT key FROM Cache WHERE raw = 1").fetchall()
        return (r[0] for r in rows)

    def close(self) -> None:
        self._con.close()
