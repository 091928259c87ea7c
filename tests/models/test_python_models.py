"""CREATE MODEL m FROM PYTHON for PREDICT: the ten imperative programs of modelsql.datasets.programs through SQL
(each compared with eager PyTorch on inputs other than its example), the safety gate's rules one by one, and
what a user gets wrong (no example, a changed source, a graph-only request that cannot be met)."""

from __future__ import annotations

import importlib
import textwrap
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript", reason="the dynamo ONNX exporter needs onnxscript (the torch extra)")

import modelsql  # noqa: E402
from modelsql.datasets import programs as P  # noqa: E402
from modelsql.converters.python_program import program  # noqa: E402
from modelsql.converters.whole_graph import RULES, differential_test, whole_graph  # noqa: E402

WHOLE_GRAPH = {"collections", "numpy_call", "generator"}
"""The programs whose whole graph passes the gate (the measurements found the same three safe)."""

BATCH_DEPENDENT = {"tensor_if", "early_return", "shape_branch"}
"""Programs whose rows were measured to depend on their batch."""

DATA_DEPENDENT = {"while_loop", "tree_recursion"}
"""Programs run one row per call because torch.export failed on data-dependent control flow (conservative:
their rows happen to be independent, which testing cannot prove)."""


def _load(cur, name: str, rows: int, seed: int = 7, table: str = "") -> tuple:
    """A table ``t_<name>`` (or ``table``) of new inputs for program ``name``; returns them as program arguments."""
    inputs = P.new_inputs(name, rows, seed)
    table = table or f"t_{name}"
    if name == "tokenizer":
        cur.execute(f"CREATE TABLE {table} (id INTEGER, text VARCHAR)")
        cur.executemany(f"INSERT INTO {table} VALUES (?, ?)", list(enumerate(inputs)))
        return (inputs,)
    if name == "tree_recursion":
        values, parents = inputs
        cur.execute(f'CREATE TABLE {table} (id INTEGER, "values" FLOAT[7], parents BIGINT[7])')
        cur.executemany(f"INSERT INTO {table} VALUES (?, ?, ?)",
                        [(i, values[i].tolist(), parents[i].tolist()) for i in range(rows)])
        return inputs
    cur.execute(f"CREATE TABLE {table} (id INTEGER, x FLOAT[4])")
    cur.executemany(f"INSERT INTO {table} VALUES (?, ?)", [(i, r.tolist()) for i, r in enumerate(inputs)])
    return (inputs,)


def _eager_rows(cls, args: tuple) -> np.ndarray:
    """Eager PyTorch on each row alone (PREDICT's answer is a function of each row)."""
    module = cls().eval()
    n = len(args[0])
    with torch.no_grad():
        return np.concatenate([module(*(a[i:i + 1] for a in args)).numpy() for i in range(n)])


def _properties(cur, model: str) -> dict:
    cur.execute(f"DESCRIBE MODEL {model}")
    return {r[2]: r[5] for r in cur.fetchall() if r[0] == "property"}


@pytest.fixture(scope="module")
def programs_db(tmp_path_factory):
    """One catalog file with all ten programs imported from SQL."""
    path = str(tmp_path_factory.mktemp("programs") / "programs.duckdb")
    con = modelsql.connect(path)
    cur = con.cursor()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, cls in P.PROGRAMS.items():
            cur.execute(f"CREATE MODEL {name} FROM PYTHON 'modelsql.datasets.programs:{cls.__name__}'")
    con.commit()
    yield con
    con.close()


