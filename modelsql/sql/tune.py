"""The tuning statements of the dialect: their nodes, parser entries and generator methods::

    TUNE MODEL name [VERSION n] ON TABLE t | ON (query) [VALIDATE ON TABLE v | VALIDATE ON (query)]
        TARGET column SEARCH (hp = space [, ...]) USING algorithm [WITH (opt, ...)] [RESUME]
    SHOW [MODELSQL] STUDIES
    DESCRIBE STUDY name
    DROP STUDY [IF EXISTS] name

(``CREATE MODEL m FROM STUDY s [TRIAL n]`` is parsed with CREATE MODEL, :mod:`modelsql.sql.models`.) A
``space`` is an ordinary expression (``CHOICE(0.1, 0.05)``, ``LOGUNIFORM(1e-4, 1e-1)``,
``STEP_DECAY(initial => CHOICE(0.1, 0.05), milestones => (10, 20))``, ``32``, ``'adam'`` ...) whose
function calls are all ``exp.Anonymous`` and whose named arguments are all ``exp.Kwarg``; the shapes are
in :class:`TuneModel`'s docstring.
"""

from __future__ import annotations

import typing as t

from sqlglot import exp
from sqlglot.tokens import TokenType

from modelsql.sql.grammar import GrammarGenerator, GrammarParser
from modelsql.sql.registry import option_dict, statement, undotted_name_at

__all__ = ["TuneModel", "ShowStudies", "DescribeStudy", "DropStudy", "TuneParsing", "TuneGenerating", "TUNE_FORM"]

#: The accepted form of TUNE MODEL, shown by some of its parse errors.
TUNE_FORM = ("TUNE MODEL name [VERSION n] ON TABLE t | ON (SELECT ...) [VALIDATE ON TABLE v | VALIDATE ON (SELECT ...)] "
             "TARGET column SEARCH (name = space, ...) USING algorithm [WITH (option = value, ...)] [RESUME]")


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


