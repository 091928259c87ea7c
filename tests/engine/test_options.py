"""The option schema (issue 23): every statement's options declared once (``modelsql/engine/options/declared.py``),
read by it (duplicates, unknown names with "did you mean", type, range and choice errors, all
``invalid_option``, defaults), and the documents generated from it (``docs/options.md``, README's PREDICT
table) equal to what it generates."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from sqlglot import exp

from modelsql.errors import NotSupportedError, ProgrammingError
from modelsql.engine.options import Option, OptionSet
from modelsql.engine import documents
from modelsql.engine.options import docs
from modelsql.engine.options.declared import STATEMENTS

ROOT = Path(__file__).resolve().parents[2]

SET = OptionSet(
    "DEMO",
    Option("size", "int", 8, min=1, max=64, doc="rows"),
    Option("share", "number", 0.5, min=0, max=1, min_open=True, doc="a share"),
    Option("fast", "bool", False, doc="go fast"),
    Option("mode", "choice", "auto", choices=("auto", "stream"), doc="how"),
    Option("label", "text", doc="a label"),
    Option("columns", "names", doc="columns"),
    Option("sizes", "int", (1,), min=1, max=10, many=True, doc="sizes"),
    Option("device", "device", "auto", doc="where"),
)


def test_defaults_are_filled_and_values_normalised():
    got = SET.parse({"MODE": "Stream", "share": 1, "columns": "a, b", "sizes": 3, "device": "CUDA"}, where="DEMO x")
    assert got == {"size": 8, "share": 1.0, "fast": False, "mode": "stream", "label": None, "columns": ("a", "b"),
                   "sizes": (3,), "device": "cuda:0"}
    assert got.given == {"mode", "share", "columns", "sizes", "device"} and got.rest == {}


@pytest.mark.parametrize("given, words", [
    ({"size": 0}, ["DEMO x option size must be an integer from 1 to 64, not 0."]),
    ({"size": 2.5}, ["not 2.5"]),
    ({"size": True}, ["not TRUE"]),
    ({"size": None}, ["not NULL"]),
    ({"share": 0}, ["must be a number > 0 and <= 1, not 0"]),
    ({"fast": 1}, ["fast must be true or false, not 1"]),
    ({"mode": "batch"}, ["mode must be one of 'auto', 'stream', not 'batch'"]),
    ({"label": 3}, ["label must be text, not 3"]),
    ({"columns": ("a", "A")}, ['names column "A" twice']),
    ({"columns": ()}, ["columns must name columns"]),
    ({"sizes": (1, 1)}, ["sizes must be integers from 1 to 10, each once, not (1, 1)"]),
    ({"sizes": (1, 11)}, ["not (1, 11)"]),
    ({"device": "gpu"}, ["device must be one of 'auto', 'cpu', 'cuda', 'cuda:N', not 'gpu'"]),
])
def test_a_bad_value_is_invalid_option_naming_statement_option_and_value(given, words):
    with pytest.raises(ProgrammingError) as info:
        SET.parse(given, where="DEMO x")
    assert info.value.code == "invalid_option" and info.value.option == next(iter(given))
    assert all(w in str(info.value) for w in words), str(info.value)


def test_an_unknown_option_says_did_you_mean_and_lists_the_options():
    with pytest.raises(ProgrammingError) as info:
        SET.parse({"sise": 3}, where="DEMO x")
    assert info.value.code == "unknown_option" and info.value.option == "sise"
    assert str(info.value) == ('DEMO x: unknown option "sise". Did you mean "size"? Options are: size, share, fast, '
                               "mode, label, columns, sizes, device.")
    got = SET.parse({"trials": 4}, extra=("trials",))  # passed through unchecked
    assert got.rest == {"trials": 4} and "trials" not in got


def _with(sql_options: str):
    from modelsql import sql as msql

    return msql.parse(f"SERVE MODEL m WITH ({sql_options})")[0]


def test_statement_nodes_are_read_with_duplicates_and_parameters_refused():
    node = _with("max_batch_size = 4, max_batch_size = 5")
    with pytest.raises(ProgrammingError) as info:
        SET.parse(node)
    assert info.value.code == "duplicate_option"
    node = _with("size = ?")
    node.find(exp.Placeholder).replace(exp.Placeholder(this="1"))
    assert SET.parse(node, [7])["size"] == 7
    closed = OptionSet("CLOSED", Option("size", "int", 1), parameters=False)
    with pytest.raises(NotSupportedError) as info:
        closed.parse(node, [7])
    assert info.value.code == "parameter_not_supported"


def test_every_declared_default_is_a_value_of_its_option():
    for options in STATEMENTS:
        for o in options:
            if o.default is not None:
                assert o.check(o.default, options.statement) == o.default, (options.statement, o.name)
            assert o.doc, (options.statement, o.name)


def test_no_statement_reads_its_options_by_hand():
    """The unknown-option message and ``bad_option`` live nowhere but the schema (one code for a bad value)."""
    src = ROOT / "modelsql"
    for path in src.rglob("*.py"):
        text = path.read_text()
        assert '"bad_option"' not in text, path
        if path.parent.name != "options":
            assert not re.search(r"unknown option \"\{", text), path


def test_docs_options_md_is_what_the_schema_generates():
    """Regenerate with ``python -m modelsql.engine.documents``."""
    assert (ROOT / "docs" / "options.md").read_text() == docs.options_md()


def test_readme_option_tables_are_what_the_schema_generates():
    text = (ROOT / "README.md").read_text()
    assert "<!-- options: PREDICT -->" in text and "docs/options.md" in text
    assert text == docs.with_readme_tables(text), "run python -m modelsql.engine.documents"
    assert documents.main([str(ROOT), "--check"]) == 0


def test_every_statement_with_options_reads_them_with_its_declaration():
    """Each declared set is used by the statement's module (a declaration nothing reads would document options
    that do not exist)."""
    engine = "\n".join(p.read_text() for p in (ROOT / "modelsql" / "engine").rglob("*.py")
                       if p.parent.name != "options")
    import modelsql.engine.options.declared as declared

    for name in declared.__all__:
        if isinstance(getattr(declared, name), OptionSet):
            assert re.search(rf"\b{name}\b", engine), name
