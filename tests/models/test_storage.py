"""Tests of the content-addressed blob store (modelsql.storage)."""

from __future__ import annotations

import hashlib
import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from sklearn.datasets import load_digits

from modelsql.errors import DataError, ProgrammingError
from modelsql.storage import (
    STALE_TEMP_SECONDS,
    TEMP_PREFIX,
    BlobCorruptError,
    BlobMissingError,
    BlobStore,
    for_database,
)


@pytest.fixture
def store(tmp_path: Path) -> BlobStore:
    return BlobStore(tmp_path / "blobs")


@pytest.fixture(scope="module")
def digits_bytes() -> bytes:
    X, _ = load_digits(return_X_y=True)
    return X.astype(np.float32).tobytes()


def _temp_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.name.startswith(TEMP_PREFIX)]


def _all_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


def test_put_get_round_trip_and_layout(store: BlobStore, digits_bytes: bytes) -> None:
    digest = store.put(digits_bytes)
    assert digest == hashlib.sha256(digits_bytes).hexdigest()
    assert store.path(digest) == store.root / digest[:2] / digest[2:]
    assert store.path(digest).is_file()
    assert store.get(digest) == digits_bytes
    assert store.has(digest) and digest in store
    assert store.size(digest) == len(digits_bytes)
    assert list(store.digests()) == [digest]
    assert store.stored_bytes() == len(digits_bytes)
    assert store.get(digest.upper()) == digits_bytes  # digests are case-insensitive


def test_put_accepts_memoryview_bytearray_and_empty(store: BlobStore, digits_bytes: bytes) -> None:
    arr = np.frombuffer(digits_bytes, dtype=np.float32).reshape(-1, 64)
    d1 = store.put(memoryview(arr))
    d2 = store.put(bytearray(digits_bytes))
    d3 = store.put(memoryview(digits_bytes)[:100])
    assert d1 == d2 == hashlib.sha256(digits_bytes).hexdigest()
    assert store.get(d3) == digits_bytes[:100]
    empty = store.put(b"")
    assert empty == hashlib.sha256(b"").hexdigest()
    assert store.get(empty) == b"" and store.size(empty) == 0


def test_put_deduplicates(store: BlobStore, digits_bytes: bytes) -> None:
    d1 = store.put(digits_bytes)
    path = store.path(d1)
    before = path.stat()
    time.sleep(0.01)
    d2 = store.put(bytes(digits_bytes))
    assert d1 == d2
    after = path.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)  # not rewritten
    assert len(store) == 1
    assert store.stored_bytes() == len(digits_bytes)
    other = store.put(digits_bytes[:64])
    assert other != d1 and len(store) == 2
    assert store.stored_bytes() == len(digits_bytes) + 64


def test_put_leaves_no_temp_files(store: BlobStore, digits_bytes: bytes) -> None:
    for i in range(0, len(digits_bytes), 4096):
        store.put(digits_bytes[i : i + 4096])
    assert _temp_files(store.root) == []
    names = {p.name for p in _all_files(store.root)}
    assert all(len(n) == 62 for n in names)


def test_concurrent_puts_of_same_blob(store: BlobStore, digits_bytes: bytes) -> None:
    results: list[str] = []

    def worker() -> None:
        results.append(store.put(digits_bytes))

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(results)) == 1
    assert len(store) == 1 and _temp_files(store.root) == []
    assert store.get(results[0]) == digits_bytes


def test_put_repairs_a_truncated_blob(store: BlobStore, digits_bytes: bytes) -> None:
    digest = store.put(digits_bytes)
    path = store.path(digest)
    path.write_bytes(digits_bytes[:10])  # wrong size: not the blob
    with pytest.raises(BlobCorruptError):
        store.get(digest)
    assert store.put(digits_bytes) == digest
    assert store.get(digest) == digits_bytes