@statement
class TuneModel(exp.Expression):
    """``TUNE MODEL name [VERSION n] ON TABLE t | ON (query) [VALIDATE ON TABLE v | VALIDATE ON (query)]
    TARGET col SEARCH (hp = space [, ...]) USING algorithm [WITH (opt = v, ...)] [RESUME]``.

    Hyperparameter search (Ray Tune / Optuna vocabulary), e.g.::

        TUNE MODEL cnn ON TABLE train VALIDATE ON TABLE val TARGET label
        SEARCH (lr = STEP_DECAY(initial => CHOICE(0.1, 0.05), milestones => (10, 20), gamma => 0.1),
                batch_size = CHOICE(32, 64))
        USING ASHA WITH (max_epochs = 27, trials = 64, seed = 0)

    Args:
        this: ``ModelRef``, the model to tune (``version`` pinned or ``None``).
        train: the training rows, as PREDICT's input: ``exp.Table`` for
            ``ON TABLE t`` / ``ON TABLE s.t`` (no alias), or ``exp.Subquery`` for
            ``ON (SELECT ...)`` (any query DuckDB allows in parentheses).
        validate: ``exp.Table`` / ``exp.Subquery`` likewise for ``VALIDATE ON ...``,
            or ``None`` when not written.
        target: ``exp.Identifier``, the label column (quoted when written ``"Col"``).
        search: non-empty ``list[exp.EQ]``, in written order, each
            ``exp.EQ(this=exp.Identifier (the hyperparameter name, as written),
            expression=<space>)``; written ``hp = space`` (``hp := space`` and
            ``hp => space`` are accepted and generate as ``=``). The parser does not
            check names for duplicates nor spaces for meaning (the planner does).
        algorithm: ``exp.Identifier``, the word after ``USING`` as written
            (GRID, RANDOM, TPE, ASHA, HYPERBAND, PBT, ...; compare case-insensitively).
        options: list of ``exp.EQ`` (see module docstring: ``max_epochs``,
            ``trials``, ``seed`` ...), or ``None``.
        resume: ``True`` when ``RESUME`` was written.

    A ``<space>`` is an ordinary sqlglot expression parsed by sqlglot's expression
    parser, with two differences: every function call in it is ``exp.Anonymous``
    whatever its name (``UNIFORM`` / ``RANDOM`` / ``LOG`` are not made sqlglot's typed
    functions), and every named argument of a call is ``exp.Kwarg``. Shapes a handler meets:

    * a call ``NAME(arg, ...)``: ``exp.Anonymous(this=str (the name as written; compare
      case-insensitively, ``node.name.upper()``), expressions=[arg, ...])``;
      e.g. ``CHOICE(0.1, 0.05)``, ``LOGUNIFORM(1e-4, 1e-1)``, ``UNIFORM(0, 1)``,
      ``INTEGER(16, 128)``, ``STEP_DECAY(...)``, ``PIECEWISE(...)``;
    * a named argument ``name => value`` (also written ``name := value`` or
      ``name = value``): ``exp.Kwarg(this=exp.Var(this=str name), expression=value)``
      among the call's ``expressions`` (positional ones keep their place); it
      generates as ``name => value``;
    * a number: ``exp.Literal`` (``is_string`` false; text as written, e.g. ``'1e-4'``);
      a negative number: ``exp.Neg(this=exp.Literal)``; a string: ``exp.Literal``
      (``is_string`` true); ``TRUE`` / ``FALSE``: ``exp.Boolean``; ``NULL``: ``exp.Null``;
    * a tuple ``(10, 20)``: ``exp.Tuple(expressions=[...])``; but a single
      parenthesised value ``(10)`` is ``exp.Paren(this=...)`` (sqlglot's reading);
    * a bare name ``relu``: ``exp.Column(this=exp.Identifier)``; ``?`` / ``$1``:
      ``exp.Placeholder``; anything else (arithmetic ``0.1 * 2`` ...) as sqlglot parses it.

    E.g. ``milestones => CHOICE((10, 20), (15, 25))`` is
    ``Kwarg(this=Var(this='milestones'), expression=Anonymous(this='CHOICE',
    expressions=[Tuple(...), Tuple(...)]))``.
    """

    WORDS = (("TUNE", "MODEL"),)
    EXAMPLES = (
        'TUNE MODEL cnn ON TABLE train VALIDATE ON TABLE val TARGET label SEARCH (lr = LOGUNIFORM(1e-4, 1e-1), batch_size = CHOICE(32, 64)) USING ASHA WITH (max_epochs = 27, trials = 64, seed = 0)',
    )
    arg_types = {
        "this": True,
        "train": True,
        "validate": False,
        "target": True,
        "search": True,
        "algorithm": True,
        "options": False,
        "resume": False,
    }

    @property
    def option_values(self) -> dict[str, exp.Expression]:
        """Options keyed by lower-cased name (later duplicates win)."""
        return option_dict(self.args.get("options"))

    @property
    def search_space(self) -> dict[str, exp.Expression]:
        """SEARCH items keyed by hyperparameter name as written (later duplicates win)."""
        return {item.this.name: item.expression for item in self.args.get("search") or []}


@statement
class ShowStudies(exp.Expression):
    """``SHOW STUDIES`` (or ``SHOW MODELSQL STUDIES``, as for :class:`ShowModels`): no arguments (one row
    per tuning study)."""

    WORDS = (("SHOW", "STUDIES"), ("SHOW", "MODELSQL", "STUDIES"))
    EXAMPLES = (
        'SHOW STUDIES',
        'SHOW MODELSQL STUDIES',
    )
    arg_types: t.ClassVar[dict[str, bool]] = {}


@statement
class DescribeStudy(exp.Expression):
    """``DESCRIBE STUDY name``: a study's trials.

    Only when a name that is not the first part of a dotted name follows STUDY
    (``ONLY_IF``, as for :class:`DescribeModel`): ``DESCRIBE study`` (a table
    called ``study``) and ``DESCRIBE study.t`` stay sqlglot's ``exp.Describe``.

    Args:
        this: ``exp.Identifier``, the study's name (quoted when written ``"Name"``).
    """

    WORDS = (("DESCRIBE", "STUDY"),)
    EXAMPLES = (
        'DESCRIBE STUDY s',
    )
    ONLY_IF = staticmethod(undotted_name_at)
    arg_types = {"this": True}


@statement
class DropStudy(exp.Expression):
    """``DROP STUDY [IF EXISTS] name``.

    Args:
        this: ``exp.Identifier``, the study's name.
        exists: ``True`` when ``IF EXISTS`` was written.
    """

    WORDS = (("DROP", "STUDY"),)
    EXAMPLES = (
        'DROP STUDY IF EXISTS s',
    )
    arg_types = {"this": True, "exists": False}