@pytest.mark.parametrize("name", sorted(P.PROGRAMS))
def test_every_program_predicts_what_eager_pytorch_computes(programs_db, name) -> None:
    cur = programs_db.cursor()
    args = _load(cur, name, 40)
    cur.execute(f"SELECT id, output FROM PREDICT(MODEL {name}, TABLE t_{name}) ORDER BY id")
    got = np.array([r[1] for r in cur.fetchall()], np.float32)
    expected = _eager_rows(P.PROGRAMS[name], args)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
    props = _properties(cur, name)
    if name in WHOLE_GRAPH:
        assert props["execution"] == "whole_graph"
    else:
        assert props["execution"] in ("coexecute", "eager") and props["whole_graph"].startswith("refused (")
        assert "us" in props["timing"]
    if name in BATCH_DEPENDENT:
        assert props["batching"].startswith("one row per call: a batch of")
    elif name in DATA_DEPENDENT:
        assert props["batching"].startswith("one row per call: data-dependent control flow")
    elif name not in WHOLE_GRAPH:
        assert props["batching"] == "batched: rows are independent"
    assert (props["batch_dependence"] != "none") == (name in BATCH_DEPENDENT | DATA_DEPENDENT)


def test_which_path_each_program_took(programs_db) -> None:
    cur = programs_db.cursor()
    cur.execute("SELECT name, kind FROM modelsql.models ORDER BY name")
    kinds = dict(cur.fetchall())
    assert {n for n, k in kinds.items() if k == "torch"} == WHOLE_GRAPH
    assert {n for n, k in kinds.items() if k == "python"} == set(P.PROGRAMS) - WHOLE_GRAPH
    # the data-dependent branches get the torch.cond suggestion
    assert "torch.cond" in _properties(cur, "tensor_if")["suggestion"]
    assert "batch_range" in _properties(cur, "shape_branch")["whole_graph"]
    assert "mutates_state" in _properties(cur, "module_state")["whole_graph"]
    assert "non_tensor_input" in _properties(cur, "tokenizer")["whole_graph"]
    # dynamo guards on the tokenizer's strings: co-execution compiles again on new rows and is timed no further
    tokenizer = _properties(cur, "tokenizer")
    assert tokenizer["execution"] == "eager" and "compiled again on a timed call" in tokenizer["timing"]
    assert "compiled again" not in _properties(cur, "while_loop")["timing"]


def test_a_stored_program_reloads_in_a_new_connection(tmp_path) -> None:
    from modelsql.operators.backends import SESSIONS

    path = str(tmp_path / "reload.duckdb")
    with modelsql.connect(path) as con:
        cur = con.cursor()
        cur.execute("CREATE MODEL loop FROM PYTHON 'modelsql.datasets.programs:WhileLoop' WITH (execution = 'coexecute')")
        args = _load(cur, "while_loop", 9, seed=11)
        con.commit()
    SESSIONS.clear()  # the next PREDICT loads the program and its weights from the store again
    with modelsql.connect(path) as con:
        cur = con.cursor()
        cur.execute("SELECT output FROM PREDICT(MODEL loop, TABLE t_while_loop) ORDER BY id")
        got = np.array([r[0] for r in cur.fetchall()], np.float32)
        assert _properties(cur, "loop")["execution"] == "coexecute"
    np.testing.assert_allclose(got, _eager_rows(P.WhileLoop, args), rtol=1e-4, atol=1e-5)


def test_explain_says_how_a_program_runs(programs_db) -> None:
    cur = programs_db.cursor()
    _load(cur, "tensor_if", 3, seed=3, table="explained")
    cur.execute("EXPLAIN SELECT * FROM PREDICT(MODEL tensor_if, TABLE explained)")
    text = "\n".join(str(r[-1]) for r in cur.fetchall())
    assert "program: modelsql.datasets.programs:TensorIf as" in text
    assert "one row per call (batch-dependent)" in text


# ---------------------------------------------------------------- the gate, rule by rule


class _Fn(torch.nn.Module):
    def __init__(self, fn) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


class _CountingBuffer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("count", torch.zeros(()))

    def forward(self, x):
        self.count += 1
        return x + self.count


def _gate(module, example=None):
    return whole_graph(program(module, example if example is not None else torch.randn(4, 4)))


def test_the_gate_checks_its_rules_in_order() -> None:
    assert RULES == ("non_tensor_input", "export_failed", "batch_range", "mutates_state", "onnx_export_failed",
                     "differential_test")


