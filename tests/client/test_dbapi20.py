"""PEP 249 compliance: the DB-API 2.0 suite ``dbapi20`` (package ``dbapi-compliance``).

Overridden, as the suite itself allows ("self.drivers should override" /
"Drivers need to override this test"):

* ``setUp`` / ``tearDown``: each test gets a fresh DuckDB file in a temporary
  folder (the suite reconnects several times per test, so ``:memory:`` would
  lose its tables between connections).
* ``test_nextset``: modelsql cursors have no ``nextset`` (no statement returns
  several result sets); the override asserts the attribute is absent, which
  is what the suite's own body checks first.
* ``test_setoutputsize``: ``setoutputsize`` is accepted and ignored; the
  override checks it can be called with and without a column.

When ``../shared/external/dbapi20.py`` (a newer upstream copy) is present the
same class runs against it too; it is skipped, with the reason, when absent.
"""

from __future__ import annotations

import importlib.util
import shutil
import tempfile
import unittest
from pathlib import Path

import dbapi20
import pytest

import modelsql


class _ModelsqlMixin:
    driver = modelsql
    connect_args = ()

    def setUp(self):
        self._dir = tempfile.mkdtemp(prefix="modelsql-dbapi20-")
        self.connect_kw_args = {"database": str(Path(self._dir) / "dbapi20.duckdb")}

    def tearDown(self):
        super().tearDown()
        shutil.rmtree(self._dir, ignore_errors=True)

    def test_nextset(self):
        con = self._connect()
        try:
            cur = con.cursor()
            self.assertFalse(hasattr(cur, "nextset"))
        finally:
            con.close()

    def test_setoutputsize(self):
        con = self._connect()
        try:
            cur = con.cursor()
            cur.setoutputsize(1000)
            cur.setoutputsize(2000, 0)
            self._paraminsert(cur)  # the cursor still works afterwards
        finally:
            con.close()


class TestDBAPI20(_ModelsqlMixin, dbapi20.DatabaseAPI20Test):
    """The packaged suite (dbapi-compliance on PyPI)."""


_SHARED = Path(__file__).resolve().parents[3] / "shared" / "external" / "dbapi20.py"


def _load_shared():
    spec = importlib.util.spec_from_file_location("dbapi20_upstream", _SHARED)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


if _SHARED.exists():
    _upstream = _load_shared()

    class TestDBAPI20Upstream(_ModelsqlMixin, _upstream.DatabaseAPI20Test):
        """The newer upstream copy from ../shared/external (reference only, not vendored)."""

else:

    @pytest.mark.skip(reason=f"upstream dbapi20.py not found at {_SHARED} (../shared is absent)")
    def test_dbapi20_upstream():
        pass


if __name__ == "__main__":
    unittest.main()
