"""Tuning statements of the dialect: parser entries and generator methods (mixed into
:class:`~modelsql.sql.dialect.ModelSQLParser` and :class:`~modelsql.sql.dialect.ModelSQLGenerator`)::

    TUNE MODEL name [VERSION n] ON TABLE t | ON (query) [VALIDATE ON TABLE v | VALIDATE ON (query)]
        TARGET column SEARCH (hp = space [, ...]) USING algorithm [WITH (opt, ...)] [RESUME]
    SHOW STUDIES
    DESCRIBE STUDY name
    DROP STUDY [IF EXISTS] name
    PROFILE MODEL | PIPELINE name [VERSION n] [ON TABLE t | ON (query)] [WITH (opt, ...)]
    COMPILE MODEL name [VERSION n] FOR 'target' [WITH (opt, ...)]
    FINETUNE PIPELINE name [VERSION n] ON TABLE t | ON (query) [VALIDATE ON ...] TARGET column [WITH (opt, ...)]

(``CREATE MODEL m FROM STUDY s [TRIAL n]`` is parsed with IMPORT / CREATE MODEL
itself.) A ``space`` is an ordinary expression (``CHOICE(0.1, 0.05)``,
``LOGUNIFORM(1e-4, 1e-1)``, ``STEP_DECAY(initial => CHOICE(0.1, 0.05), milestones
=> (10, 20))``, ``32``, ``'adam'`` ...) whose function calls are all
``exp.Anonymous`` and whose named arguments are all ``exp.Kwarg``; the shapes
are in :class:`~modelsql.sql.nodes.TuneModel`'s docstring. The mixins use the
parser's and generator's own helpers (``_parse_model_ref``,
``_parse_relation_input``, ``_parse_with_options``, ``_name_sql`` ...), defined
in the dialect.
"""

from __future__ import annotations

from sqlglot import exp
from sqlglot.tokens import TokenType

from modelsql.sql.nodes import (CompileModel, DescribeStudy, DropStudy, FinetunePipeline, ProfileModel, ShowStudies,
                                TuneModel)

__all__ = ["TuneParsing", "TuneGenerating"]

#: The accepted form of TUNE MODEL, shown by some of its parse errors.
TUNE_FORM = ("TUNE MODEL name [VERSION n] ON TABLE t | ON (SELECT ...) [VALIDATE ON TABLE v | VALIDATE ON (SELECT ...)] "
             "TARGET column SEARCH (name = space, ...) USING algorithm [WITH (option = value, ...)] [RESUME]")

#: The accepted form of FINETUNE PIPELINE.
FINETUNE_FORM = ("FINETUNE PIPELINE name [VERSION n] ON TABLE t | ON (SELECT ...) [VALIDATE ON TABLE v | "
                 "VALIDATE ON (SELECT ...)] TARGET column [WITH (epochs = n, temperature = t, ...)]")

#: Token types that separate a SEARCH item's name from its space (generated as ``=``).
_SEARCH_SEPARATORS = (TokenType.EQ, TokenType.COLON_EQ, TokenType.FARROW)


def _kwarg(name: str, value: exp.Expr) -> exp.Kwarg:
    return exp.Kwarg(this=exp.var(name), expression=value)


def _named_arguments_as_kwargs(space: exp.Expr) -> exp.Expr:
    """Every named argument of a call in ``space`` as ``exp.Kwarg(this=Var, expression)``.

    sqlglot reads ``name => v`` as ``Kwarg``, ``name := v`` as ``PropertyEQ`` and
    ``name = v`` as an ``EQ`` comparison of a column; in a search space all three
    are a named argument.
    """
    for call in list(space.find_all(exp.Anonymous)):
        args = []
        for arg in call.expressions:
            if isinstance(arg, exp.PropertyEQ) and isinstance(arg.this, exp.Identifier):
                arg = _kwarg(arg.this.name, arg.expression)
            elif (isinstance(arg, exp.EQ) and isinstance(arg.this, exp.Column)
                  and len(arg.this.parts) == 1 and isinstance(arg.this.this, exp.Identifier)):
                arg = _kwarg(arg.this.name, arg.expression)
            args.append(arg)
        call.set("expressions", args)
    return space


