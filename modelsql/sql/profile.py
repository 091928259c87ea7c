"""The profiling and compiling statements of the dialect: their nodes, parser entries and generator
methods::

    PROFILE MODEL name [VERSION n | ALIAS a] | PIPELINE name [VERSION n] [ON TABLE t | ON (query)] [WITH (opt, ...)]
    COMPILE MODEL name [VERSION n | ALIAS a] FOR 'target' [WITH (opt, ...)]
"""

from __future__ import annotations


from sqlglot import exp
from sqlglot.tokens import TokenType

from modelsql.sql.grammar import PIPELINE_NO_ALIAS, GrammarGenerator, GrammarParser
from modelsql.sql.registry import option_dict, statement

__all__ = ["ProfileModel", "CompileModel", "ProfileParsing", "ProfileGenerating"]


@statement
class ProfileModel(exp.Expression):
    """``PROFILE MODEL name [VERSION n | ALIAS a] | PIPELINE name [VERSION n] [ON TABLE t | ON (query)] [WITH (batch_sizes =
    (...), ...)]``:
    time the model's (or each pipeline step's) configurations and record the latency traces
    (``modelsql.traces``); with ``ON``, on the rows of that input.

    Args:
        this: ``ModelRef`` (``version`` pinned or ``None``; ``pipeline`` set for PROFILE PIPELINE).
        source: ``exp.Table`` or ``exp.Subquery``, or ``None``.
        options: list of ``exp.EQ`` (see module docstring), or ``None``.
    """

    WORDS = (("PROFILE", "MODEL"), ("PROFILE", "PIPELINE"))
    EXAMPLES = (
        'PROFILE MODEL m VERSION 2 WITH (batch_sizes = (1, 8), threads = (1, 2), repeat = 20)',
        'PROFILE PIPELINE p ON TABLE t',
    )
    arg_types = {"this": True, "source": False, "options": False}

    @property
    def option_values(self) -> dict[str, exp.Expression]:
        """Options keyed by lower-cased name (later duplicates win)."""
        return option_dict(self.args.get("options"))


@statement
class CompileModel(exp.Expression):
    """``COMPILE MODEL name [VERSION n | ALIAS a] FOR 'llvm' | 'cuda' [WITH (tune_trials = n, batch_size = b, ...)]``:
    compile the version with another backend (TVM), check it against ONNX Runtime and cache the artifact
    (``modelsql.compiled``); with ``tune_trials`` a MetaSchedule tuning job, resumable.

    Args:
        this: ``ModelRef`` (``version`` pinned or ``None``).
        target: ``exp.Literal`` (string) or ``exp.Placeholder``: the target kind.
        options: list of ``exp.EQ``, or ``None``.
    """

    WORDS = (("COMPILE", "MODEL"),)
    EXAMPLES = (
        "COMPILE MODEL m VERSION 2 FOR 'llvm' WITH (tune_trials = 64, batch_size = 8)",
    )
    arg_types = {"this": True, "target": True, "options": False}

    @property
    def option_values(self) -> dict[str, exp.Expression]:
        """Options keyed by lower-cased name (later duplicates win)."""
        return option_dict(self.args.get("options"))


class ProfileParsing(GrammarParser):
    """Parser entries ``_parse_<key>(words)`` of PROFILE and COMPILE (the words consumed)."""

    def _parse_profilemodel(self, words: tuple[str, ...]) -> ProfileModel:
        ref = self._parse_model_ref(allow_alias=words[1] == "MODEL",
                                    no_alias=PIPELINE_NO_ALIAS if words[1] == "PIPELINE" else None)
        if words[1] == "PIPELINE":
            ref.set("pipeline", True)
        source = None
        if self._match(TokenType.ON):
            source = self._parse_relation_input("after PROFILE ... ON")
            if source is None:
                self._fail("Expected TABLE t or (SELECT ...) after ON")
        return self.expression(ProfileModel(this=ref, source=source, options=self._parse_with_options()))

    def _parse_compilemodel(self, words: tuple[str, ...]) -> CompileModel:
        ref = self._parse_model_ref(allow_alias=True)
        if not self._match(TokenType.FOR):
            self._fail("Expected FOR 'llvm' or FOR 'cuda' after the model (COMPILE MODEL m FOR 'llvm')")
        target = self._parse_placeholder()
        if target is None:
            if not self._match(TokenType.STRING):
                self._fail("Expected the target as a string after FOR ('llvm' or 'cuda')")
            target = exp.Literal.string(self._prev.text)
        return self.expression(CompileModel(this=ref, target=target, options=self._parse_with_options()))


class ProfileGenerating(GrammarGenerator):
    """Generator methods ``<key>_sql`` of PROFILE and COMPILE."""

    def profilemodel_sql(self, expression: ProfileModel) -> str:
        options = self._options_sql(expression)
        word = "PIPELINE" if expression.this.args.get("pipeline") else "MODEL"
        source = expression.args.get("source")
        on = f" ON {self._relation_input_sql(source)}" if source is not None else ""
        return f"PROFILE {word} {self.sql(expression, 'this')}{on}" + (f" WITH ({options})" if options else "")

    def compilemodel_sql(self, expression: CompileModel) -> str:
        options = self._options_sql(expression)
        return (f"COMPILE MODEL {self.sql(expression, 'this')} FOR {self.sql(expression, 'target')}"
                + (f" WITH ({options})" if options else ""))
