"""The NumPy side of EVALUATE's query: rank sums (modelsql.metrics.ranks) against SciPy's ranks, and the
statistics function (modelsql.engine.evaluate.score_stats) over every shape of probabilities it is handed."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest
from scipy.stats import rankdata

from modelsql.engine.evaluate.score_stats import EPS, statistics
from modelsql.metrics.ranks import rank_sums


def _reference(scores: np.ndarray, classes: np.ndarray, count: int) -> np.ndarray:
    ranks = rankdata(scores.astype(np.float64), method="average")
    return np.array([ranks[classes == c].sum() for c in range(count)])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_rank_sums_equal_scipys_average_ranks_with_and_without_ties(dtype):
    rng = np.random.default_rng(7)
    pool = np.array([-np.inf, -2.5, -0.0, 0.0, 1e-30, 0.25, 0.5, 1.0, np.inf], dtype=dtype)
    for trial in range(200):
        n, count = int(rng.integers(1, 400)), int(rng.integers(1, 6))
        if trial % 3 == 0:
            scores = rng.choice(pool, n)  # heavy ties, -0.0 with 0.0, infinities
        else:
            scores = rng.normal(size=n).astype(dtype)
            if trial % 3 == 1:
                scores = np.round(scores, 1).astype(dtype)
            if trial % 2 == 0:  # none negative (probabilities), -0.0 among them
                scores = np.where(scores == 0, -0.0, np.abs(scores)).astype(dtype)
        classes = rng.integers(0, count, n)
        assert np.array_equal(rank_sums(scores, classes, count), _reference(scores, classes, count)), trial


def test_rank_sums_count_classes_with_no_rows_as_zero():
    got = rank_sums(np.array([0.3, 0.1, 0.2], dtype=np.float32), np.array([0, 2, 0]), 4)
    assert got.tolist() == [5.0, 0.0, 1.0, 0.0]


def _rows(codes: list[int], lists: list[list[float]], fixed: bool, value=pa.float32()) -> pa.StructArray:
    probabilities = (pa.array(lists, type=pa.list_(value, len(lists[0]))) if fixed
                     else pa.array(lists, type=pa.list_(value)))
    return pa.StructArray.from_arrays([pa.array(codes, type=pa.uint32()), probabilities], names=["c", "s"])


def _by_key(entries):
    return {(e["c"], e["i"]): e for e in entries}


@pytest.mark.parametrize("fixed", [True, False])
def test_statistics_per_class_and_position_equal_a_direct_computation(fixed):
    codes = [0, 1, 1, 0, 2]
    lists = [[0.7, 0.2, 0.1], [0.2, 0.5, 0.3], [0.2, 0.6, 0.2], [0.5, 0.5, 0.0], [0.1, 0.1, 0.8]]
    got = statistics(_rows(codes, lists, fixed), None, 0.5)
    matrix = np.array(lists, dtype=np.float32)
    entries = _by_key(got["entries"])
    assert len(entries) == 9
    for i in range(3):
        ranks = rankdata(matrix[:, i].astype(np.float64))
        for c in range(3):
            mine = np.array(codes) == c
            x = matrix[mine, i].astype(np.float64)
            e = entries[(c, i + 1)]
            assert e["n"] == mine.sum()
            assert e["r"] == ranks[mine].sum()
            assert e["hits"] == int((x >= 0.5).sum())
            assert math.isclose(e["ln"], float(np.log(np.clip(x, EPS, 1 - EPS)).sum()), rel_tol=1e-12)
    assert got["lo"] == 0.0 and got["hi"] == pytest.approx(0.8) and got["bad"] == 0
    assert got["drift"] == pytest.approx(float(np.abs(matrix.astype(np.float64).sum(axis=1) - 1).max()))


def test_statistics_of_ragged_rows_rank_each_position_over_the_rows_having_it():
    codes = [0, 1, 0, 1]
    lists = [[0.9, 0.1], [0.4], [0.3, 0.3, 0.4], []]
    got = statistics(_rows(codes, lists, fixed=False, value=pa.float64()), None, None)
    entries = _by_key(got["entries"])
    # position 1: rows 0..2 (0.9, 0.4, 0.3); position 2: rows 0 and 2 (0.1, 0.3); position 3: row 2
    assert entries[(0, 1)]["n"] == 2 and entries[(0, 1)]["r"] == 3 + 1 and entries[(1, 1)]["r"] == 2
    assert entries[(0, 2)]["n"] == 2 and entries[(0, 2)]["r"] == 3
    assert (1, 2) not in entries and (1, 3) not in entries and entries[(0, 3)]["r"] == 1
    assert got["drift"] == pytest.approx(0.6)  # the row [0.4]; the empty row has no sum


def test_statistics_read_a_slice_of_a_struct_array_at_its_offset():
    rows = _rows([0, 1, 0, 1], [[0.9, 0.1], [0.2, 0.8], [0.6, 0.4], [0.3, 0.7]], fixed=True)
    got = _by_key(statistics(rows.slice(2), None, None)["entries"])
    assert got[(0, 1)]["n"] == 1 and got[(0, 1)]["r"] == 2.0 and got[(1, 1)]["r"] == 1.0


def test_statistics_rank_only_the_position_asked_for_and_count_nan():
    rows = _rows([0, 1, 1], [[0.5, 0.5], [float("nan"), 1.0], [0.2, 0.8]], fixed=True)
    got = statistics(rows, 2, None)
    entries = _by_key(got["entries"])
    assert entries[(0, 1)]["r"] is None and entries[(0, 2)]["r"] == 1.0
    assert got["bad"] == 1