class TuneParsing:
    """Parser entries ``_parse_<key>(words)`` of the tuning statements."""

    #: True while a SEARCH space is parsed: every function call is then ``exp.Anonymous``.
    _anonymous_calls = False

    def _parse_function_call(self, functions=None, anonymous=False, optional_parens=True, any_token=False):
        return super()._parse_function_call(
            functions=functions,
            anonymous=anonymous or self._anonymous_calls,
            optional_parens=optional_parens,
            any_token=any_token,
        )

    def _parse_search_space(self) -> exp.Expr:
        token = self._curr
        self._anonymous_calls = True
        try:
            space = self._parse_disjunction()
        finally:
            self._anonymous_calls = False
        if space is None:
            self.raise_error("Expected a search space after =, e.g. CHOICE(32, 64) or LOGUNIFORM(1e-4, 1e-1)", token)
        return _named_arguments_as_kwargs(space)

    def _parse_search_item(self) -> exp.EQ:
        token = self._curr
        name = self._parse_id_var(any_token=False)
        if not isinstance(name, exp.Identifier):
            self.raise_error("Expected a hyperparameter name in SEARCH (name = space, ...)", token)
        if not self._match_set(_SEARCH_SEPARATORS):
            self.raise_error(
                "Expected = after the hyperparameter name in SEARCH, e.g. lr = LOGUNIFORM(1e-4, 1e-1)"
            )
        return self.expression(exp.EQ(this=name, expression=self._parse_search_space()))

    def _parse_tune_input(self, where: str) -> exp.Expr:
        source = self._parse_relation_input(f"after {where}")
        if source is None:
            self.raise_error(f"Expected TABLE <name> or (SELECT ...) after {where}")
        return source

    def _parse_training_data(self, form: str) -> tuple[exp.Expr, exp.Expr, exp.Identifier]:
        """``ON ... [VALIDATE ON ...] TARGET col`` (TUNE and FINETUNE): (train, validate or None, target)."""
        if not self._match(TokenType.ON):
            self.raise_error(
                "Expected ON TABLE <name> or ON (SELECT ...) after the model name: the rows to train on; "
                f"the form is {form}"
            )
        train = self._parse_tune_input("ON")
        validate = None
        if self._match_word("VALIDATE"):
            if not self._match(TokenType.ON):
                self.raise_error("Expected ON TABLE <name> or ON (SELECT ...) after VALIDATE")
            validate = self._parse_tune_input("VALIDATE ON")
        if not self._match_word("TARGET"):
            self.raise_error(
                f"Expected TARGET <column> after the training data: the column to predict; the form is {form}"
            )
        token = self._curr
        target = self._parse_id_var(any_token=False)
        if not isinstance(target, exp.Identifier):
            self.raise_error("Expected a column name after TARGET", token)
        return train, validate, target

    def _parse_finetunepipeline(self, words: tuple[str, ...]) -> FinetunePipeline:
        ref = self._parse_model_ref()
        ref.set("pipeline", True)
        train, validate, target = self._parse_training_data(FINETUNE_FORM)
        return self.expression(FinetunePipeline(this=ref, train=train, validate=validate, target=target,
                                                options=self._parse_with_options()))

    def _parse_tunemodel(self, words: tuple[str, ...]) -> TuneModel:
        ref = self._parse_model_ref()
        train, validate, target = self._parse_training_data(TUNE_FORM)

        if not self._match_word("SEARCH"):
            self.raise_error(f"Expected SEARCH (name = space, ...) after TARGET <column>; the form is {TUNE_FORM}")
        if not self._match(TokenType.L_PAREN):
            self.raise_error("Expected ( after SEARCH: SEARCH (name = space, ...)")
        if self._curr is not None and self._curr.token_type == TokenType.R_PAREN:
            self.raise_error("SEARCH needs at least one hyperparameter: SEARCH (name = space, ...)")
        search = [self._parse_search_item()]
        while self._match(TokenType.COMMA):
            search.append(self._parse_search_item())
        self._match_r_paren()

        if not self._match(TokenType.USING):
            self.raise_error("Expected USING <algorithm> after SEARCH (...), e.g. USING TPE")
        token = self._curr
        algorithm = self._parse_id_var(any_token=False)
        if not isinstance(algorithm, exp.Identifier):
            self.raise_error(
                "Expected a search algorithm after USING (GRID, RANDOM, TPE, ASHA, HYPERBAND or PBT)", token
            )
        options = self._parse_with_options()
        resume = self._match_word("RESUME")
        return self.expression(
            TuneModel(
                this=ref,
                train=train,
                validate=validate,
                target=target,
                search=search,
                algorithm=algorithm,
                options=options,
                resume=bool(resume),
            )
        )

    def _parse_study_name(self) -> exp.Identifier:
        token = self._curr
        name = self._parse_id_var(any_token=False)
        if not isinstance(name, exp.Identifier):
            self.raise_error("Expected a study name", token)
        return name

    def _parse_showstudies(self, words: tuple[str, ...]) -> ShowStudies:
        return self.expression(ShowStudies())

    def _parse_describestudy(self, words: tuple[str, ...]) -> DescribeStudy:
        return self.expression(DescribeStudy(this=self._parse_study_name()))

    def _parse_dropstudy(self, words: tuple[str, ...]) -> DropStudy:
        exists = self._parse_exists()
        return self.expression(DropStudy(this=self._parse_study_name(), exists=bool(exists)))


    def _parse_profilemodel(self, words: tuple[str, ...]) -> ProfileModel:
        ref = self._parse_model_ref()
        if words[1] == "PIPELINE":
            ref.set("pipeline", True)
        source = None
        if self._match(TokenType.ON):
            source = self._parse_relation_input("after PROFILE ... ON")
            if source is None:
                self.raise_error("Expected TABLE t or (SELECT ...) after ON")
        return self.expression(ProfileModel(this=ref, source=source, options=self._parse_with_options()))

    def _parse_compilemodel(self, words: tuple[str, ...]) -> CompileModel:
        ref = self._parse_model_ref()
        if not self._match(TokenType.FOR):
            self.raise_error("Expected FOR 'llvm' or FOR 'cuda' after the model (COMPILE MODEL m FOR 'llvm')")
        target = self._parse_placeholder()
        if target is None:
            if not self._match(TokenType.STRING):
                self.raise_error("Expected the target as a string after FOR ('llvm' or 'cuda')")
            target = exp.Literal.string(self._prev.text)
        return self.expression(CompileModel(this=ref, target=target, options=self._parse_with_options()))