def test_corruption_is_detected(store: BlobStore, digits_bytes: bytes) -> None:
    digest = store.put(digits_bytes)
    path = store.path(digest)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01  # flip one bit, same size
    path.write_bytes(bytes(data))
    with pytest.raises(BlobCorruptError) as info:
        store.get(digest)
    err = info.value
    assert isinstance(err, DataError)
    assert err.code == "blob_corrupt"
    assert err.digest == digest
    assert digest in str(err)
    with pytest.raises(BlobCorruptError):
        store.verify(digest)
    # same size, so put() trusts the existing file; has() does not verify
    assert store.has(digest)


def test_missing_blob(store: BlobStore) -> None:
    digest = hashlib.sha256(b"never stored").hexdigest()
    assert not store.has(digest)
    with pytest.raises(BlobMissingError) as info:
        store.get(digest)
    assert isinstance(info.value, DataError)
    assert info.value.code == "blob_missing"
    assert info.value.digest == digest
    with pytest.raises(BlobMissingError):
        store.size(digest)
    with pytest.raises(BlobMissingError):
        store.verify(digest)
    assert store.delete(digest) is False


@pytest.mark.parametrize("bad", ["../../etc/passwd", "abc", "g" * 64, "", "a" * 65])
def test_invalid_digest(store: BlobStore, bad: str) -> None:
    with pytest.raises(ProgrammingError) as info:
        store.get(bad)
    assert info.value.code == "invalid_digest"
    with pytest.raises(ProgrammingError):
        store.has(bad)


def test_delete(store: BlobStore, digits_bytes: bytes) -> None:
    digest = store.put(digits_bytes)
    assert store.delete(digest) is True
    assert not store.has(digest)
    assert list(store.digests()) == []
    assert store.put(digits_bytes) == digest  # can be stored again
    assert store.get(digest) == digits_bytes


def test_digests_ignores_temp_and_foreign_files(store: BlobStore, digits_bytes: bytes) -> None:
    chunks = [digits_bytes[i * 512 : (i + 1) * 512] for i in range(20)]
    expected = sorted({store.put(c) for c in chunks})
    d = expected[0]
    (store.root / d[:2] / (TEMP_PREFIX + "junk")).write_bytes(b"partial")
    (store.root / "README").write_text("not a blob")
    assert list(store.digests()) == expected
    assert store.stored_bytes() == sum(len(c) for c in set(chunks))


def test_collect(store: BlobStore, digits_bytes: bytes) -> None:
    chunks = [digits_bytes[i * 1000 : (i + 1) * 1000] for i in range(10)]
    digests = [store.put(c) for c in chunks]
    keep = set(digests[:4])
    folder = store.path(digests[0]).parent
    stale = folder / (TEMP_PREFIX + "stale")
    stale.write_bytes(b"x" * 7)
    old = time.time() - STALE_TEMP_SECONDS - 5
    os.utime(stale, (old, old))
    fresh = folder / (TEMP_PREFIX + "fresh")
    fresh.write_bytes(b"y" * 3)

    removed, freed = store.collect({d.upper() for d in keep})
    assert removed == 6
    assert freed == 6 * 1000 + 7
    assert set(store.digests()) == keep
    for d, c in zip(digests[:4], chunks[:4]):
        assert store.get(d) == c
    assert not stale.exists()
    assert fresh.exists()  # may be a write in progress
    assert store.collect(keep) == (0, 0)
    assert store.collect(set()) == (4, 4000)
    assert list(store.digests()) == []


def test_for_database_file(tmp_path: Path) -> None:
    db = tmp_path / "catalog.duckdb"
    store = BlobStore.for_database(str(db))
    assert store.root == tmp_path / "catalog.duckdb.blobs"
    assert store.root.is_dir()
    assert for_database(db).root == store.root


def test_for_database_memory() -> None:
    a = BlobStore.for_database(":memory:")
    b = BlobStore.for_database(":memory:")
    assert a.root != b.root
    assert a.root.is_dir() and a.root.name.startswith("modelsql-blobs-")
    digest = a.put(b"hello")
    assert a.get(digest) == b"hello" and not b.has(digest)
