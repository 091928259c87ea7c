"""Recursive models: the level-batched tree executor against Python recursion (outputs and gradients), tree
validation, PREDICT over a table of trees, and TUNE training a TreeLSTM whose best trial PREDICT then runs."""

from __future__ import annotations

import sys
import textwrap

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import modelsql  # noqa: E402
from modelsql.datasets.trees import labelled_trees, random_trees  # noqa: E402
from modelsql.recursive.treelstm import TreeLSTM  # noqa: E402
from modelsql.recursive.trees import Trees, schedule  # noqa: E402


def test_the_schedule_runs_each_node_after_its_children() -> None:
    #      0
    #    1   2
    #   3     4
    #         5
    plan = schedule([np.array([-1, 0, 0, 1, 2, 4])])
    assert [sorted(level.tolist()) for level in plan.levels] == [[3, 5], [1, 4], [2], [0]]
    assert plan.roots.tolist() == [0] and plan.nodes == 6
    # each edge's parent is a node of that level, each child one of an earlier level
    done = set()
    for ids, kids, where in zip(plan.levels, plan.child_ids, plan.child_parent):
        assert set(kids.tolist()) <= done
        assert all(0 <= w < len(ids) for w in where)
        done |= set(ids.tolist())
    assert done == set(range(6))


def test_level_batching_equals_recursion_in_outputs_and_gradients() -> None:
    values, parents = random_trees(25, 19, 49, seed=4)
    trees = Trees(values, parents)
    torch.manual_seed(1)
    model = TreeLSTM(1, 3, 12)
    grads = {}
    outs = {}
    for executor in ("level", "naive"):
        model.executor = executor
        model.zero_grad()
        out = model(trees)
        (out * torch.arange(3.0)).sum().backward()
        outs[executor] = out.detach()
        grads[executor] = [p.grad.clone() for p in model.parameters()]
    torch.testing.assert_close(outs["level"], outs["naive"], rtol=1e-5, atol=1e-6)
    for a, b in zip(grads["level"], grads["naive"]):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_node_features_wider_than_one_value() -> None:
    rng = np.random.default_rng(0)
    _, parents = random_trees(6, 3, 9, seed=2)
    values = [rng.standard_normal((len(p), 3)).astype(np.float32) for p in parents]
    model = TreeLSTM(3, 2, 5)
    level = model(Trees(values, parents))
    model.executor = "naive"
    torch.testing.assert_close(level, model(Trees(values, parents)))


@pytest.mark.parametrize("parents, why", [
    ([-1, -1, 0], "exactly one root"),
    ([-1, 5, 0], "node 1 has parent 5"),
    ([-1, 2, 1], "cycle"),
    ([-1, 1], "node 1 has parent 1"),
])
def test_bad_trees_are_refused_naming_the_row(parents, why) -> None:
    good = [np.zeros(3, np.float32)], [np.array([-1, 0, 0])]
    with pytest.raises(modelsql.DataError) as err:
        Trees(good[0] + [np.zeros(len(parents), np.float32)], good[1] + [np.array(parents)])
    assert err.value.code == "invalid_tree" and "row 1" in str(err.value) and why in str(err.value)


def _tree_table(cur, name: str, values, parents, labels=None) -> None:
    extra = ", label BIGINT" if labels is not None else ""
    cur.execute(f'CREATE TABLE {name} (id INTEGER, "values" FLOAT[], parents BIGINT[]{extra})')
    rows = [(i, v.tolist(), p.tolist()) + ((int(labels[i]),) if labels is not None else ())
            for i, (v, p) in enumerate(zip(values, parents))]
    cur.executemany(f"INSERT INTO {name} VALUES (?, ?, ?{', ?' if labels is not None else ''})", rows)


def test_predict_over_a_table_of_trees(tmp_path, monkeypatch) -> None:
    (tmp_path / "tree_prog.py").write_text(textwrap.dedent("""
        import torch
        from modelsql.recursive.treelstm import TreeLSTM
        torch.manual_seed(3)
        MODEL = TreeLSTM(1, 4, 8)
        EXAMPLE = ([torch.zeros(1), torch.ones(3)], [torch.tensor([-1]), torch.tensor([-1, 0, 0])])
        """))
    monkeypatch.syspath_prepend(str(tmp_path))
    values, parents = random_trees(40, 2, 30, seed=9)
    con = modelsql.connect(":memory:")
    cur = con.cursor()
    _tree_table(cur, "trees", values, parents)
    cur.execute("CREATE MODEL tl FROM PYTHON 'tree_prog:MODEL' WITH (example = 'tree_prog:EXAMPLE', "
                "execution = 'eager')")
    cur.execute("SELECT id, output FROM PREDICT(MODEL tl, TABLE trees) ORDER BY id")
    got = np.array([r[1] for r in cur.fetchall()], np.float32)
    expected = sys.modules["tree_prog"].MODEL(Trees(values, parents)).detach().numpy()
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    cur.execute("DESCRIBE MODEL tl")
    shapes = {r[2]: r[4] for r in cur.fetchall() if r[0] == "input"}
    assert shapes == {"values": "[N, ragged]", "parents": "[N, ragged]"}


