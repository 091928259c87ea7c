"""The recipe "Adding a statement" (docs/architecture.md), walked from the registries alone (issue 23): each
registered statement has its node, grammar and generator in one family file of sql/, a handler in the engine
package of the same family, its option sets if it takes options, and its section of docs/statements.md, which
is what the registries generate. Adding a statement to a family touches at most three places: its family file
in sql/, its handler module, and (when it takes options) the option declarations."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest

from modelsql import sql as msql
from modelsql.engine import handlers, statement_docs
from modelsql.engine.documents import wanted
from modelsql.engine.options.declared import STATEMENTS
from modelsql.engine.session import register_handlers
from modelsql.sql.dialect import ModelSQLGenerator, ModelSQLParser
from modelsql.sql.registry import MODEL_NODES, STATEMENT_NODES

ROOT = Path(__file__).resolve().parents[2]
RECIPE = (ROOT / "docs" / "architecture.md").read_text().split("## Adding a statement", 1)[1].split("\n## ", 1)[0]

#: statement family (the file in sql/) -> the engine package holding its handlers
ENGINE_PACKAGE = {"models": "models", "pipelines": "pipelines", "serve": "serve", "tune": "tune",
                  "profile": "profile", "finetune": "finetune", "evaluate": "evaluate"}


@pytest.fixture(scope="module", autouse=True)
def loaded():
    register_handlers()


def _defined_in(cls: type, name: str) -> str:
    """The module of the class of ``cls``'s MRO that defines ``name``."""
    owner = next(k for k in cls.__mro__ if name in vars(k))
    return owner.__module__


@pytest.mark.parametrize("node", STATEMENT_NODES, ids=lambda n: n.__name__)
def test_grammar_and_generator_live_in_the_nodes_family_file(node):
    family = statement_docs.family_of(node)
    assert node.__module__ == f"modelsql.sql.{family}"
    assert _defined_in(ModelSQLParser, f"_parse_{node.key}") == node.__module__
    assert _defined_in(ModelSQLGenerator, f"{node.key}_sql") == node.__module__


@pytest.mark.parametrize("node", STATEMENT_NODES, ids=lambda n: n.__name__)
def test_examples_parse_to_the_node_and_round_trip(node):
    for text in node.EXAMPLES:
        (tree,) = msql.parse(text)
        assert type(tree) is node, text
        assert msql.parse(tree.sql(dialect=msql.ModelSQL)) == [tree], text


@pytest.mark.parametrize("node", STATEMENT_NODES, ids=lambda n: n.__name__)
def test_the_handler_lives_in_the_engine_package_of_its_family(node):
    run = handlers.registered()[node].run
    assert run.__module__.startswith(f"modelsql.engine.{ENGINE_PACKAGE[statement_docs.family_of(node)]}."), run


@pytest.mark.parametrize("node", STATEMENT_NODES, ids=lambda n: n.__name__)
def test_a_statement_with_options_has_its_option_sets(node):
    takes = "options" in node.arg_types
    assert bool(statement_docs.options_of(node)) == takes, (
        f"{node.__name__} takes options: declare them in engine/options/declared.py, an OptionSet(..., "
        f"node={node.__name__}) listed in STATEMENTS" if takes else
        f"{node.__name__} has an OptionSet (engine/options/declared.py) but no 'options' in its arg_types")


def test_every_option_set_names_a_node_of_ours():
    assert all(s.node in MODEL_NODES for s in STATEMENTS), [s.statement for s in STATEMENTS]


@pytest.mark.parametrize("node", STATEMENT_NODES, ids=lambda n: n.__name__)
def test_the_statement_reference_has_its_section(node):
    text = (ROOT / "docs" / "statements.md").read_text()
    heading = f"\n### {statement_docs.heading(node)}\n"
    assert heading in text, f"docs/statements.md has no section {heading.strip()!r}: run python -m modelsql.engine.documents"
    section = text.split(heading, 1)[1].split("\n### ", 1)[0]
    assert node.EXAMPLES[0] in section and statement_docs.grammar_file(node) in section
    assert handlers.registered()[node].run.__qualname__ in section


def test_the_generated_documents_are_up_to_date():
    """Regenerate with ``python -m modelsql.engine.documents``."""
    stale = [str(p.relative_to(ROOT)) for p, text in wanted(ROOT).items() if p.read_text() != text]
    assert stale == [], "run python -m modelsql.engine.documents"


def test_the_recipe_counts_at_most_three_places_and_names_them():
    places = re.findall(r"^(\d)\. \*\*", RECIPE, re.M)
    assert places == ["1", "2", "3"]
    for named in ("sql/<family>.py", "@handles", "engine/options/declared.py", "python -m modelsql.engine.documents"):
        assert named in RECIPE, named


def test_the_recipe_names_the_registries_it_relies_on():
    for name in ("STATEMENT_NODES", "WORDS", "EXAMPLES", "_parse_", "_sql", "reads_only", "node="):
        assert name in RECIPE, name
    assert inspect.getsourcefile(statement_docs) and "test_statement_recipe.py" in RECIPE