class TuneParsing(GrammarParser):
    """Parser entries ``_parse_<key>(words)`` of the tuning statements (the words consumed)."""

    #: True while a SEARCH space is parsed: every function call is then ``exp.Anonymous``.
    _anonymous_calls = False

    def _parse_function_call(self, functions: t.Optional[dict[str, t.Callable[..., exp.Expr]]] = None,
                             anonymous: bool = False, optional_parens: bool = True,
                             any_token: bool = False) -> t.Optional[exp.Expr]:
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
            self._fail("Expected a search space after =, e.g. CHOICE(32, 64) or LOGUNIFORM(1e-4, 1e-1)", token)
        return _named_arguments_as_kwargs(space)

    def _parse_search_item(self) -> exp.EQ:
        token = self._curr
        name = self._parse_id_var(any_token=False)
        if not isinstance(name, exp.Identifier):
            self._fail("Expected a hyperparameter name in SEARCH (name = space, ...)", token)
        if not self._match_set(_SEARCH_SEPARATORS):
            self._fail(
                "Expected = after the hyperparameter name in SEARCH, e.g. lr = LOGUNIFORM(1e-4, 1e-1)"
            )
        return self.expression(exp.EQ(this=name, expression=self._parse_search_space()))

    def _parse_tunemodel(self, words: tuple[str, ...]) -> TuneModel:
        ref = self._parse_model_ref()
        train, validate, target = self._parse_training_data(TUNE_FORM)

        if not self._match_word("SEARCH"):
            self._fail(f"Expected SEARCH (name = space, ...) after TARGET <column>; the form is {TUNE_FORM}")
        if not self._match(TokenType.L_PAREN):
            self._fail("Expected ( after SEARCH: SEARCH (name = space, ...)")
        if self._curr is not None and self._curr.token_type == TokenType.R_PAREN:
            self._fail("SEARCH needs at least one hyperparameter: SEARCH (name = space, ...)")
        search = [self._parse_search_item()]
        while self._match(TokenType.COMMA):
            search.append(self._parse_search_item())
        self._match_r_paren()

        if not self._match(TokenType.USING):
            self._fail("Expected USING <algorithm> after SEARCH (...), e.g. USING TPE")
        token = self._curr
        algorithm = self._parse_id_var(any_token=False)
        if not isinstance(algorithm, exp.Identifier):
            self._fail(
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
            self._fail("Expected a study name", token)
        return name

    def _parse_showstudies(self, words: tuple[str, ...]) -> ShowStudies:
        return self.expression(ShowStudies())

    def _parse_describestudy(self, words: tuple[str, ...]) -> DescribeStudy:
        return self.expression(DescribeStudy(this=self._parse_study_name()))

    def _parse_dropstudy(self, words: tuple[str, ...]) -> DropStudy:
        exists = self._parse_exists()
        return self.expression(DropStudy(this=self._parse_study_name(), exists=bool(exists)))


class TuneGenerating(GrammarGenerator):
    """Generator methods ``<key>_sql`` of the tuning statements."""

    def tunemodel_sql(self, expression: TuneModel) -> str:
        parts = self._training_data_sql("TUNE MODEL", expression)
        self._in_search = True  # a one-item tuple keeps its comma there: CHOICE((4,), (4, 4)) (see tuple_sql)
        try:
            search = ", ".join(
                self.maybe_comment(f"{self._name_sql(item.this)} = {self.sql(item, 'expression')}", item)
                for item in expression.args.get("search") or []
            )
        finally:
            self._in_search = False
        parts.append(f"SEARCH ({search})")
        parts.append(f"USING {self._name_sql(expression.args['algorithm'])}")
        options = self._options_sql(expression)
        if options:
            parts.append(f"WITH ({options})")
        if expression.args.get("resume"):
            parts.append("RESUME")
        return " ".join(parts)

    def tuple_sql(self, expression: exp.Tuple) -> str:
        # In a SEARCH space, (4,) is a tuple of one (hidden_layer_sizes), not the number 4 in parentheses.
        if getattr(self, "_in_search", False) and len(expression.expressions) == 1:
            return f"({self.sql(expression.expressions[0])},)"
        return super().tuple_sql(expression)

    def showstudies_sql(self, expression: ShowStudies) -> str:
        return "SHOW STUDIES"

    def describestudy_sql(self, expression: DescribeStudy) -> str:
        return f"DESCRIBE STUDY {self._name_sql(expression.this)}"

    def dropstudy_sql(self, expression: DropStudy) -> str:
        exists = " IF EXISTS" if expression.args.get("exists") else ""
        return f"DROP STUDY{exists} {self._name_sql(expression.this)}"
