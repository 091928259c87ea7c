"""Serving statements of the dialect: parser entries and generator methods (mixed into
:class:`~modelsql.sql.dialect.ModelSQLParser` and :class:`~modelsql.sql.dialect.ModelSQLGenerator`)::

    SERVE [ADD | REMOVE] item [, item ...] [ON [HOST 'host'] PORT n] [WITH (opt, ...)]
        item := PIPELINE name [VERSION n] [(opt, ...)] | MODEL name [VERSION n] [(opt, ...)]
    STOP SERVER [ON PORT n]
    SHOW SERVERS
"""

from __future__ import annotations

from sqlglot import exp
from sqlglot.tokens import TokenType

from modelsql.sql.nodes import Serve, ServeItem, ShowServers, StopServer

__all__ = ["ServeParsing", "ServeGenerating"]


class ServeParsing:
    """Parser entries ``_parse_<key>(words)`` of the serving statements."""

    def _parse_serve_item(self) -> ServeItem:
        pipeline = self._match_word("PIPELINE")
        if not pipeline and not self._match_word("MODEL"):
            self.raise_error("Expected PIPELINE <name> or MODEL <name> to serve")
        ref = self._parse_model_ref()
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
            self.raise_error("Expected a port number after PORT")
        return exp.Literal.number(self._prev.text)

    def _parse_serve(self, words: tuple[str, ...]) -> Serve:
        action = "add" if self._match_word("ADD") else "remove" if self._match_word("REMOVE") else "start"
        items = self._parse_csv(self._parse_serve_item)
        host = port = None
        if self._match(TokenType.ON):
            if self._match_word("HOST"):
                if not self._match(TokenType.STRING):
                    self.raise_error("Expected a quoted host address after HOST, e.g. HOST '127.0.0.1'")
                host = exp.Literal.string(self._prev.text)
            if not self._match_word("PORT"):
                self.raise_error("Expected PORT <n> after ON")
            port = self._parse_port()
        options = self._parse_with_options()
        return self.expression(Serve(expressions=items, action=action, host=host, port=port, options=options))

    def _parse_stopserver(self, words: tuple[str, ...]) -> StopServer:
        port = None
        if self._match(TokenType.ON):
            if not self._match_word("PORT"):
                self.raise_error("Expected PORT <n> after ON")
            port = self._parse_port()
        return self.expression(StopServer(port=port))

    def _parse_showservers(self, words: tuple[str, ...]) -> ShowServers:
        return self.expression(ShowServers())


class ServeGenerating:
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
