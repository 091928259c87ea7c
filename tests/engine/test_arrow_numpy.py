"""modelsql.arrow_numpy: Arrow columns of numbers read as NumPy from their buffers, as pyarrow's to_numpy reads them,
without importing pandas (which pyarrow's to_numpy does when it is installed)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

from modelsql.arrow_numpy import numbers


@pytest.mark.parametrize("dtype", [np.int8, np.int32, np.int64, np.uint16, np.uint64, np.float16, np.float32,
                                   np.float64])
def test_numbers_equal_pyarrows_to_numpy_for_chunks_and_slices(dtype):
    rng = np.random.default_rng(0)
    whole = (rng.standard_normal(1000) * 100).astype(dtype)
    chunked = pa.chunked_array([pa.array(whole[:300]), pa.array(whole[300:]).slice(5, 600), pa.array(whole[:0])])
    for values in (chunked, chunked.chunk(1), pa.array(whole).slice(17, 400), pa.chunked_array([], pa.from_numpy_dtype(dtype))):
        got = numbers(values)
        assert got.dtype == dtype and np.array_equal(got, values.to_numpy(), equal_nan=True)


def test_columns_it_cannot_view_are_read_by_pyarrow():
    for values in (pa.array([1, None, 3]), pa.array([True, False]), pa.array(["a", "b"]),
                   pa.chunked_array([pa.array([1.5, None])])):
        got, want = numbers(values), values.to_numpy(zero_copy_only=False)
        assert [str(v) for v in got.tolist()] == [str(v) for v in want.tolist()]  # (NaN for NULL, as pyarrow)


def test_reading_numbers_imports_no_pandas():
    code = ("import sys, pyarrow as pa, duckdb\n"
            "from modelsql.arrow_numpy import numbers\n"
            "t = duckdb.sql('SELECT range::UBIGINT AS h FROM range(10)').to_arrow_table()\n"
            "assert numbers(t.column(0)).tolist() == list(range(10))\n"
            "print('pandas' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