@pytest.fixture(scope="module")
def tuned_trees(tmp_path_factory):
    values, parents, labels = labelled_trees(400, seed=0)
    con = modelsql.connect(str(tmp_path_factory.mktemp("trees") / "trees.duckdb"))
    cur = con.cursor()
    _tree_table(cur, "trees", values, parents, labels)
    cur.execute('CREATE TABLE train AS SELECT "values", parents, label FROM trees WHERE id < 300 ORDER BY id')
    cur.execute('CREATE TABLE val AS SELECT "values", parents, label FROM trees WHERE id >= 300 ORDER BY id')
    cur.execute("CREATE MODEL tl FROM PYTHON 'modelsql.recursive.treelstm:tree_lstm' WITH (hidden = 16)")
    cur.execute("""TUNE MODEL tl ON TABLE train VALIDATE ON TABLE val TARGET label
        SEARCH (lr = CHOICE(0.01, 0.03), batch_size = 32) USING GRID WITH (max_epochs = 6, seed = 0)""")
    cur.fetchall()
    con.commit()
    yield con, values[300:], parents[300:], labels[300:]
    con.close()


def test_tune_trains_a_tree_lstm_and_predict_runs_its_best_trial(tuned_trees) -> None:
    con, values, parents, labels = tuned_trees
    cur = con.cursor()
    cur.execute("SELECT status, best_metric FROM modelsql.studies")
    status, best = cur.fetchone()
    assert status == "finished" and best < 0.45  # validation loss; chance is ln 2 = 0.69
    cur.execute("CREATE MODEL best FROM STUDY tl_study")
    cur.execute('SELECT label, probabilities FROM PREDICT(MODEL best, (SELECT "values", parents FROM val))')
    rows = cur.fetchall()
    predicted = np.array([r[0] for r in rows])
    assert (predicted == labels).mean() > 0.85
    cur.execute("DESCRIBE MODEL best")
    props = {r[2]: r[5] for r in cur.fetchall() if r[0] == "property"}
    assert props["execution"] == "eager" and "tree_lstm" in props["python"]


def test_tune_refuses_a_bad_tree_naming_its_row(tuned_trees) -> None:
    con, *_ = tuned_trees
    cur = con.cursor()
    cur.execute("""CREATE TABLE bad AS SELECT * FROM train UNION ALL
                   SELECT [1.0, 2.0]::FLOAT[], [-1, -1]::BIGINT[], 0""")
    with pytest.raises(modelsql.DataError) as err:
        cur.execute("""TUNE MODEL tl ON (SELECT * FROM bad) VALIDATE ON TABLE val TARGET label
            SEARCH (lr = 0.01, batch_size = 32) USING GRID WITH (max_epochs = 1, seed = 0, study_name = bad_study)""")
    assert err.value.code == "invalid_tree" and "row 300" in str(err.value)


@pytest.mark.parametrize("bad_row, code", [
    ("[1.0, 2.0]::FLOAT[], [-1, NULL]::BIGINT[], 0", "null_value"),
    ("[1.0, NULL]::FLOAT[], [-1, 0]::BIGINT[], 0", "null_value"),
])
def test_tune_refuses_null_elements_of_a_tree(tuned_trees, bad_row, code) -> None:
    con, *_ = tuned_trees
    cur = con.cursor()
    with pytest.raises(modelsql.DataError) as err:
        cur.execute(f"""TUNE MODEL tl ON (SELECT * FROM train UNION ALL SELECT {bad_row}) VALIDATE ON TABLE val
            TARGET label SEARCH (lr = 0.01, batch_size = 32) USING GRID WITH (max_epochs = 1, study_name = nulls)""")
    assert err.value.code == code and "row 300" in str(err.value)


def test_tune_refuses_trees_whose_nodes_differ_in_width(tmp_path) -> None:
    con = modelsql.connect(":memory:")
    cur = con.cursor()
    cur.execute('CREATE TABLE t ("values" FLOAT[][], parents BIGINT[], label BIGINT)')
    rows = [([[1.0, 2.0, 3.0]] * 2, [-1, 0], i % 2) for i in range(10)] + [([[1.0, 2.0]] * 2, [-1, 0], 1)]
    cur.executemany("INSERT INTO t VALUES (?, ?, ?)", rows)
    cur.execute("CREATE MODEL tl FROM PYTHON 'modelsql.recursive.treelstm:tree_lstm'")
    with pytest.raises(modelsql.DataError) as err:
        cur.execute("TUNE MODEL tl ON TABLE t TARGET label SEARCH (lr = 0.01, batch_size = 4) USING GRID "
                    "WITH (max_epochs = 1)")
    assert err.value.code == "invalid_feature" and "row 10" in str(err.value)
