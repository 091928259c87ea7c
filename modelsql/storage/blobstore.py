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
  catalog) passes the digests it still references. It never deletes a blob a
  writer may still commit: every :meth:`BlobStore.put` first records its digest
  as *pending* (git's ``gc.pruneExpire`` and SQLite's locks solve the same race).
  A put inside :meth:`BlobStore.writing` (a *write lease*, held until the
  writer's catalog commit) stays pending until the lease ends; a put outside one
  stays pending, for the other threads, for :data:`PENDING_GRACE_SECONDS`. ``collect`` reads the pending
  digests and the referenced ones, and deletes, under one per-store lock that
  ``put`` takes to record its digest, so a blob is either seen pending or
  written again after the sweep. Pending records live in this process: DuckDB
  lets one process at a time write a database, so the writers of one store are
  the threads of one process (a killed writer leaves unreferenced blobs, which
  the next ``collect`` removes).
* The root is made absolute when the store is made, so a later ``os.chdir``
  changes nothing.

Only ``modelsql.storage`` touches blob files (see docs/architecture.md).
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Iterable, Iterator, Union

from modelsql.errors import DataError, ProgrammingError

__all__ = [
    "BlobStore",
    "BlobCorruptError",
    "BlobMissingError",
    "TEMP_PREFIX",
    "STALE_TEMP_SECONDS",
    "PENDING_GRACE_SECONDS",
    "for_database",
]

TEMP_PREFIX = ".tmp-"
"""File-name prefix of writes in progress (never a valid blob name)."""

STALE_TEMP_SECONDS = 60.0
"""Temporary files older than this (seconds, by mtime) are removed by :meth:`BlobStore.collect`."""

PENDING_GRACE_SECONDS = 600.0
"""How long (seconds) a blob put outside a write lease (:meth:`BlobStore.writing`) is kept from
:meth:`BlobStore.collect` and :meth:`BlobStore.discard`: the time its writer has to commit the catalog
rows naming it."""

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


class _Pending:
    """The digests that writers of one store (one root) may still commit, and the lock that orders
    recording one against a sweep."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.leases: dict[int, set[str]] = {}
        self.loose: dict[str, tuple[int, float]] = {}  # digest -> (the putting thread, until when: monotonic)
        self.held = threading.local()  # this thread's open lease: (id, depth)

    def record(self, digest: str) -> None:
        """Called with ``lock`` held."""
        held = getattr(self.held, "lease", None)
        if held is not None:
            self.leases[held[0]].add(digest)
        else:
            self.loose[digest] = (threading.get_ident(), time.monotonic() + PENDING_GRACE_SECONDS)

    def digests(self) -> set[str]:
        """Called with ``lock`` held: every digest pending for the calling thread: those in a lease, and
        those put outside one by *other* threads in the last :data:`PENDING_GRACE_SECONDS` (a thread
        that put a blob and then deletes or collects is not racing itself)."""
        now = time.monotonic()
        me = threading.get_ident()
        for d in [d for d, (_, until) in self.loose.items() if until <= now]:
            del self.loose[d]
        out = {d for d, (thread, _) in self.loose.items() if thread != me}
        for lease in self.leases.values():
            out |= lease
        return out


_PENDING: dict[str, _Pending] = {}
_PENDING_LOCK = threading.Lock()


def _pending_of(root: Path) -> _Pending:
    with _PENDING_LOCK:
        return _PENDING.setdefault(str(root), _Pending())


class BlobStore:
    """Content-addressed store of immutable byte blobs keyed by SHA-256 hex digest.

    Args:
        root: directory holding the blobs; created (with parents) if missing.

    Digests are 64 lower-case hex characters; methods accept upper case too and
    raise :class:`~modelsql.errors.ProgrammingError` (code ``invalid_digest``)
    for anything else. The store is safe to use from several threads and
    processes at once for ``put``/``get``, and ``collect`` (``discard``) may run
    while other threads write: a blob put and not yet committed is pending (see
    :meth:`writing`) and is kept.
    """

    def __init__(self, root: Union[str, os.PathLike]) -> None:
        self.root = Path(os.path.abspath(os.fspath(root)))
        """The store's directory, absolute (resolved once, against the working directory of the time)."""
        self.root.mkdir(parents=True, exist_ok=True)
        self._pending = _pending_of(self.root)

    @contextlib.contextmanager
    def writing(self) -> Iterator["BlobStore"]:
        """A write lease: every blob put by this thread inside the block stays pending (never deleted by
        :meth:`collect` or :meth:`discard`, of any connection) until the block ends. Commit the catalog
        rows that name the blobs inside the block. Nested blocks of one thread share the outer lease.

        Yields:
            this store.
        """
        pending = self._pending
        held = getattr(pending.held, "lease", None)
        if held is not None:
            pending.held.lease = (held[0], held[1] + 1)
            try:
                yield self
            finally:
                pending.held.lease = held
            return
        token = object()
        with pending.lock:
            pending.leases[id(token)] = set()
        pending.held.lease = (id(token), 1)
        try:
            yield self
        finally:
            pending.held.lease = None
            with pending.lock:
                del pending.leases[id(token)]

    def pending(self) -> set[str]:
        """The digests writers of this process may still commit (see :meth:`writing`)."""
        with self._pending.lock:
            return self._pending.digests()

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
        with self._pending.lock:  # before looking: a sweep either saw it pending or ran before the write below
            self._pending.record(digest)
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
        """Remove a blob, unless a writer may still commit it (it is pending: see :meth:`writing`).

        Returns:
            True if it existed and was removed; False if it was absent or pending.
        """
        d = _check_digest(digest)
        with self._pending.lock:
            if d in self._pending.digests():
                return False
            try:
                self.path(d).unlink()
            except (FileNotFoundError, NotADirectoryError):
                return False
            return True

    def discard(self, digests: Iterable[str], referenced: Callable[[], Iterable[str]]) -> int:
        """Delete those of ``digests`` that are neither pending nor in ``referenced()``, which is called
        (with the store's sweep lock held) after the pending digests are read: pass a function that reads
        the catalog's committed references then.

        Returns:
            the number of blobs removed.
        """
        wanted = {_check_digest(d) for d in digests}
        if not wanted:
            return 0
        removed = 0
        with self._pending.lock:
            keep = self._pending.digests()
            keep |= {_check_digest(d) for d in referenced()}
            for d in sorted(wanted - keep):
                try:
                    self.path(d).unlink()
                except (FileNotFoundError, NotADirectoryError):
                    continue
                removed += 1
        return removed

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

    def collect(self, referenced: Union[Iterable[str], Callable[[], Iterable[str]]]) -> tuple[int, int]:
        """Delete every blob that is neither referenced nor pending (a writer may still commit it).

        Also removes temporary files left by interrupted writes that are older
        than :data:`STALE_TEMP_SECONDS` (younger ones may be writes in progress).

        Args:
            referenced: digests still referenced by the catalog (any case), or a function returning them,
                called after the pending digests are read and with the store's sweep lock held (``put``
                waits for the sweep): pass a function that reads the catalog's *committed* references
                then, so a writer that committed before the sweep began is seen.

        Returns:
            ``(blobs removed, bytes freed)``; bytes freed includes stale temp files.
        """
        with self._pending.lock:
            keep = self._pending.digests()
            keep |= {_check_digest(d) for d in (referenced() if callable(referenced) else referenced)}
            return self._sweep(keep)

    def _sweep(self, keep: set[str]) -> tuple[int, int]:
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
