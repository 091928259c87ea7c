"""The NumPy side of EVALUATE: rank sums (modelsql.metrics.ranks) against SciPy's ranks, the statistics of the
probabilities (modelsql.engine.evaluate.score_stats) over every shape of them, and the counts of a classifier's
predictions (modelsql.engine.evaluate.class_counts) against direct Python counting."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest
from scipy.stats import rankdata

from modelsql.engine.evaluate.class_counts import class_counts
from modelsql.engine.evaluate.roc_points import roc_points
from modelsql.engine.evaluate.score_stats import EPS, Scores, statistics
from modelsql.metrics.ranks import rank_sum_of, rank_sums


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


@pytest.mark.parametrize("count", [1, 2, 3, 4, 5])
def test_rank_sums_of_probabilities_equal_scipys_whichever_packing(count):
    """Probabilities of up to four classes sort packed in 32 bits; five classes, a NaN or a score past 1 in 64."""
    rng = np.random.default_rng(count)
    pool = np.array([0.0, -0.0, 1e-45, 1e-30, 0.25, 0.5, 0.999999, 1.0], dtype=np.float32)
    for trial in range(60):
        n = int(rng.integers(1, 300))
        scores = (rng.choice(pool, n) if trial % 2 else rng.random(n)).astype(np.float32)
        if trial % 5 == 0:
            scores[0] = 1.0000001 if trial % 10 else np.nan
        classes = rng.integers(0, count, n)
        if np.isnan(scores).any():
            kept = ~np.isnan(scores)
            scores, classes = scores[kept], classes[kept]
            if not len(scores):
                continue
        assert np.array_equal(rank_sums(scores, classes, count), _reference(scores, classes, count)), trial


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_rank_sum_of_one_class_equals_scipys_whichever_path(dtype):
    """Probabilities (float32 in [0, 1], -0.0 among them) sort shifted with the row's flag; anything else by
    rank_sums of two classes: both equal SciPy's average ranks, ties included."""
    rng = np.random.default_rng(11)
    pool = np.array([0.0, -0.0, 1e-45, 0.25, 0.5, 1.0], dtype=dtype)
    for trial in range(120):
        n = int(rng.integers(1, 300))
        scores = (rng.choice(pool, n) if trial % 2 else rng.random(n)).astype(dtype)
        if trial % 7 == 0:
            scores[0] = -1.5 if trial % 14 else 2.0  # not probabilities
        mine = rng.random(n) < 0.4
        expected = rankdata(scores.astype(np.float64), method="average")[mine].sum()
        assert rank_sum_of(scores, mine) == expected, trial


def test_rank_sums_count_classes_with_no_rows_as_zero():
    got = rank_sums(np.array([0.3, 0.1, 0.2], dtype=np.float32), np.array([0, 2, 0]), 4)
    assert got.tolist() == [5.0, 0.0, 1.0, 0.0]


def _lists(lists: list[list[float]], fixed: bool, value=pa.float32()) -> pa.Array:
    return (pa.array(lists, type=pa.list_(value, len(lists[0]))) if fixed
            else pa.array(lists, type=pa.list_(value)))


def _rows(codes: list[int], lists: list[list[float]], fixed: bool, value=pa.float32()) -> Scores:
    return Scores.of(np.array(codes, dtype=np.intp), _lists(lists, fixed, value))


def _by_key(entries):
    return {(e["c"], e["i"]): e for e in entries}


@pytest.mark.parametrize("fixed", [True, False])
def test_statistics_per_class_and_position_equal_a_direct_computation(fixed):
    codes = [0, 1, 1, 0, 2]
    lists = [[0.7, 0.2, 0.1], [0.2, 0.5, 0.3], [0.2, 0.6, 0.2], [0.5, 0.5, 0.0], [0.1, 0.1, 0.8]]
    got = statistics(_rows(codes, lists, fixed), 3, None, 0.5)
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
    got = statistics(_rows(codes, lists, fixed=False, value=pa.float64()), 2, None, None)
    entries = _by_key(got["entries"])
    # position 1: rows 0..2 (0.9, 0.4, 0.3); position 2: rows 0 and 2 (0.1, 0.3); position 3: row 2
    assert entries[(0, 1)]["n"] == 2 and entries[(0, 1)]["r"] == 3 + 1 and entries[(1, 1)]["r"] == 2
    assert entries[(0, 2)]["n"] == 2 and entries[(0, 2)]["r"] == 3
    assert (1, 2) not in entries and (1, 3) not in entries and entries[(0, 3)]["r"] == 1
    assert got["drift"] == pytest.approx(0.6)  # the row [0.4]; the empty row has no sum


