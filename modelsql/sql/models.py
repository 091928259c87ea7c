"""The model statements of the dialect: their nodes, parser entries and generator methods::

    IMPORT MODEL [IF NOT EXISTS] name FROM source [WITH (opt, ...)]
    CREATE [OR REPLACE] MODEL [IF NOT EXISTS] name FROM source [WITH (opt, ...)]
        source := 'file.onnx' | ? | $n | PYTHON 'package.module:function' | STUDY name [TRIAL n]
    CREATE [OR REPLACE] MODEL [IF NOT EXISTS] name WITH | OPTIONS (model_type = ..., opt, ...) AS query
    DROP MODEL [IF EXISTS] name [VERSION n]
    TRUST MODEL name [VERSION n | ALIAS a]
    SHOW [MODELSQL] MODELS
    DESCRIBE MODEL name [VERSION n | ALIAS a]
    ALTER MODEL name SET ALIAS a = VERSION n | BEST BY metric [ON input] | DROP ALIAS [IF EXISTS] a
    ALTER MODEL name [VERSION n] SET TAG t = 'value' | DROP TAG [IF EXISTS] t
    EXPORT MODEL name [VERSION n | ALIAS a] TO 'path.onnx'
    VACUUM [MODELSQL] MODELS

(``name [VERSION n]`` is :class:`~modelsql.sql.grammar.ModelRef`, ``WITH (...)`` the options of
:mod:`modelsql.sql.grammar`.)
"""

from __future__ import annotations

import re
import typing as t

from sqlglot import exp
from sqlglot.tokens import TokenType

from modelsql.sql.grammar import GrammarGenerator, GrammarParser
from modelsql.sql.registry import option_dict, statement, undotted_name_at

__all__ = ["AlterModel", "ImportModel", "DropModel", "TrustModel", "ShowModels", "DescribeModel", "ExportModel", "VacuumModels",
           "ModelParsing", "ModelGenerating"]

#: ``'package.module:function'`` after ``FROM PYTHON`` (the part after ``:`` may be dotted, ``Class.method``).
_PYTHON_REFERENCE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