def test_gate_rule_non_tensor_input() -> None:
    result = _gate(P.Tokenizer(), P.Tokenizer.example())
    assert result.proto is None and result.rule == "non_tensor_input" and '"text"' in result.reason


def test_gate_rule_export_failed_suggests_torch_cond() -> None:
    result = _gate(P.TensorIf())
    assert result.rule == "export_failed" and "torch.cond" in result.suggestion


def test_gate_rule_batch_range() -> None:
    result = _gate(P.ShapeBranch())
    assert result.rule == "batch_range" and "[2, 7]" in result.reason


def test_gate_rule_mutates_state_for_a_python_attribute_and_for_a_buffer() -> None:
    assert _gate(P.ModuleState()).rule == "mutates_state"
    result = _gate(_CountingBuffer())
    assert result.rule == "mutates_state" and "count" in result.reason


def test_gate_rule_onnx_export_failed_names_the_operator() -> None:
    result = _gate(_Fn(torch.special.bessel_j0))
    assert result.rule == "onnx_export_failed" and "bessel_j0" in result.reason


def test_gate_rule_differential_test_catches_randomness() -> None:
    result = _gate(_Fn(lambda x: x + torch.rand_like(x)))
    assert result.rule == "differential_test" and "disagree" in result.reason


def test_the_differential_test_catches_a_graph_of_another_program() -> None:
    good = whole_graph(program(P.Collections(), P.Collections.example()))
    assert good.rule is None and good.proto is not None
    other = program(P.Generator(), P.Generator.example())  # same input and output shapes, other function
    assert "disagree" in differential_test(other, good.proto)
    assert differential_test(program(P.Collections(), P.Collections.example()), good.proto) is None


# ---------------------------------------------------------------- what users get wrong


def _module_file(tmp_path, monkeypatch, body: str, name: str = "user_prog") -> str:
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(body))
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    return name


_PROGRAM = """
import torch

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(3, 2)

    def forward(self, x):
        if x.sum() > 1e9:
            return self.lin(x) * 0
        return self.lin(x) {op} 1

EXAMPLE = torch.ones(2, 3)
"""


def test_an_example_from_a_reference_and_a_changed_source_is_refused(tmp_path, monkeypatch) -> None:
    mod = _module_file(tmp_path, monkeypatch, _PROGRAM.format(op="+"), "user_prog_a")
    con = modelsql.connect(str(tmp_path / "a.duckdb"))
    cur = con.cursor()
    cur.execute(f"CREATE MODEL net FROM PYTHON '{mod}:Net' WITH (example = '{mod}:EXAMPLE', execution = 'eager')")
    cur.execute("CREATE TABLE t AS SELECT [1, 2, 3]::FLOAT[3] AS x")
    cur.execute("SELECT output FROM PREDICT(MODEL net, TABLE t)")
    first = cur.fetchone()[0]
    assert _properties(cur, "net")["execution"] == "eager"
    con.commit()
    con.close()
    (tmp_path / f"{mod}.py").write_text(textwrap.dedent(_PROGRAM.format(op="-")))
    from modelsql.operators.backends import SESSIONS

    SESSIONS.clear()
    con = modelsql.connect(str(tmp_path / "a.duckdb"))
    with pytest.raises(modelsql.ProgrammingError) as err:
        con.cursor().execute("SELECT output FROM PREDICT(MODEL net, TABLE t)").fetchall()
    assert err.value.code == "source_changed" and "net" in str(err.value)
    con.close()
    assert first is not None


def test_an_example_from_a_table_binds_columns_to_forward_parameters(tmp_path, monkeypatch) -> None:
    mod = _module_file(tmp_path, monkeypatch, _PROGRAM.format(op="*"), "user_prog_b")
    con = modelsql.connect(":memory:")
    cur = con.cursor()
    cur.execute("CREATE TABLE sample AS SELECT [i, i + 1, i * 2]::FLOAT[3] AS x FROM range(5) r(i)")
    cur.execute(f"CREATE MODEL net FROM PYTHON '{mod}:Net' WITH (example = sample)")
    assert _properties(cur, "net")["execution"] in ("coexecute", "eager")
    cur.execute("SELECT output FROM PREDICT(MODEL net, TABLE sample) ORDER BY x[1]")
    got = np.array([r[0] for r in cur.fetchall()], np.float32)
    net = importlib.import_module(mod).Net().eval()
    x = torch.tensor([[i, i + 1, i * 2] for i in range(5)], dtype=torch.float32)
    np.testing.assert_allclose(got, net(x).detach().numpy(), rtol=1e-5)


