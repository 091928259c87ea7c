"""A study's Arrow columns as NumPy arrays without pandas (engine/tune/columns.py): equal, value and dtype, to
pyarrow's own ``to_numpy`` on every type a study reads, across chunks and slices."""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from modelsql.engine.tune.columns import column_numpy

SQL = """SELECT (i * 1.5)::FLOAT f32, (i * 1.1)::DOUBLE f64, i::BIGINT i64, (i % 3000)::SMALLINT i16,
(i % 200)::UTINYINT u8, (i % 7)::UINTEGER u32, (i % 2 = 0) b, 'x' || i s, (i * 0.1)::DECIMAL(8, 2) d
FROM range(40000) r(i)"""


@pytest.fixture(scope="module")
def table() -> pa.Table:
    t = duckdb.connect().sql(SQL).to_arrow_table()
    return pa.concat_tables([t.slice(3, 100), t.slice(1000, 20000), t.slice(0, 0)])  # chunks with offsets


@pytest.mark.parametrize("name", ["f32", "f64", "i64", "i16", "u8", "u32", "b", "s", "d"])
def test_equals_pyarrows_to_numpy(table, name):
    column = table.column(name)
    got, want = column_numpy(column), column.to_numpy(zero_copy_only=False)
    assert got.dtype == want.dtype and len(got) == len(want) == 20100
    assert (got == want).all()
    single = column.chunk(1)  # an Array, sliced: its buffers start before its first value
    assert (column_numpy(single) == single.to_numpy(zero_copy_only=False)).all()


def test_an_empty_column_is_an_empty_array_of_its_dtype():
    assert column_numpy(pa.chunked_array([], pa.int32())).dtype == np.int32
    assert len(column_numpy(pa.chunked_array([], pa.float32()))) == 0
