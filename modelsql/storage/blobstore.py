"""A content-addressed blob store on the local file system, keyed by SHA-256.

Weights, graphs, compiled libraries and checkpoints are stored as immutable
blobs named by the SHA-256 hex digest of their bytes, so identical parameters
used by many models are stored (and can be loaded) once: the *Object Store* of
PRETZEL (Lee et al., "PRETZEL: Opening the Black Box of Machine Learning
Prediction Serving Systems", OSDI 2018).

Layout::

    <root>/<first 2 hex digits>/<remaining 62 hex digits>     one blob
    <root>/<first 2 hex digits>/.tmp-<random>                 a write in progress

Guarantees:

* Writes are atomic: the bytes go to a temporary file in the blob's own
  directory, are flushed and ``fsync``-ed, the file is renamed onto its final
  name with :func:`os.replace`, and the directory is ``fsync``-ed. A reader
  therefore sees either no blob or the whole blob, even after a crash.
* Reads verify the digest: a blob whose bytes no longer hash to its name raises
  :class:`BlobCorruptError`; an absent one raises :class:`BlobMissingError`.
* Garbage collection is explicit (:meth:`BlobStore.collect`): the caller (the
  catalog) passes the set of digests it still references.

Only ``modelsql.storage`` touches blob files (see DESIGN.md, "Storage").
"""

from __future__ import annotations

import atexit
import hashlib
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Iterable, Iterator, Union

from modelsql.errors import DataError, ProgrammingError

__all__ = [
    "BlobStore",
    "BlobCorruptError",
    "BlobMissingError",
    "TEMP_PREFIX",
    "STALE_TEMP_SECONDS",
    "for_database",
]

TEMP_PREFIX = ".tmp-"
"""File-name prefix of writes in progress (never a valid blob name)."""

STALE_TEMP_SECONDS = 60.0
"""Temporary files older than this (seconds, by mtime) are removed by :meth:`BlobStore.collect`."""

_HEX = frozenset("0123456789abcdef")
_CHUNK = 1 << 20  # 1 MiB, for hashing files on disk


class BlobMissingError(DataError):
    """A blob the caller asked for is not in the store (``code = "blob_missing"``).

    Attributes:
        digest: the SHA-256 hex digest that was asked for.
    """

    code = "blob_missing"

    def __init__(self, message: str = "", *, digest: str, **kwargs) -> None:
        super().__init__(message, **kwargs)
        self.digest = digest


class BlobCorruptError(DataError):
    """A blob's bytes do not hash to its name (``code = "blob_corrupt"``).

    Attributes:
        digest: the digest the blob is stored under (the expected one).
    """

    code = "blob_corrupt"

    def __init__(self, message: str = "", *, digest: str, **kwargs) -> None:
        super().__init__(message, **kwargs)
        self.digest = digest


def _check_digest(digest: str) -> str:
    """Return ``digest`` lower-cased, or raise ProgrammingError (code ``invalid_digest``)."""
    if isinstance(digest, str):
        d = digest.lower()
        if len(d) == 64 and _HEX.issuperset(d):
            return d
    raise ProgrammingError(
        f"invalid blob digest {digest!r}: expected 64 hexadecimal characters (SHA-256)",
        code="invalid_digest",
    )


def _fsync_dir(path: Path) -> None:
    """fsync a directory so a rename or create inside it is durable (no-op on Windows)."""
    if os.name == "nt":  # directories cannot be opened for fsync on Windows
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_TEMP_ROOTS: list[Path] = []


def _remove_temp_roots() -> None:
    for root in _TEMP_ROOTS:
        shutil.rmtree(root, ignore_errors=True)


atexit.register(_remove_temp_roots)