def test_bad_requests_get_clear_errors_and_leave_the_catalog_as_it_was(tmp_path, monkeypatch) -> None:
    mod = _module_file(tmp_path, monkeypatch, _PROGRAM.format(op="+") + textwrap.dedent("""
        class Broken(torch.nn.Module):
            def forward(self, x):
                raise ValueError("no luck")
        """), "user_prog_c")
    con = modelsql.connect(":memory:")
    cur = con.cursor()
    with pytest.raises(modelsql.ProgrammingError) as err:  # a Module without example() and no example option
        cur.execute(f"CREATE MODEL net FROM PYTHON '{mod}:Net'")
    assert err.value.code == "example_missing"
    with pytest.raises(modelsql.ProgrammingError) as err:
        cur.execute(f"CREATE MODEL net FROM PYTHON '{mod}:Net' WITH (example = '{mod}:EXAMPLE', exampel = 1)")
    assert err.value.code == "unknown_option"
    with pytest.raises(modelsql.NotSupportedError) as err:
        cur.execute(f"CREATE MODEL net FROM PYTHON '{mod}:Net' WITH (example = '{mod}:EXAMPLE', "
                    "execution = 'whole_graph')")
    assert err.value.code == "whole_graph_refused" and "export_failed" in str(err.value)
    with pytest.raises(modelsql.DataError) as err:
        cur.execute(f"CREATE MODEL bad FROM PYTHON '{mod}:Broken' WITH (example = '{mod}:EXAMPLE')")
    assert err.value.code == "program_failed" and "no luck" in str(err.value)
    cur.execute("SELECT count(*) FROM modelsql.models")
    assert cur.fetchone()[0] == 0
    cur.execute(f"CREATE MODEL net FROM PYTHON '{mod}:Net' WITH (example = '{mod}:EXAMPLE')")
    with pytest.raises(modelsql.NotSupportedError) as err:
        cur.execute(f"EXPORT MODEL net TO '{tmp_path / 'net.onnx'}'")
    assert err.value.code == "no_onnx_graph"


def test_a_factory_without_example_is_still_a_trainable() -> None:
    con = modelsql.connect(":memory:")
    cur = con.cursor()
    cur.execute("CREATE MODEL cnn FROM PYTHON 'modelsql.zoo:cnn'")
    cur.execute("SELECT count(*) FROM modelsql.trainables WHERE name = 'cnn'")
    assert cur.fetchone()[0] == 1


