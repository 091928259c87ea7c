"""The serving statements of the dialect: their nodes, parser entries and generator methods::

    SERVE [ADD | REMOVE] item [, item ...] [ON [HOST 'host'] PORT n] [WITH (opt, ...)]
        item := PIPELINE name [VERSION n] [(opt, ...)] | MODEL name [VERSION n | ALIAS a] [(opt, ...)]
    STOP SERVER [ON PORT n]
    SHOW [MODELSQL] SERVERS
"""

from __future__ import annotations

import typing as t

from sqlglot import exp
from sqlglot.tokens import TokenType

from modelsql.sql.grammar import PIPELINE_NO_ALIAS, GrammarGenerator, GrammarParser
from modelsql.sql.registry import option_dict, part, statement

__all__ = ["ServeItem", "Serve", "StopServer", "ShowServers", "ServeParsing", "ServeGenerating"]


@part
class ServeItem(exp.Expression):
    """One thing ``SERVE`` serves: ``PIPELINE p [VERSION n] [(opt = v, ...)]`` or ``MODEL m [VERSION n | ALIAS a]
    ...`` (an alias serves the version it names when SERVE runs).

    Args:
        this: ``ModelRef`` (``pipeline`` true for a pipeline).
        options: list of ``exp.EQ`` (``reserved_threads``), or ``None``.
    """

    arg_types = {"this": True, "options": False}


@statement
class Serve(exp.Expression):
    """``SERVE [ADD | REMOVE] item [, item ...] [ON [HOST 'h'] PORT n] [WITH (opt = v, ...)]``.

    Starts an Open Inference Protocol server on ``host`` (default 127.0.0.1) and ``port``
    (default 8000) serving the items, or adds items to / removes them from a running one.

    Args:
        expressions: list of :class:`ServeItem`.
        action: ``"start"``, ``"add"`` or ``"remove"``.
        host: ``exp.Literal`` string, or ``None``.
        port: ``exp.Literal`` number or ``exp.Placeholder``, or ``None``.
        options: list of ``exp.EQ`` (``max_batch_size``, ``max_queue_delay_ms``, ...), or ``None``.
    """

    WORDS = (("SERVE",),)
    EXAMPLES = (
        'SERVE PIPELINE p VERSION 2 (reserved_threads = 2), MODEL m ON PORT 8100 WITH (max_batch_size = 32)',
        'SERVE ADD PIPELINE q ON PORT 8100',
        'SERVE REMOVE MODEL m',
    )
    arg_types = {"expressions": True, "action": False, "host": False, "port": False, "options": False}

    @property
    def option_values(self) -> dict[str, exp.Expression]:
        """Options keyed by lower-cased name (later duplicates win)."""
        return option_dict(self.args.get("options"))


@statement
class StopServer(exp.Expression):
    """``STOP SERVER [ON PORT n]`` (the only running server when no port is named).

    Args:
        port: ``exp.Literal`` number or ``exp.Placeholder``, or ``None``.
    """

    WORDS = (("STOP", "SERVER"),)
    EXAMPLES = (
        'STOP SERVER',
        'STOP SERVER ON PORT 8100',
    )
    arg_types = {"port": False}


@statement
class ShowServers(exp.Expression):
    """``SHOW SERVERS`` (or ``SHOW MODELSQL SERVERS``, as for :class:`ShowModels`): one row per thing each
    running server serves (the resident set)."""

    WORDS = (("SHOW", "SERVERS"), ("SHOW", "MODELSQL", "SERVERS"))
    EXAMPLES = (
        'SHOW SERVERS',
        'SHOW MODELSQL SERVERS',
    )
    arg_types: t.ClassVar[dict[str, bool]] = {}


class ServeParsing(GrammarParser):
    """Parser entries ``_parse_<key>(words)`` of the serving statements (the words consumed)."""

    def _parse_serve_item(self) -> ServeItem:
        pipeline = self._match_word("PIPELINE")
        if not pipeline and not self._match_word("MODEL"):
            self._fail("Expected PIPELINE <name> or MODEL <name> to serve")
        ref = self._parse_model_ref(allow_alias=not pipeline, no_alias=PIPELINE_NO_ALIAS if pipeline else None)
        if pipeline:
            ref.set("pipeline", True)
        options = None
        if self._match(TokenType.L_PAREN):
            options = self._parse_csv(self._parse_model_option)
            self._match_r_paren()
        return self.expression(ServeItem(this=ref, options=options or None))

    def _parse_port(self) -> exp.Expr | None:
        placeholder = self._parse_placeholder()
        if placeholder is not None:
            return placeholder
        if not (self._match(TokenType.NUMBER) and self._prev.text.isdigit()):
            self._fail("Expected a port number after PORT")
        return exp.Literal.number(self._prev.text)

    def _parse_serve(self, words: tuple[str, ...]) -> Serve:
        action = "add" if self._match_word("ADD") else "remove" if self._match_word("REMOVE") else "start"
        items = self._parse_csv(self._parse_serve_item)
        host = port = None
        if self._match(TokenType.ON):
            if self._match_word("HOST"):
                if not self._match(TokenType.STRING):
                    self._fail("Expected a quoted host address after HOST, e.g. HOST '127.0.0.1'")
                host = exp.Literal.string(self._prev.text)
            if not self._match_word("PORT"):
                self._fail("Expected PORT <n> after ON")
            port = self._parse_port()
        options = self._parse_with_options()
        return self.expression(Serve(expressions=items, action=action, host=host, port=port, options=options))

    def _parse_stopserver(self, words: tuple[str, ...]) -> StopServer:
        port = None
        if self._match(TokenType.ON):
            if not self._match_word("PORT"):
                self._fail("Expected PORT <n> after ON")
            port = self._parse_port()
        return self.expression(StopServer(port=port))

    def _parse_showservers(self, words: tuple[str, ...]) -> ShowServers:
        return self.expression(ShowServers())


class ServeGenerating(GrammarGenerator):
    """Generator methods ``<key>_sql`` of the serving statements."""

    def serveitem_sql(self, expression: ServeItem) -> str:
        word = "PIPELINE" if expression.this.args.get("pipeline") else "MODEL"
        options = self._options_sql(expression)
        return f"{word} {self.sql(expression, 'this')}" + (f" ({options})" if options else "")

    def serve_sql(self, expression: Serve) -> str:
        action = expression.args.get("action") or "start"
        head = "SERVE" if action == "start" else f"SERVE {action.upper()}"
        items = ", ".join(self.sql(i) for i in expression.expressions)
        where = ""
        if expression.args.get("port") is not None:
            host = expression.args.get("host")
            where = (f" ON HOST {self.sql(host)}" if host is not None else " ON") + f" PORT {self.sql(expression, 'port')}"
        options = self._options_sql(expression)
        return f"{head} {items}{where}" + (f" WITH ({options})" if options else "")

    def stopserver_sql(self, expression: StopServer) -> str:
        port = expression.args.get("port")
        return "STOP SERVER" + (f" ON PORT {self.sql(port)}" if port is not None else "")

    def showservers_sql(self, expression: ShowServers) -> str:
        return "SHOW SERVERS"