@statement
class ImportModel(exp.Expression):
    """``IMPORT MODEL [IF NOT EXISTS] name FROM source [WITH (k = v, ...)]``
    and ``CREATE [OR REPLACE] MODEL [IF NOT EXISTS] name FROM source [WITH (...)]``,
    where ``source`` is one of::

        'file.onnx' | ? | $n                   an ONNX file
        PYTHON 'package.module:function'       a Python function that builds the model
        STUDY s [TRIAL n]                      a tuning study's best trial, or trial n

    and ``CREATE [OR REPLACE] MODEL [IF NOT EXISTS] name WITH (model_type = ..., ...) AS query``, a model
    trained on the query's rows (BigQuery ML's ``CREATE MODEL ... OPTIONS (...) AS SELECT``, whose
    ``OPTIONS (...)`` is read as ``WITH (...)``; the query is a ``SELECT``, ``WITH ... SELECT``, a set
    operation or one in parentheses).

    ``CREATE MODEL`` without ``OR REPLACE`` is the same statement as
    ``IMPORT MODEL`` and generates as ``IMPORT MODEL``; ``CREATE OR REPLACE``
    (a new version of an existing model) generates as written. ``PYTHON`` and
    ``STUDY`` are words only right after ``FROM`` (a file path is always quoted
    or a placeholder).

    Exactly one of ``source``, ``study`` and ``query`` is set (the parser enforces it).

    Args:
        this: ``ModelRef`` (a ``VERSION`` is rejected by the parser).
        source: ``exp.Literal`` string: the file path, or with ``python`` the
            ``'package.module:function'`` reference (the parser checks that it
            is dotted names, one ``:``, then a name or dotted names; a
            placeholder is not accepted after PYTHON); ``exp.Placeholder``
            (a file path only); ``None`` for ``FROM STUDY``.
        exists: ``True`` when ``IF NOT EXISTS`` was written.
        replace: ``True`` for ``CREATE OR REPLACE MODEL``.
        options: list of ``exp.EQ`` (see module docstring), or ``None``.
        python: ``True`` for ``FROM PYTHON '...'`` (``source`` is then the reference);
            ``False`` / absent otherwise.
        study: ``exp.Identifier``, the study's name, for ``FROM STUDY s``; else ``None``.
        trial: ``exp.Literal`` integer (digits as written) for ``FROM STUDY s TRIAL n``;
            ``None`` when no ``TRIAL`` was written (the study's best trial) or not ``FROM STUDY``.
        query: the query after ``AS`` (an ``exp.Query``) for a model trained in SQL; else ``None``.
        transform: the items of ``TRANSFORM (item, ...)`` before ``WITH`` (BigQuery ML's clause: a column, or
            ``ML.<function>(column, ...) OVER () AS name``), as parsed select expressions; ``None`` without one.
    """

    WORDS = (("IMPORT", "MODEL"), ("CREATE", "MODEL"), ("CREATE", "OR", "REPLACE", "MODEL"))
    EXAMPLES = (
        "IMPORT MODEL m FROM 'm.onnx' WITH (features = (a, b))",
        "CREATE OR REPLACE MODEL m FROM 'm.onnx'",
        "CREATE MODEL m FROM PYTHON 'models.cnn:build'",
        'CREATE MODEL m FROM STUDY s TRIAL 3',
        "CREATE OR REPLACE MODEL churn WITH (model_type = 'logistic_reg', target = churned) AS SELECT * FROM customers",
        "CREATE MODEL m TRANSFORM (ML.MIN_MAX_SCALER(age) OVER () AS age, plan, churned) "
        "WITH (model_type = 'logistic_reg', target = churned) AS SELECT * FROM customers",
    )
    arg_types = {
        "this": True,
        "source": False,
        "exists": False,
        "replace": False,
        "options": False,
        "python": False,
        "study": False,
        "trial": False,
        "query": False,
        "transform": False,
    }

    @property
    def option_values(self) -> dict[str, exp.Expression]:
        """Options keyed by lower-cased name (later duplicates win)."""
        return option_dict(self.args.get("options"))


@statement
class DropModel(exp.Expression):
    """``DROP MODEL [IF EXISTS] name [VERSION n]``.

    Args:
        this: ``ModelRef``; with a version, only that version is dropped.
        exists: ``True`` when ``IF EXISTS`` was written.
    """

    WORDS = (("DROP", "MODEL"),)
    EXAMPLES = (
        'DROP MODEL IF EXISTS m',
        'DROP MODEL m VERSION 2',
    )
    arg_types = {"this": True, "exists": False}


@statement
class TrustModel(exp.Expression):
    """``TRUST MODEL name [VERSION n | ALIAS a]``: sign the code of a model (its Python program, its trainable factory, its
    compiled libraries; every version, or version ``n``) with the current user's key, so this user's
    connections load it (see :mod:`modelsql.engine.artifacts.trust`).

    Args:
        this: ``ModelRef``; with a version, only that version's code.
    """

    WORDS = (("TRUST", "MODEL"),)
    EXAMPLES = (
        'TRUST MODEL m',
        'TRUST MODEL m VERSION 2',
    )
    arg_types = {"this": True}


@statement
class ShowModels(exp.Expression):
    """``SHOW MODELS``: no arguments. ``SHOW MODELSQL MODELS`` is the same statement, never DuckDB's
    ``SHOW models`` (``DESCRIBE models``), for a database with a table called ``models``."""

    WORDS = (("SHOW", "MODELS"), ("SHOW", "MODELSQL", "MODELS"))
    EXAMPLES = (
        'SHOW MODELS',
        'SHOW MODELSQL MODELS',
    )
    arg_types: t.ClassVar[dict[str, bool]] = {}