def test_co_execution_warns_when_dynamo_reaches_its_recompile_limit(tmp_path) -> None:
    con = modelsql.connect(":memory:")
    cur = con.cursor()
    cur.execute("CREATE MODEL tree FROM PYTHON 'modelsql.datasets.programs:TreeRecursion' "
                "WITH (execution = 'coexecute')")
    args = _load(cur, "tree_recursion", 300, seed=5)
    with pytest.warns(RuntimeWarning, match="recompile_limit"):
        cur.execute("SELECT output FROM PREDICT(MODEL tree, TABLE t_tree_recursion) ORDER BY id")
        got = np.array([r[0] for r in cur.fetchall()], np.float32)
    np.testing.assert_allclose(got, _eager_rows(P.TreeRecursion, args), rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------- found by trying to break it

_TRAPS = """
import torch
from torch import nn


class _Base(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lin = nn.Linear(4, 3)

    @staticmethod
    def example():
        return torch.randn(6, 4, generator=torch.Generator().manual_seed(0))


class ValueBranch(_Base):  # the example never reaches the branch
    def forward(self, x):
        if x[:, 0].max() > 100:
            return -self.lin(x)
        return self.lin(x)


class BigBatchBranch(_Base):  # a branch on the batch size above every size the checks try batched
    def forward(self, x):
        if x.shape[0] > 100:
            return self.lin(x) * 2
        return self.lin(x)


class ModuloBranch(_Base):
    def forward(self, x):
        if x.shape[0] % 5 == 0:
            return self.lin(x) + 1
        return self.lin(x)


class HiddenCounter(_Base):
    def __init__(self):
        super().__init__()
        self._n = 0

    def forward(self, x):
        self._n += 1
        return self.lin(x) + self._n


class BufferCounter(_Base):
    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.zeros(()))

    def forward(self, x):
        self.count += 1
        return self.lin(x) + self.count


class Lookup(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.emb = nn.Embedding(10, 3)

    def forward(self, ids):
        return self.emb(ids)

    @staticmethod
    def example():
        return torch.tensor([1, 2, 3, 4])


class Picky(_Base):  # raises on a negative first feature
    def forward(self, x):
        if bool((x[:, 0] < -50).any()):
            raise ValueError("negative")
        return self.lin(x)


def broken_example():
    raise RuntimeError("boom")
"""


@pytest.fixture()
def traps(tmp_path, monkeypatch):
    return _module_file(tmp_path, monkeypatch, _TRAPS, "user_traps")


def _rows_table(cur, x: np.ndarray, name: str = "rows") -> None:
    cur.execute(f"CREATE TABLE {name} (id INTEGER, x FLOAT[4])")
    cur.executemany(f"INSERT INTO {name} VALUES (?, ?)", [(i, r.tolist()) for i, r in enumerate(x)])


@pytest.mark.parametrize("cls, execution, extreme", [
    ("ValueBranch", "auto", True), ("BigBatchBranch", "auto", False), ("ModuloBranch", "eager", False),
    ("ModuloBranch", "coexecute", False),
])
def test_no_silent_wrong_answer_from_batching(traps, cls, execution, extreme) -> None:
    con = modelsql.connect(":memory:")
    cur = con.cursor()
    x = np.random.default_rng(0).standard_normal((300, 4)).astype(np.float32)
    if extreme:
        x[7, 0] = 500.0
    _rows_table(cur, x)
    cur.execute(f"CREATE MODEL m FROM PYTHON '{traps}:{cls}' WITH (execution = '{execution}')")
    cur.execute("SELECT output FROM PREDICT(MODEL m, TABLE rows) ORDER BY id")
    got = np.array([r[0] for r in cur.fetchall()], np.float32)
    module = getattr(importlib.import_module(traps), cls)().eval()
    with torch.no_grad():
        expected = np.concatenate([module(torch.from_numpy(x[i:i + 1])).numpy() for i in range(len(x))])
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    assert _properties(cur, "m")["batching"].startswith("one row per call")


@pytest.mark.parametrize("cls", ["HiddenCounter", "BufferCounter"])
def test_outputs_that_change_from_call_to_call_are_refused(traps, cls) -> None:
    con = modelsql.connect(":memory:")
    with pytest.raises(modelsql.NotSupportedError) as err:
        con.cursor().execute(f"CREATE MODEL m FROM PYTHON '{traps}:{cls}'")
    assert err.value.code == "nondeterministic_program"


def test_a_negative_index_the_program_refuses_is_not_answered_by_a_graph(traps) -> None:
    con = modelsql.connect(":memory:")
    cur = con.cursor()
    cur.execute(f"CREATE MODEL emb FROM PYTHON '{traps}:Lookup'")
    props = _properties(cur, "emb")
    assert props["execution"] != "whole_graph" and "differential_test" in props["whole_graph"]
    cur.execute("CREATE TABLE ids AS SELECT * FROM (VALUES (0, 3), (1, -1)) v(id, ids)")
    con.commit()
    with pytest.raises(modelsql.DataError):
        cur.execute("SELECT * FROM PREDICT(MODEL emb, TABLE ids)").fetchall()
    con.rollback()
    cur.execute("SELECT id, output FROM PREDICT(MODEL emb, TABLE ids, on_error = 'null') ORDER BY id")
    rows = cur.fetchall()
    assert rows[0][1] is not None and rows[1][1] is None


def test_on_error_null_isolates_the_rows_a_program_fails_on(traps) -> None:
    con = modelsql.connect(":memory:")
    cur = con.cursor()
    x = np.zeros((5, 4), np.float32)
    x[2, 0] = -100
    _rows_table(cur, x)
    cur.execute(f"CREATE MODEL picky FROM PYTHON '{traps}:Picky' WITH (execution = 'eager')")
    cur.execute("SELECT id, output FROM PREDICT(MODEL picky, TABLE rows, on_error = 'null') ORDER BY id")
    assert [r[1] is None for r in cur.fetchall()] == [False, False, True, False, False]


def test_an_edited_helper_module_is_a_changed_source(tmp_path, monkeypatch) -> None:
    (tmp_path / "user_helper.py").write_text("import torch\ndef act(x):\n    return torch.relu(x)\n")
    mod = _module_file(tmp_path, monkeypatch, textwrap.dedent("""
        import torch
        import user_helper

        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                torch.manual_seed(0)
                self.lin = torch.nn.Linear(4, 3)

            def forward(self, x):
                if x.sum() > 1e9:
                    return x[:, :3]
                return user_helper.act(self.lin(x))

            @staticmethod
            def example():
                return torch.ones(2, 4)
        """), "user_prog_d")
    con = modelsql.connect(":memory:")
    cur = con.cursor()
    cur.execute(f"CREATE MODEL net FROM PYTHON '{mod}:Net'")
    _rows_table(cur, np.ones((3, 4), np.float32))
    cur.execute("CREATE MODEL other FROM PYTHON 'modelsql.datasets.programs:Collections'")
    (tmp_path / "user_helper.py").write_text("import torch\ndef act(x):\n    return -torch.relu(x) * 100\n")
    with pytest.raises(modelsql.ProgrammingError) as err:
        cur.execute("SELECT * FROM PREDICT(MODEL net, TABLE rows)")
    assert err.value.code == "source_changed" and "user_helper.py" in str(err.value)
    cur.execute("SELECT count(*) FROM PREDICT(MODEL other, TABLE rows)")  # the transaction is still usable
    assert cur.fetchone()[0] == 3


def test_bad_examples_and_names_are_clear_errors(traps) -> None:
    con = modelsql.connect(":memory:")
    cur = con.cursor()
    with pytest.raises(modelsql.ProgrammingError) as err:
        cur.execute(f"CREATE MODEL m FROM PYTHON '{traps}:ValueBranch' WITH (example = no_such_table)")
    assert "no_such_table" in str(err.value)
    with pytest.raises(modelsql.DataError) as err:
        cur.execute(f"CREATE MODEL m FROM PYTHON '{traps}:ValueBranch' WITH (example = '{traps}:broken_example')")
    assert err.value.code == "program_failed" and "boom" in str(err.value)
    with pytest.raises(modelsql.ProgrammingError) as err:
        cur.execute(f"CREATE MODEL m FROM PYTHON '{traps}:ValueBranch' WITH (outputs = (x))")
    assert err.value.code == "invalid_option" and '"x"' in str(err.value)
    cur.execute("CREATE TABLE empty (x FLOAT[4])")
    with pytest.raises(modelsql.ProgrammingError) as err:
        cur.execute(f"CREATE MODEL m FROM PYTHON '{traps}:ValueBranch' WITH (example = empty)")
    assert err.value.code == "example_missing"
    cur.execute("CREATE TABLE keyed AS SELECT range AS id, 1.0 AS a, 2.0 AS b, 3.0 AS c, 4.0 AS d FROM range(4)")
    cur.execute(f"CREATE MODEL keyed FROM PYTHON '{traps}:BigBatchBranch' WITH (example = keyed)")  # id is no feature
    cur.execute("SELECT count(*) FROM modelsql.models")
    assert cur.fetchone()[0] == 1