@pytest.mark.parametrize("fixed", [True, False])
def test_statistics_read_a_slice_of_a_list_array_at_its_offset(fixed):
    lists = _lists([[0.9, 0.1], [0.2, 0.8], [0.6, 0.4], [0.3, 0.7]], fixed)
    got = _by_key(statistics(Scores.of(np.array([0, 1]), lists.slice(2)), 2, None, None)["entries"])
    assert got[(0, 1)]["n"] == 1 and got[(0, 1)]["r"] == 2.0 and got[(1, 1)]["r"] == 1.0


def test_statistics_rank_only_the_position_asked_for_and_count_nan():
    rows = _rows([0, 1, 1], [[0.5, 0.5], [float("nan"), 1.0], [0.2, 0.8]], fixed=True)
    got = statistics(rows, 2, 2, None)
    entries = _by_key(got["entries"])
    assert entries[(0, 1)]["r"] is None and entries[(0, 2)]["r"] == 1.0
    assert got["bad"] == 1


def _predictions(t, p, s=None, t_type=None, p_type=None, s_type=None) -> pa.Table:
    columns = {"t": pa.array(t, t_type), "p": pa.array(p, p_type)}
    if s is not None:
        columns["s"] = pa.array(s, s_type)
    columns["h"] = pa.array(np.arange(len(t), dtype=np.uint64) * np.uint64(2**62) + np.uint64(7))
    return pa.table(columns)


def _direct_confusion(t, p) -> dict:
    out: dict = {}
    for a, b in zip(t, p):
        if a is not None:
            out[(a, b)] = out.get((a, b), 0) + 1
    return out


@pytest.mark.parametrize("t, p, kind", [
    ([3, 1, 3, 2, 1, 3], [3, 3, 1, 2, 7, 3], pa.int64()),  # a predicted class no row has
    ([10**15, -4, 10**15, -4], [-4, -4, 10**15, 9], pa.int64()),  # integers too far apart for a table
    (["a", "A", "a", None, "b"], ["A", "A", None, "a", "é"], pa.string()),  # bytes compared: "a" is not "A"
    ([True, False, None, True], [True, True, False, None], pa.bool_()),
    ([1.0, -0.0, 0.0, 2.5], [0.0, -0.0, 1.0, 2.5], pa.float64()),  # -0.0 is the class 0.0
    ([None, None], [1, 2], pa.int64()),
    ([-100, 0, 100, 0], [100, 100, -100, 0], pa.int8()),  # a table of offsets past the type's own range
    ([2**64 - 1, 2**64 - 3, 2**64 - 1], [2**64 - 3, 2**64 - 3, 2**64 - 1], pa.uint64()),  # past int64
    ([-2**63, -2**63 + 2, -2**63], [-2**63 + 2, -2**63, -2**63], pa.int64()),
])
def test_class_counts_confusion_and_classes_equal_direct_counting(t, p, kind):
    got = class_counts(_predictions(t, p, t_type=kind, p_type=kind), False, None, None)
    normal = [None if v is None else (v + 0.0 if isinstance(v, float) else v) for v in t]
    assert sorted(got.classes, key=repr) == sorted({v for v in normal if v is not None}, key=repr)
    counted = {(e["t"], e["p"]): e["n"] for e in got.confusion}
    assert counted == _direct_confusion(normal, [None if v is None else (v + 0.0 if isinstance(v, float) else v)
                                                 for v in p])
    assert got.rows == len(t) and got.null_targets == sum(v is None for v in t)
    assert got.digest == sum(i * 2**62 + 7 for i in range(len(t))) % 2**64
    assert got.scores is None and got.positions == []