class TuneGenerating:
    """Generator methods ``<key>_sql`` of the tuning statements."""

    def _training_data_sql(self, words: str, expression) -> list[str]:
        """``<words> name ON ... [VALIDATE ON ...] TARGET col`` (TUNE's and FINETUNE's head), as parts."""
        parts = [f"{words} {self.sql(expression, 'this')}", f"ON {self._relation_input_sql(expression.args['train'])}"]
        validate = expression.args.get("validate")
        if validate is not None:
            parts.append(f"VALIDATE ON {self._relation_input_sql(validate)}")
        parts.append(f"TARGET {self._name_sql(expression.args['target'])}")
        return parts

    def tunemodel_sql(self, expression: TuneModel) -> str:
        parts = self._training_data_sql("TUNE MODEL", expression)
        search = ", ".join(
            self.maybe_comment(f"{self._name_sql(item.this)} = {self.sql(item, 'expression')}", item)
            for item in expression.args.get("search") or []
        )
        parts.append(f"SEARCH ({search})")
        parts.append(f"USING {self._name_sql(expression.args['algorithm'])}")
        options = self._options_sql(expression)
        if options:
            parts.append(f"WITH ({options})")
        if expression.args.get("resume"):
            parts.append("RESUME")
        return " ".join(parts)

    def finetunepipeline_sql(self, expression: FinetunePipeline) -> str:
        parts = self._training_data_sql("FINETUNE PIPELINE", expression)
        options = self._options_sql(expression)
        if options:
            parts.append(f"WITH ({options})")
        return " ".join(parts)

    def showstudies_sql(self, expression: ShowStudies) -> str:
        return "SHOW STUDIES"

    def describestudy_sql(self, expression: DescribeStudy) -> str:
        return f"DESCRIBE STUDY {self._name_sql(expression.this)}"

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

    def dropstudy_sql(self, expression: DropStudy) -> str:
        exists = " IF EXISTS" if expression.args.get("exists") else ""
        return f"DROP STUDY{exists} {self._name_sql(expression.this)}"