@statement
class DescribeModel(exp.Expression):
    """``DESCRIBE MODEL name [VERSION n | ALIAS a]``.

    Only when a name that is not the first part of a dotted name follows MODEL
    (``ONLY_IF``): ``DESCRIBE model`` (a table called ``model``),
    ``DESCRIBE model.t`` and ``DESCRIBE t`` still parse as sqlglot's
    ``exp.Describe``.

    Args:
        this: ``ModelRef``.
    """

    WORDS = (("DESCRIBE", "MODEL"),)
    EXAMPLES = (
        'DESCRIBE MODEL m',
        'DESCRIBE MODEL m VERSION 3',
    )
    ONLY_IF = staticmethod(undotted_name_at)
    arg_types = {"this": True}


@statement
class ExportModel(exp.Expression):
    """``EXPORT MODEL name [VERSION n | ALIAS a] TO 'path.onnx'``.

    Args:
        this: ``ModelRef``.
        target: ``exp.Literal`` string (the file path) or ``exp.Placeholder``.
    """

    WORDS = (("EXPORT", "MODEL"),)
    EXAMPLES = (
        "EXPORT MODEL m VERSION 1 TO 'out.onnx'",
    )
    arg_types = {"this": True, "target": True}


@statement
class VacuumModels(exp.Expression):
    """``VACUUM MODELS``: garbage-collect blobs no catalog entry references.

    No arguments. Any other ``VACUUM ...`` stays DuckDB's (an ``exp.Command``). ``VACUUM MODELSQL MODELS``
    is the same statement, never DuckDB's ``VACUUM models`` of a table called ``models``.
    """

    WORDS = (("VACUUM", "MODELS"), ("VACUUM", "MODELSQL", "MODELS"))
    EXAMPLES = (
        'VACUUM MODELS',
        'VACUUM MODELSQL MODELS',
    )
    arg_types: t.ClassVar[dict[str, bool]] = {}


@statement
class AlterModel(exp.Expression):
    """``ALTER MODEL name SET ALIAS alias = VERSION n | BEST BY metric [ON TABLE t | ON (query)]``,
    ``ALTER MODEL name DROP ALIAS [IF EXISTS] alias``, ``ALTER MODEL name [VERSION n] SET TAG tag = 'value'`` and
    ``ALTER MODEL name [VERSION n] DROP TAG [IF EXISTS] tag``: name a model's version (MLflow's registry aliases,
    such as ``champion``; ``BEST BY`` promotes the version whose recorded evaluations score best, as PostgresML
    deploys the best model by a metric), so ``PREDICT(MODEL name ALIAS alias, ...)``, ``EVALUATE MODEL name ALIAS
    alias`` and ``DESCRIBE MODEL name ALIAS alias`` use the version it names now; or tag the model or a version
    (MLflow's tags).

    Only when an undotted name follows MODEL (``ONLY_IF``, as for :class:`DescribeModel`).

    Args:
        this: ``ModelRef`` (a version only with TAG: the tag is that version's; without, the model's).
        action: ``"set"`` or ``"drop"``.
        alias: ``exp.Identifier``, the alias (ALIAS forms); ``None`` for TAG forms.
        tag: ``exp.Identifier``, the tag (TAG forms); ``None`` for ALIAS forms.
        version: ``exp.Literal`` integer for ``SET ALIAS a = VERSION n``; else ``None``.
        metric: ``exp.Identifier``, the metric of ``BEST BY metric``; else ``None``.
        source: the input of ``BEST BY ... ON``: ``exp.Table`` or ``exp.Subquery``; else ``None``.
        value: ``exp.Literal`` string (or ``exp.Placeholder``) for ``SET TAG t = 'value'``; else ``None``.
        exists: ``True`` when ``DROP ALIAS IF EXISTS`` / ``DROP TAG IF EXISTS`` was written.
    """

    WORDS = (("ALTER", "MODEL"),)
    ONLY_IF = staticmethod(undotted_name_at)
    EXAMPLES = ("ALTER MODEL m SET ALIAS champion = VERSION 3", "ALTER MODEL m DROP ALIAS IF EXISTS challenger",
                "ALTER MODEL m SET ALIAS champion = BEST BY f1_score ON TABLE holdout",
                "ALTER MODEL m VERSION 2 SET TAG stage = 'staging'", "ALTER MODEL m DROP TAG IF EXISTS owner")
    arg_types = {"this": True, "action": True, "alias": False, "tag": False, "version": False, "metric": False,
                 "source": False, "value": False, "exists": False}


