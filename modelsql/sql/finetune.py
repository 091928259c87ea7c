"""The fine-tuning statement of the dialect: its node, parser entry and generator method::

    FINETUNE PIPELINE name [VERSION n] ON TABLE t | ON (query) [VALIDATE ON ...] TARGET column [WITH (opt, ...)]
"""

from __future__ import annotations


from sqlglot import exp

from modelsql.sql.grammar import PIPELINE_NO_ALIAS, GrammarGenerator, GrammarParser
from modelsql.sql.registry import option_dict, statement

__all__ = ["FinetunePipeline", "FinetuneParsing", "FinetuneGenerating", "FINETUNE_FORM"]

#: The accepted form of FINETUNE PIPELINE.
FINETUNE_FORM = ("FINETUNE PIPELINE name [VERSION n] ON TABLE t | ON (SELECT ...) [VALIDATE ON TABLE v | "
                 "VALIDATE ON (SELECT ...)] TARGET column [WITH (epochs = n, temperature = t, ...)]")


@statement
class FinetunePipeline(exp.Expression):
    """``FINETUNE PIPELINE name [VERSION n] ON TABLE t | ON (query) [VALIDATE ON TABLE v | VALIDATE ON (query)]
    TARGET col [WITH (epochs = n, temperature = T, ...)]``: translate the pipeline's steps into one
    differentiable program, train them jointly, and register the better of the fine-tuned and the original
    pipeline (chosen on validation) as a new version.

    Args:
        this: ``ModelRef`` with ``pipeline`` set (``version`` pinned or ``None``).
        train, validate: ``exp.Table`` / ``exp.Subquery`` as for ``TuneModel`` (``validate`` may be ``None``).
        target: ``exp.Identifier``, the label or value column.
        options: list of ``exp.EQ``, or ``None``.
    """

    WORDS = (("FINETUNE", "PIPELINE"),)
    EXAMPLES = (
        'FINETUNE PIPELINE p ON TABLE train VALIDATE ON TABLE val TARGET label WITH (epochs = 300)',
    )
    arg_types = {"this": True, "train": True, "validate": False, "target": True, "options": False}

    @property
    def option_values(self) -> dict[str, exp.Expression]:
        """Options keyed by lower-cased name (later duplicates win)."""
        return option_dict(self.args.get("options"))


class FinetuneParsing(GrammarParser):
    """Parser entry ``_parse_finetunepipeline(words)`` (the words consumed)."""

    def _parse_finetunepipeline(self, words: tuple[str, ...]) -> FinetunePipeline:
        ref = self._parse_model_ref(no_alias=PIPELINE_NO_ALIAS)
        ref.set("pipeline", True)
        train, validate, target = self._parse_training_data(FINETUNE_FORM)
        return self.expression(FinetunePipeline(this=ref, train=train, validate=validate, target=target,
                                                options=self._parse_with_options()))


class FinetuneGenerating(GrammarGenerator):
    """Generator method of FINETUNE PIPELINE."""

    def finetunepipeline_sql(self, expression: FinetunePipeline) -> str:
        parts = self._training_data_sql("FINETUNE PIPELINE", expression)
        options = self._options_sql(expression)
        if options:
            parts.append(f"WITH ({options})")
        return " ".join(parts)