def test_class_counts_give_hugeint_classes_read_as_decimals_as_integers():
    from decimal import Decimal

    t = pa.array([Decimal(2**100), Decimal(1), Decimal(1)], pa.decimal128(38, 0))
    got = class_counts(_predictions(t, [1, 1, 1]), False, None, None)
    assert sorted(got.classes) == [1, 2**100] and all(type(c) is int for c in got.classes)
    assert {(e["t"], e["p"]): e["n"] for e in got.confusion} == {(1, 1): 2, (2**100, 1): 1}


@pytest.mark.parametrize("fixed", [True, False])
def test_class_counts_score_the_rows_with_a_target_and_probabilities(fixed):
    t = [0, 1, None, 1, 0, 1]
    p = [0, 1, 1, 0, 0, 1]
    s = [[0.8, 0.2], [0.3, 0.7], [0.1, 0.9], None, [0.6, 0.4], [0.45, 0.55]]
    kind = pa.list_(pa.float32(), 2) if fixed else pa.list_(pa.float32())
    got = class_counts(_predictions(t, p, s, pa.int64(), pa.int64(), kind), True, None, 0.5)
    kept = [(a, row) for a, row in zip(t, s) if a is not None and row is not None]
    expected = statistics(_rows([a for a, _ in kept], [row for _, row in kept], fixed), 2, None, 0.5)
    assert got.scores == expected
    # where each row's largest probability is, per prediction: every row with probabilities, a target or not
    where: dict = {}
    for b, row in zip(p, s):
        if row is not None:
            key = (b, int(np.argmax(row)) + 1)
            where[key] = where.get(key, 0) + 1
    assert {(e["p"], e["i"]): e["n"] for e in got.positions} == where


def test_class_counts_log_only_each_class_at_its_own_position_when_the_model_names_them():
    t, p = ["b", "a", "b"], ["b", "a", "a"]
    s = [[0.3, 0.7], [0.9, 0.1], [0.6, 0.4]]
    table = _predictions(t, p, s, s_type=pa.list_(pa.float32(), 2))
    every = {(e["c"], e["i"]): e for e in class_counts(table, False, None, None).scores["entries"]}
    named = class_counts(table, False, None, None, model_classes=["a", "b"])
    classes = named.classes
    for e in named.scores["entries"]:
        own = ["a", "b"].index(classes[e["c"]]) + 1 == e["i"]
        assert e["ln"] == (pytest.approx(every[(e["c"], e["i"])]["ln"], rel=1e-15) if own else None)
        assert e["r"] == (every[(e["c"], e["i"])]["r"] if own else None)
        assert e["n"] == every[(e["c"], e["i"])]["n"]


@pytest.mark.parametrize("count", [3, 6])
def test_statistics_rank_each_named_class_against_the_rest_at_its_own_position(count):
    """With the classes named, each position ranks its own class against the rest (one 32-bit sort past four
    classes too): the rank sums equal SciPy's, heavy ties included."""
    rng = np.random.default_rng(count)
    n = 500
    matrix = rng.dirichlet(np.ones(count), size=n).astype(np.float32)
    matrix[::3] = np.round(matrix[::3], 1)  # ties
    codes = rng.integers(0, count, n)
    logged = {i + 1: (i + 2) % count for i in range(count)}  # position i+1 holds the class coded (i+2) % count
    got = _by_key(statistics(Scores.of(codes, _lists(matrix.tolist(), True)), count, None, None, logged)["entries"])
    for i in range(count):
        mine = codes == logged[i + 1]
        ranks = rankdata(matrix[:, i].astype(np.float64))
        assert got[(logged[i + 1], i + 1)]["r"] == ranks[mine].sum()
        assert all(got[(c, i + 1)]["r"] is None for c in range(count) if c != logged[i + 1] and (c, i + 1) in got)