class ModelParsing(GrammarParser):
    """Parser entries ``_parse_<key>(words)`` of the model statements (the words consumed)."""

    def _parse_altermodel(self, words: tuple[str, ...]) -> AlterModel:
        ref = self._parse_model_ref(no_version="an alias names the version: SET ALIAS a = VERSION n")
        action = "set" if self._match(TokenType.SET) else "drop" if self._match(TokenType.DROP) else None
        kind = "ALIAS" if self._match_word("ALIAS") else "TAG" if self._match_word("TAG") else None
        if action is None or kind is None:
            self._fail("Expected SET ALIAS, DROP ALIAS, SET TAG or DROP TAG after the model name")
        if kind == "ALIAS" and ref.args.get("version") is not None:
            self._fail("An alias names a model's version: write ALTER MODEL m SET ALIAS a = VERSION n")
        exists = bool(action == "drop" and self._parse_exists())
        token = self._curr
        name = self._parse_id_var(any_token=False)
        if not isinstance(name, exp.Identifier):
            self._fail_name(f"Expected {'an alias' if kind == 'ALIAS' else 'a tag'} name after {kind}", token)
        node = AlterModel(this=ref, action=action, exists=exists, **{kind.lower(): name})
        if action == "set" and kind == "ALIAS":
            self._parse_alias_target(node)
        elif action == "set":
            if not self._match(TokenType.EQ):
                self._fail("Expected = 'value' after the tag name (a quoted text or a ? parameter)")
            tag_value = (exp.Literal.string(self._prev.text) if self._match(TokenType.STRING)
                         else self._parse_placeholder())
            if tag_value is None:
                self._fail("Expected = 'value' after the tag name (a quoted text or a ? parameter)")
            node.set("value", tag_value)
        return self.expression(node)

    def _parse_alias_target(self, node: AlterModel) -> None:
        """``= VERSION n`` or ``= BEST BY metric [ON TABLE t | ON (query)]`` after ``SET ALIAS a``."""
        if not self._match(TokenType.EQ):
            self._fail("Expected = VERSION n or = BEST BY metric after the alias name")
        if self._match_word("BEST"):
            if not self._match_word("BY"):
                self._fail("Expected BY metric after BEST")
            token = self._curr
            metric = self._parse_id_var(any_token=False)
            if not isinstance(metric, exp.Identifier):
                self._fail("Expected a metric name after BEST BY (accuracy, f1_score, r2_score ...)", token)
            node.set("metric", metric)
            if self._match(TokenType.ON):
                node.set("source", self._parse_input_after("ON"))
            return
        if not self._match_word("VERSION"):
            self._fail("Expected = VERSION n or = BEST BY metric after the alias name")
        if not (self._match(TokenType.NUMBER) and self._prev.text.isdigit()):
            self._fail("Expected an integer version number after VERSION")
        node.set("version", exp.Literal.number(self._prev.text))

    def _parse_importmodel(self, words: tuple[str, ...]) -> ImportModel:
        # IMPORT MODEL / CREATE MODEL / CREATE OR REPLACE MODEL
        exists = self._parse_exists(not_=True)
        ref = self._parse_model_ref(allow_version=False,
                                    no_version="versions are assigned when a model is imported")
        if words[0] == "CREATE" and not self._match(TokenType.FROM, advance=False):
            return self._parse_trained_model(ref, bool(exists), "REPLACE" in words)
        if not self._match(TokenType.FROM):
            self._fail(
                "Expected FROM '<file>', FROM PYTHON 'package.module:function' or FROM STUDY <name> "
                "after the model name"
            )
        # An unquoted word right after FROM is PYTHON or STUDY (a file path is quoted or a placeholder).
        source: exp.Expr | None = None
        study: exp.Expr | None = None
        trial: exp.Expr | None = None
        python = False
        if self._match_word("PYTHON"):
            python = True
            if not self._match(TokenType.STRING):
                self._fail("Expected a quoted 'package.module:function' after FROM PYTHON")
            if not _PYTHON_REFERENCE.match(self._prev.text):
                self._fail(
                    "Expected 'package.module:function' after FROM PYTHON: dotted module names, "
                    "a colon, then the function's name",
                    self._prev,
                )
            source = self.expression(exp.Literal.string(self._prev.text), self._prev)
        elif self._match_word("STUDY"):
            token = self._curr
            study = self._parse_id_var(any_token=False)
            if not isinstance(study, exp.Identifier):
                self._fail("Expected a study name after FROM STUDY", token)
            if self._match_word("TRIAL"):
                if not (self._match(TokenType.NUMBER) and self._prev.text.isdigit()):
                    self._fail("Expected an integer trial number after TRIAL")
                trial = exp.Literal.number(self._prev.text)
        elif self._match(TokenType.STRING):
            source = self.expression(exp.Literal.string(self._prev.text), self._prev)
        else:
            source = self._parse_placeholder()
            if source is None:
                self._fail(
                    "Expected a quoted file path, PYTHON 'package.module:function' or STUDY <name> after FROM"
                )
        options = self._parse_with_options()
        return self.expression(
            ImportModel(
                this=ref,
                source=source,
                exists=bool(exists),
                replace="REPLACE" in words,
                options=options,
                python=python,
                study=study,
                trial=trial,
            )
        )

    def _parse_trained_model(self, ref: exp.Expr, exists: bool, replace: bool) -> ImportModel:
        """``WITH | OPTIONS (...) AS query`` after ``CREATE [OR REPLACE] MODEL name``."""
        form = "CREATE MODEL m [TRANSFORM (...)] WITH (model_type = '...', target = y) AS SELECT ..."
        transform = None
        if self._match_word("TRANSFORM"):
            if not self._match(TokenType.L_PAREN):
                self._fail("Expected ( after TRANSFORM: TRANSFORM (column, ML.STANDARD_SCALER(x) OVER () AS x, ...)")
            transform = self._parse_csv(self._parse_expression)
            self._match_r_paren()
            if not transform:
                self._fail("TRANSFORM lists no item: TRANSFORM (column, ML.STANDARD_SCALER(x) OVER () AS x, ...)")
        options = self._parse_with_options()  # (OPTIONS, BigQuery ML's spelling, too)
        if not options or not self._match(TokenType.ALIAS):
            self._fail(f"Expected FROM <source>, or WITH (model_type = ..., ...) AS <query> to train one; the form "
                       f"is {form}")
        token = self._curr
        query = self._parse_set_operations(self._parse_select(nested=True, parse_subquery_alias=False))
        if isinstance(query, exp.Subquery):
            query = query.unnest()
        if not isinstance(query, exp.Query):
            self._fail(f"Expected a query (SELECT ...) after AS: the rows to train on; the form is {form}", token)
        return self.expression(ImportModel(this=ref, exists=exists, replace=replace, options=options, query=query,
                                           transform=transform))

    def _parse_dropmodel(self, words: tuple[str, ...]) -> DropModel:
        exists = self._parse_exists()
        ref = self._parse_model_ref()
        return self.expression(DropModel(this=ref, exists=bool(exists)))

    def _parse_trustmodel(self, words: tuple[str, ...]) -> TrustModel:
        return self.expression(TrustModel(this=self._parse_model_ref(allow_alias=True)))

    def _parse_showmodels(self, words: tuple[str, ...]) -> ShowModels:
        return self.expression(ShowModels())

    def _parse_describemodel(self, words: tuple[str, ...]) -> DescribeModel:
        return self.expression(DescribeModel(this=self._parse_model_ref(allow_alias=True)))

    def _parse_exportmodel(self, words: tuple[str, ...]) -> ExportModel:
        ref = self._parse_model_ref(allow_alias=True)
        if not self._match_word("TO"):
            self._fail("Expected TO '<file>' after the model name")
        target = self._parse_path_literal("TO")
        return self.expression(ExportModel(this=ref, target=target))

    def _parse_vacuummodels(self, words: tuple[str, ...]) -> VacuumModels:
        return self.expression(VacuumModels())


