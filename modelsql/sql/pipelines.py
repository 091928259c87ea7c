"""The pipeline statements of the dialect: their nodes, parser entries and generator methods::

    CREATE [OR REPLACE] PIPELINE [IF NOT EXISTS] p AS (model [VERSION n | ALIAS a] [AS step], ...) [WITH (opt, ...)]
    DROP PIPELINE [IF EXISTS] p [VERSION n]
    SHOW [MODELSQL] PIPELINES
    DESCRIBE PIPELINE p [VERSION n]
    EXPORT PIPELINE p [VERSION n] TO 'path.onnx'

(``PREDICT(PIPELINE p [VERSION n], ...)`` is parsed with PREDICT, :mod:`modelsql.sql.predict`.)
"""

from __future__ import annotations

import typing as t

from sqlglot import exp
from sqlglot.tokens import TokenType

from modelsql.sql.grammar import PIPELINE_NO_ALIAS, GrammarGenerator, GrammarParser, ModelRef
from modelsql.sql.registry import option_dict, part, statement, undotted_name_at

__all__ = ["PipelineStepRef", "CreatePipeline", "DropPipeline", "ShowPipelines", "DescribePipeline",
           "ExportPipeline", "PipelineParsing", "PipelineGenerating"]


@part
class PipelineStepRef(exp.Expression):
    """One step of ``CREATE PIPELINE p AS (model [VERSION n | ALIAS a] [AS step], ...)``.

    Args:
        this: ``ModelRef`` (the model, optionally pinned to a version).
        alias: ``exp.Identifier`` step name, or ``None`` (the model's name).
    """

    arg_types = {"this": True, "alias": False}


@statement
class CreatePipeline(exp.Expression):
    """``CREATE [OR REPLACE] PIPELINE [IF NOT EXISTS] p AS (step, ...) [WITH (k = v, ...)]``.

    Steps run in order; each step input is fed by the latest earlier step output of
    the same name, else (a step with one input) by the previous step's first
    output, else by a pipeline input of that name (PRETZEL's white-box pipeline).

    Args:
        this: ``exp.Identifier``, the pipeline name.
        expressions: list of :class:`PipelineStepRef`.
        exists: ``True`` when ``IF NOT EXISTS`` was written.
        replace: ``True`` for ``CREATE OR REPLACE PIPELINE`` (a new version).
        options: list of ``exp.EQ``, or ``None``.
    """

    WORDS = (("CREATE", "PIPELINE"), ("CREATE", "OR", "REPLACE", "PIPELINE"))
    EXAMPLES = (
        "CREATE PIPELINE p AS (tfidf VERSION 2 AS featurize, head) WITH (description = 'x')",
        'CREATE OR REPLACE PIPELINE p AS (tfidf, head)',
    )
    arg_types = {"this": True, "expressions": True, "exists": False, "replace": False, "options": False}

    @property
    def option_values(self) -> dict[str, exp.Expression]:
        """Options keyed by lower-cased name (later duplicates win)."""
        return option_dict(self.args.get("options"))


@statement
class DropPipeline(exp.Expression):
    """``DROP PIPELINE [IF EXISTS] p [VERSION n]``: the step models stay.

    Args:
        this: ``ModelRef`` (``pipeline`` true).
        exists: ``True`` when ``IF EXISTS`` was written.
    """

    WORDS = (("DROP", "PIPELINE"),)
    EXAMPLES = (
        'DROP PIPELINE IF EXISTS p VERSION 3',
    )
    arg_types = {"this": True, "exists": False}


@statement
class ShowPipelines(exp.Expression):
    """``SHOW PIPELINES`` (or ``SHOW MODELSQL PIPELINES``, as for :class:`ShowModels`): no arguments."""

    WORDS = (("SHOW", "PIPELINES"), ("SHOW", "MODELSQL", "PIPELINES"))
    EXAMPLES = (
        'SHOW PIPELINES',
        'SHOW MODELSQL PIPELINES',
    )
    arg_types: t.ClassVar[dict[str, bool]] = {}


@statement
class DescribePipeline(exp.Expression):
    """``DESCRIBE PIPELINE p [VERSION n]`` (only when an undotted name follows, as for
    :class:`DescribeModel`).

    Args:
        this: ``ModelRef`` (``pipeline`` true).
    """

    WORDS = (("DESCRIBE", "PIPELINE"),)
    EXAMPLES = (
        'DESCRIBE PIPELINE p VERSION 2',
    )
    ONLY_IF = staticmethod(undotted_name_at)
    arg_types = {"this": True}