def test_first_largest_takes_the_first_of_equal_values_and_a_nan_as_the_largest():
    fixed = Scores.of(np.zeros(4, dtype=np.intp), _lists([[0.2, 0.5, 0.5], [0.9, 0.1, 0.9], [0.1, np.nan, 0.8],
                                                          [0.3, 0.3, 0.3]], True))
    assert fixed.first_largest().tolist() == [1, 0, 1, 0]
    ragged = Scores.of(np.zeros(4, dtype=np.intp), _lists([[0.2, 0.5, 0.5], [], [0.1, np.nan], [0.7]], False))
    assert ragged.first_largest().tolist() == [1, -1, 1, 0]


def test_statistics_in_a_process_forked_after_their_threads_started():
    """The threads statistics work in do not survive a fork: a forked child starts its own instead of waiting on
    threads it does not have."""
    import multiprocessing

    rows = _rows([0, 1, 1], [[0.6, 0.4], [0.3, 0.7], [0.2, 0.8]], fixed=True)
    here = statistics(rows, 2, None, None)
    context = multiprocessing.get_context("fork")
    with context.Pool(1) as pool:
        there = pool.apply_async(_statistics_of_three_rows).get(timeout=60)
    assert there == here


def _statistics_of_three_rows():
    return statistics(_rows([0, 1, 1], [[0.6, 0.4], [0.3, 0.7], [0.2, 0.8]], fixed=True), 2, None, None)


@pytest.mark.parametrize("value", [pa.float32(), pa.float64()])
@pytest.mark.parametrize("fixed", [True, False])
def test_roc_points_equal_scikit_learns_curve(value, fixed):
    """Ties, -0.0 beside 0.0, text classes, rows without a TARGET and (ragged) rows without the position: the
    points of sklearn.metrics.roc_curve(drop_intermediate=False) over the rows counted, its first point first."""
    from sklearn.metrics import roc_curve

    rng = np.random.default_rng(5)
    n = 400
    first = rng.choice(np.array([0.0, -0.0, 0.1, 0.25, 0.5, 0.75, 1.0]), n) if value == pa.float32() else rng.random(n)
    lists = [[float(a), 1.0 - float(a)] for a in first]
    t = list(rng.choice(["yes", "no"], n))
    t[3] = t[7] = None
    if not fixed:
        lists[5] = [0.3]  # no second position: not counted
    table = pa.table({"t": pa.array(t, pa.string()),
                      "s": pa.array(lists, pa.list_(value, 2) if fixed else pa.list_(value))})
    got = roc_points(table, 2, "yes").to_pydict()
    counted = [k for k in range(n) if t[k] is not None and len(lists[k]) >= 2]
    scores = np.array([lists[k][1] for k in counted], dtype=np.float32 if value == pa.float32() else np.float64)
    fpr, tpr, thresholds = roc_curve([t[k] == "yes" for k in counted], scores, drop_intermediate=False)
    assert got["threshold"] == pytest.approx(list(thresholds.astype(np.float64)), rel=0, abs=0)
    assert got["recall"] == pytest.approx(list(tpr), rel=1e-15) and got["false_positive_rate"] == pytest.approx(
        list(fpr), rel=1e-15)
    positives = sum(t[k] == "yes" for k in counted)
    assert [a + b for a, b in zip(got["true_positives"], got["false_negatives"])] == [positives] * len(fpr)
    negatives = len(counted) - positives
    assert got["true_negatives"][0] == negatives and got["false_positives"][-1] == negatives


def test_roc_points_of_one_class_have_no_rate_for_the_other():
    scores = pa.array([[0.2, 0.8], [0.6, 0.4]], pa.list_(pa.float32(), 2))
    got = roc_points(pa.table({"t": pa.array([1, 1]), "s": scores}), 2, 1).to_pydict()
    assert got["false_positive_rate"] == [None, None, None] and got["recall"] == [0.0, 0.5, 1.0]
    assert roc_points(pa.table({"t": pa.array([None], pa.int64()), "s": pa.array([[0.5, 0.5]])}), 1, 1).num_rows == 0