class ModelGenerating(GrammarGenerator):
    """Generator methods ``<key>_sql`` of the model statements."""

    def altermodel_sql(self, expression: AlterModel) -> str:
        head = f"ALTER MODEL {self.sql(expression, 'this')}"
        kind = "ALIAS" if expression.args.get("alias") is not None else "TAG"
        name = self._name_sql(expression.args[kind.lower()])
        if expression.args["action"] == "drop":
            exists = " IF EXISTS" if expression.args.get("exists") else ""
            return f"{head} DROP {kind}{exists} {name}"
        if kind == "TAG":
            return f"{head} SET TAG {name} = {self.sql(expression, 'value')}"
        metric = expression.args.get("metric")
        if metric is None:
            return f"{head} SET ALIAS {name} = VERSION {self.sql(expression, 'version')}"
        source = expression.args.get("source")
        on = f" ON {self._relation_input_sql(source)}" if source is not None else ""
        return f"{head} SET ALIAS {name} = BEST BY {self._name_sql(metric)}{on}"

    def importmodel_sql(self, expression: ImportModel) -> str:
        head = "CREATE OR REPLACE MODEL" if expression.args.get("replace") else "IMPORT MODEL"
        exists = " IF NOT EXISTS" if expression.args.get("exists") else ""
        options = self._options_sql(expression)
        options = f" WITH ({options})" if options else ""
        query = expression.args.get("query")
        if query is not None:
            head = "CREATE OR REPLACE MODEL" if expression.args.get("replace") else "CREATE MODEL"
            items = expression.args.get("transform")
            transform = f" TRANSFORM ({', '.join(self.sql(i) for i in items)})" if items else ""
            return f"{head}{exists} {self.sql(expression, 'this')}{transform}{options} AS {self.sql(query)}"
        study = expression.args.get("study")
        if study is not None:
            trial = expression.args.get("trial")
            source = f"STUDY {self._name_sql(study)}" + (f" TRIAL {self.sql(trial)}" if trial is not None else "")
        elif expression.args.get("python"):
            source = f"PYTHON {self.sql(expression, 'source')}"
        else:
            source = self.sql(expression, "source")
        return f"{head}{exists} {self.sql(expression, 'this')} FROM {source}{options}"

    def dropmodel_sql(self, expression: DropModel) -> str:
        exists = " IF EXISTS" if expression.args.get("exists") else ""
        return f"DROP MODEL{exists} {self.sql(expression, 'this')}"

    def trustmodel_sql(self, expression: TrustModel) -> str:
        return f"TRUST MODEL {self.sql(expression, 'this')}"

    def showmodels_sql(self, expression: ShowModels) -> str:
        return "SHOW MODELS"

    def describemodel_sql(self, expression: DescribeModel) -> str:
        return f"DESCRIBE MODEL {self.sql(expression, 'this')}"

    def exportmodel_sql(self, expression: ExportModel) -> str:
        return f"EXPORT MODEL {self.sql(expression, 'this')} TO {self.sql(expression, 'target')}"

    def vacuummodels_sql(self, expression: VacuumModels) -> str:
        return "VACUUM MODELS"
