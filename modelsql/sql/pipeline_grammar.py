"""Pipeline statements of the dialect: parser entries and generator methods (mixed into
:class:`~modelsql.sql.dialect.ModelSQLParser` and :class:`~modelsql.sql.dialect.ModelSQLGenerator`)::

    CREATE [OR REPLACE] PIPELINE [IF NOT EXISTS] p AS (model [VERSION n] [AS step], ...) [WITH (opt, ...)]
    DROP PIPELINE [IF EXISTS] p [VERSION n]
    SHOW PIPELINES
    DESCRIBE PIPELINE p [VERSION n]
    EXPORT PIPELINE p [VERSION n] TO 'path.onnx'

(``PREDICT(PIPELINE p [VERSION n], ...)`` is parsed with PREDICT itself.) The
mixins use the parser's and generator's own helpers (``_parse_model_ref``,
``_parse_with_options``, ``_name_sql`` ...), defined in the dialect.
"""

from __future__ import annotations

from sqlglot import exp
from sqlglot.tokens import TokenType

from modelsql.sql.nodes import (
    CreatePipeline,
    DescribePipeline,
    DropPipeline,
    ExportPipeline,
    ModelRef,
    PipelineStepRef,
    ShowPipelines,
)

__all__ = ["PipelineParsing", "PipelineGenerating"]


class PipelineParsing:
    """Parser entries ``_parse_<key>(words)`` of the pipeline statements."""

    def _parse_pipeline_ref(self) -> ModelRef:
        ref = self._parse_model_ref()
        ref.set("pipeline", True)
        return ref

    def _parse_pipeline_step(self) -> PipelineStepRef:
        ref = self._parse_model_ref()
        alias = None
        if self._match(TokenType.ALIAS):
            token = self._curr
            alias = self._parse_id_var(any_token=False)
            if not isinstance(alias, exp.Identifier):
                self.raise_error("Expected a step name after AS", token)
        return self.expression(PipelineStepRef(this=ref, alias=alias))

    def _parse_createpipeline(self, words: tuple[str, ...]) -> CreatePipeline:
        exists = self._parse_exists(not_=True)
        name_token = self._curr
        name = self._parse_id_var(any_token=False)
        if not isinstance(name, exp.Identifier):
            self.raise_error("Expected a pipeline name", name_token)
        if not self._match(TokenType.ALIAS):
            self.raise_error("Expected AS (model, model, ...) after the pipeline name")
        if not self._match(TokenType.L_PAREN):
            self.raise_error("Expected ( and the pipeline's steps: AS (model, model, ...)")
        if self._curr is not None and self._curr.token_type == TokenType.R_PAREN:
            self.raise_error("A pipeline needs at least one step")
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
            self.raise_error("Expected TO '<file>' after the pipeline name")
        return self.expression(ExportPipeline(this=ref, target=self._parse_path_literal("TO")))


class PipelineGenerating:
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