class BlobStore:
    """Content-addressed store of immutable byte blobs keyed by SHA-256 hex digest.

    Args:
        root: directory holding the blobs; created (with parents) if missing.

    Digests are 64 lower-case hex characters; methods accept upper case too and
    raise :class:`~modelsql.errors.ProgrammingError` (code ``invalid_digest``)
    for anything else. The store is safe to use from several threads and
    processes at once for ``put``/``get``; ``collect`` must not run while
    another writer is between ``put`` and the catalog commit that references
    the new blob (the single-writer rule of DESIGN.md, "Scale").
    """

    def __init__(self, root: Union[str, os.PathLike]) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    # -- construction -------------------------------------------------------------

    @classmethod
    def for_database(cls, database: Union[str, os.PathLike]) -> "BlobStore":
        """The store that belongs to a DuckDB database.

        Args:
            database: the DuckDB database path, or ``":memory:"`` (or ``""``).

        Returns:
            For a file database ``x.duckdb``, a store rooted at ``x.duckdb.blobs/``
            beside it; for an in-memory database, a store in a fresh temporary
            directory (``modelsql-blobs-*``) that is removed at interpreter exit.
        """
        db = os.fspath(database)
        if db in ("", ":memory:") or db.startswith(":memory:"):
            root = Path(tempfile.mkdtemp(prefix="modelsql-blobs-"))
            _TEMP_ROOTS.append(root)
            return cls(root)
        return cls(Path(db + ".blobs"))

    # -- addressing ---------------------------------------------------------------

    def path(self, digest: str) -> Path:
        """File path a blob is (or would be) stored at. Does not check existence."""
        d = _check_digest(digest)
        return self.root / d[:2] / d[2:]

    @staticmethod
    def digest_of(data: Union[bytes, bytearray, memoryview]) -> str:
        """SHA-256 hex digest of ``data`` (the key :meth:`put` would store it under)."""
        return hashlib.sha256(data).hexdigest()

    # -- reads and writes ---------------------------------------------------------

    def put(self, data: Union[bytes, bytearray, memoryview]) -> str:
        """Store ``data`` and return its SHA-256 hex digest.

        Atomic and idempotent: if a blob with this digest already exists and
        still verifies, nothing is written (a corrupt or truncated copy is
        replaced, so re-importing a model repairs its blobs); otherwise the bytes are written to a
        temporary file in the blob's directory, fsync-ed, renamed into place with
        :func:`os.replace`, and the directory is fsync-ed.

        ``OSError`` from the file system (disk full, permissions) propagates
        unchanged, and no partial file is left behind.
        """
        view = memoryview(data)
        if not view.contiguous:
            view = memoryview(view.tobytes())
        view = view.cast("B")
        digest = hashlib.sha256(view).hexdigest()
        final = self.root / digest[:2] / digest[2:]
        try:
            if final.stat().st_size == view.nbytes:
                self.verify(digest)
                return digest
        except FileNotFoundError:
            pass
        except BlobCorruptError:
            pass  # a damaged copy is replaced by these (verified) bytes below
        folder = final.parent
        if not folder.is_dir():
            folder.mkdir(parents=True, exist_ok=True)
            _fsync_dir(self.root)
        fd, tmp = tempfile.mkstemp(prefix=TEMP_PREFIX, dir=folder)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(view)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, 0o644)
            os.replace(tmp, final)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        _fsync_dir(folder)
        return digest

    def get(self, digest: str) -> bytes:
        """Return the bytes of a blob, verified against its digest.

        Raises:
            BlobMissingError: no blob with this digest (code ``blob_missing``).
            BlobCorruptError: the stored bytes hash to something else (code ``blob_corrupt``).
        """
        d = _check_digest(digest)
        try:
            data = self.path(d).read_bytes()
        except (FileNotFoundError, NotADirectoryError):
            raise BlobMissingError(f"blob {d} is missing from the store at {self.root}", digest=d) from None
        actual = hashlib.sha256(data).hexdigest()
        if actual != d:
            raise BlobCorruptError(
                f"blob {d} in the store at {self.root} is corrupt: its {len(data)} bytes hash to {actual}",
                digest=d,
            )
        return data

    def verify(self, digest: str) -> None:
        """Check one blob's bytes against its digest without keeping them in memory.

        Raises:
            BlobMissingError, BlobCorruptError: as :meth:`get`.
        """
        d = _check_digest(digest)
        h = hashlib.sha256()
        try:
            with open(self.path(d), "rb") as f:
                for chunk in iter(lambda: f.read(_CHUNK), b""):
                    h.update(chunk)
        except (FileNotFoundError, NotADirectoryError):
            raise BlobMissingError(f"blob {d} is missing from the store at {self.root}", digest=d) from None
        if h.hexdigest() != d:
            raise BlobCorruptError(
                f"blob {d} in the store at {self.root} is corrupt: it hashes to {h.hexdigest()}", digest=d
            )

    def has(self, digest: str) -> bool:
        """True if a blob with this digest is stored (its content is not verified)."""
        return self.path(digest).is_file()

    def size(self, digest: str) -> int:
        """Size of a stored blob in bytes.

        Raises:
            BlobMissingError: no blob with this digest.
        """
        d = _check_digest(digest)
        try:
            return self.path(d).stat().st_size
        except (FileNotFoundError, NotADirectoryError):
            raise BlobMissingError(f"blob {d} is missing from the store at {self.root}", digest=d) from None

    def delete(self, digest: str) -> bool:
        """Remove a blob. Returns True if it existed, False if it was already absent."""
        try:
            self.path(digest).unlink()
        except (FileNotFoundError, NotADirectoryError):
            return False
        return True

    # -- enumeration and garbage collection ------------------------------------

    def _blob_files(self) -> Iterator[tuple[str, Path]]:
        try:
            folders = sorted(os.scandir(self.root), key=lambda e: e.name)
        except FileNotFoundError:
            return
        for folder in folders:
            name = folder.name
            if len(name) != 2 or not _HEX.issuperset(name) or not folder.is_dir():
                continue
            for entry in sorted(os.scandir(folder.path), key=lambda e: e.name):
                rest = entry.name
                if len(rest) == 62 and _HEX.issuperset(rest) and entry.is_file():
                    yield name + rest, Path(entry.path)

    def digests(self) -> Iterator[str]:
        """The digests of all stored blobs, in sorted order (temporary files excluded)."""
        for digest, _ in self._blob_files():
            yield digest

    def __iter__(self) -> Iterator[str]:
        return self.digests()

    def __contains__(self, digest: object) -> bool:
        return isinstance(digest, str) and self.has(digest)

    def __len__(self) -> int:
        return sum(1 for _ in self._blob_files())

    def stored_bytes(self) -> int:
        """Total size in bytes of all stored blobs (temporary files excluded)."""
        total = 0
        for _, p in self._blob_files():
            try:
                total += p.stat().st_size
            except FileNotFoundError:
                pass
        return total

    def collect(self, referenced: Iterable[str]) -> tuple[int, int]:
        """Delete every blob whose digest is not in ``referenced``.

        Also removes temporary files left by interrupted writes that are older
        than :data:`STALE_TEMP_SECONDS` (younger ones may be writes in progress).

        Args:
            referenced: digests still referenced by the catalog (any case).

        Returns:
            ``(blobs removed, bytes freed)``; bytes freed includes stale temp files.
        """
        keep = {_check_digest(d) for d in referenced}
        removed = 0
        freed = 0
        for digest, p in list(self._blob_files()):
            if digest in keep:
                continue
            try:
                n = p.stat().st_size
                p.unlink()
            except FileNotFoundError:
                continue
            removed += 1
            freed += n
        cutoff = time.time() - STALE_TEMP_SECONDS
        for folder in self.root.iterdir():
            if not folder.is_dir():
                continue
            for entry in folder.iterdir():
                if not entry.name.startswith(TEMP_PREFIX):
                    continue
                try:
                    st = entry.stat()
                    if st.st_mtime < cutoff:
                        entry.unlink()
                        freed += st.st_size
                except FileNotFoundError:
                    continue
        return removed, freed

    def __repr__(self) -> str:
        return f"BlobStore({str(self.root)!r})"


def for_database(database: Union[str, os.PathLike]) -> BlobStore:
    """Shorthand for :meth:`BlobStore.for_database`."""
    return BlobStore.for_database(database)