@statement
class ExportPipeline(exp.Expression):
    """``EXPORT PIPELINE p [VERSION n] TO 'path.onnx'``: one merged ONNX file.

    Args:
        this: ``ModelRef`` (``pipeline`` true).
        target: ``exp.Literal`` string or ``exp.Placeholder``.
    """

    WORDS = (("EXPORT", "PIPELINE"),)
    EXAMPLES = (
        "EXPORT PIPELINE p TO 'p.onnx'",
    )
    arg_types = {"this": True, "target": True}


class PipelineParsing(GrammarParser):
    """Parser entries ``_parse_<key>(words)`` of the pipeline statements (the words consumed)."""

    def _parse_pipeline_ref(self) -> ModelRef:
        ref = self._parse_model_ref(no_alias=PIPELINE_NO_ALIAS)
        ref.set("pipeline", True)
        return ref

    def _parse_pipeline_step(self) -> PipelineStepRef:
        ref = self._parse_model_ref(allow_alias=True)
        alias = None
        if self._match(TokenType.ALIAS):
            token = self._curr
            alias = self._parse_id_var(any_token=False)
            if not isinstance(alias, exp.Identifier):
                self._fail("Expected a step name after AS", token)
        return self.expression(PipelineStepRef(this=ref, alias=alias))

    def _parse_createpipeline(self, words: tuple[str, ...]) -> CreatePipeline:
        exists = self._parse_exists(not_=True)
        name_token = self._curr
        name = self._parse_id_var(any_token=False)
        if not isinstance(name, exp.Identifier):
            self._fail("Expected a pipeline name", name_token)
        if not self._match(TokenType.ALIAS):
            self._fail("Expected AS (model, model, ...) after the pipeline name")
        if not self._match(TokenType.L_PAREN):
            self._fail("Expected ( and the pipeline's steps: AS (model, model, ...)")
        if self._curr is not None and self._curr.token_type == TokenType.R_PAREN:
            self._fail("A pipeline needs at least one step")
        steps = self._parse_csv(self._parse_pipeline_step)
        self._match_r_paren()
        options = self._parse_with_options()
        return self.expression(CreatePipeline(
            this=name, expressions=steps, exists=bool(exists), replace="REPLACE" in words, options=options,
        ))

    def _parse_droppipeline(self, words: tuple[str, ...]) -> DropPipeline:
        exists = self._parse_exists()
        return self.expression(DropPipeline(this=self._parse_pipeline_ref(), exists=bool(exists)))

    def _parse_showpipelines(self, words: tuple[str, ...]) -> ShowPipelines:
        return self.expression(ShowPipelines())

    def _parse_describepipeline(self, words: tuple[str, ...]) -> DescribePipeline:
        return self.expression(DescribePipeline(this=self._parse_pipeline_ref()))

    def _parse_exportpipeline(self, words: tuple[str, ...]) -> ExportPipeline:
        ref = self._parse_pipeline_ref()
        if not self._match_word("TO"):
            self._fail("Expected TO '<file>' after the pipeline name")
        return self.expression(ExportPipeline(this=ref, target=self._parse_path_literal("TO")))


class PipelineGenerating(GrammarGenerator):
    """Generator methods ``<key>_sql`` of the pipeline statements."""

    def pipelinestepref_sql(self, expression: PipelineStepRef) -> str:
        alias = expression.args.get("alias")
        return self.sql(expression, "this") + (f" AS {self._name_sql(alias)}" if alias is not None else "")

    def createpipeline_sql(self, expression: CreatePipeline) -> str:
        head = "CREATE OR REPLACE PIPELINE" if expression.args.get("replace") else "CREATE PIPELINE"
        exists = " IF NOT EXISTS" if expression.args.get("exists") else ""
        steps = ", ".join(self.sql(s) for s in expression.expressions)
        options = self._options_sql(expression)
        options = f" WITH ({options})" if options else ""
        return f"{head}{exists} {self._name_sql(expression.this)} AS ({steps}){options}"

    def droppipeline_sql(self, expression: DropPipeline) -> str:
        exists = " IF EXISTS" if expression.args.get("exists") else ""
        return f"DROP PIPELINE{exists} {self.sql(expression, 'this')}"

    def showpipelines_sql(self, expression: ShowPipelines) -> str:
        return "SHOW PIPELINES"

    def describepipeline_sql(self, expression: DescribePipeline) -> str:
        return f"DESCRIBE PIPELINE {self.sql(expression, 'this')}"

    def exportpipeline_sql(self, expression: ExportPipeline) -> str:
        return f"EXPORT PIPELINE {self.sql(expression, 'this')} TO {self.sql(expression, 'target')}"
