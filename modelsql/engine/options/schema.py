"""The option schema: a statement's ``WITH (...)`` options (PREDICT's named arguments) declared once, as an
:class:`OptionSet` of :class:`Option` (name, type, default, range or choices, doc), and read by it.

:meth:`OptionSet.parse` is every statement's option reader: an option written twice is ``duplicate_option``,
an unknown one ``unknown_option`` (with a "did you mean" and the options there are), a value of the wrong
type, out of its range or not among its choices ``invalid_option`` (naming the statement, the option, what it
must be and the value given); the defaults are filled in. Each error's ``option`` attribute names the option,
so a statement can point at it in the SQL. What is left to a statement is what one option alone cannot say:
checks across options, against the data or the machine. The same declarations render the documentation
(:mod:`.docs`: ``docs/options.md``, README's PREDICT table, the shell's ``.help``).

Types (``Option.type``): ``int``, ``number`` (int or float; read as float), ``bool``, ``text``, ``choice``
(one of ``choices``, case-insensitive, read lower-cased), ``split`` (one of ``choices``, or a number > 0 and
< 1), ``names`` (column names: ``(a, b)``, one name, or
``'a, b'``; at least one, none twice), ``device`` (``'auto'``, ``'cpu'``, ``'cuda'``, ``'cuda:N'``, read as
:func:`modelsql.operators.backends.devices.parse` normalises it) and ``example`` (a ``'package.module:name'``
reference, read as text, or a table name, read as ``("table", name)``). ``many=True``: one value or a
parenthesised list of them, each once, read as a tuple. SQL NULL is no option's value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Optional, Sequence, Union

from sqlglot import exp

from modelsql.errors import NotSupportedError, ProgrammingError, did_you_mean
from modelsql.operators.backends import devices

__all__ = ["TYPES", "Option", "OptionSet", "OptionValues", "value", "no_repeats", "uses_parameters",
           "column_names", "option_error", "sql_text"]

TYPES = {"int": "integer", "number": "number", "bool": "boolean", "text": "text", "choice": "choice",
         "names": "column names", "device": "device", "example": "reference or table",
         "label": "class label", "split": "split method or fraction"}
"""Option types and how the documentation names each."""


# ---------------------------------------------------------------- reading SQL values


def value(node: exp.Expression, params: list) -> Any:
    """Python value of an option / source expression (literals, tuples, names, ``$k`` parameters)."""
    if node is None or isinstance(node, exp.Null):
        return None
    if isinstance(node, exp.Placeholder):
        return params[int(node.this) - 1]
    if isinstance(node, exp.Boolean):
        return bool(node.this)
    if isinstance(node, exp.Neg):
        return -value(node.this, params)
    if isinstance(node, exp.Literal):
        if node.is_string:
            return node.this
        text = node.this
        try:
            return int(text)
        except ValueError:
            return float(text)
    if isinstance(node, exp.Tuple):
        return tuple(value(e, params) for e in node.expressions)
    if isinstance(node, (exp.Identifier, exp.Column)):
        return node.name
    return node.sql()


def no_repeats(options, where: str) -> None:
    """Refuse an option written twice (the second would silently win).

    Raises:
        ProgrammingError: code ``"duplicate_option"``.
    """
    seen: set[str] = set()
    for o in options or []:
        key = o.this.name.lower()
        if key in seen:
            err = ProgrammingError(f'{where}: option "{key}" is given twice.', code="duplicate_option")
            err.option = key
            raise err
        seen.add(key)


def uses_parameters(options) -> bool:
    """Whether any option value is a ``$k`` parameter (a plan over it depends on the values)."""
    return any(o.find(exp.Placeholder) is not None for o in options or [])


def sql_text(v: Any) -> str:
    """A value as SQL writes it, for messages: NULL, TRUE, 'text', 3, (1, 2)."""
    if v is None:
        return "NULL"
    if isinstance(v, bool):
        return str(v).upper()
    if isinstance(v, str):
        return "'" + v.replace("'", "''") + "'"
    if isinstance(v, (tuple, list)):
        return "(" + ", ".join(sql_text(x) for x in v) + ")"
    return repr(v)


def option_error(key: str, message: str, code: str = "invalid_option") -> ProgrammingError:
    """A ProgrammingError about option ``key`` (its ``option`` attribute names it, so the statement's error
    can point at it in the SQL)."""
    err = ProgrammingError(message, code=code)
    err.option = key
    return err


def option_node(options: Optional[Sequence[exp.Expression]], key: Optional[str], *, last: bool = False
                ) -> Optional[exp.Expression]:
    """The ``key = value`` (or ``key => value``) item of a statement's ``options`` naming ``key``
    (case-insensitive; the last so named with ``last``): what an error about option ``key`` points at in the SQL;
    None when not written."""
    if key is None:
        return None
    named = [o for o in options or [] if o.this is not None and o.this.name.lower() == key.lower()]
    return (named[-1] if last else named[0]) if named else None


def option_of(options: Optional[Sequence[exp.Expression]], err: Exception) -> Optional[exp.Expression]:
    """The option item the error ``err`` is about (its ``option``; an option given twice: the repeat)."""
    return option_node(options, getattr(err, "option", None), last=getattr(err, "code", None) == "duplicate_option")


def column_names(raw: Any, key: str, where: str) -> tuple[str, ...]:
    """Column names (``features``, ``outputs``): a name, ``'a, b'`` or a tuple of names; at least one, each
    non-empty text, none twice (case-insensitive, as columns are matched).

    Raises:
        ProgrammingError: ``invalid_option`` naming the option and the offending entry.
    """
    names = tuple(n.strip() for n in raw.split(",")) if isinstance(raw, str) else raw
    if not isinstance(names, (tuple, list)) or not names or not all(isinstance(n, str) and n.strip() for n in names):
        shown = "an empty list" if isinstance(raw, (tuple, list)) and not raw else sql_text(raw)  # () or []
        raise option_error(key, f"{where} option {key} must name columns, e.g. {key} = (a, b), not {shown}.")
    seen: set[str] = set()
    for n in names:
        if n.lower() in seen:
            raise option_error(key, f'{where} option {key} names column "{n}" twice; each column feeds one position.')
        seen.add(n.lower())
    return tuple(names)


# ---------------------------------------------------------------- the schema


def _number_text(v: float) -> str:
    return f"{int(v):,}" if float(v).is_integer() else f"{v:g}"


@dataclass(frozen=True)
class Option:
    """One option of a statement.

    Attributes:
        name: lower case, as written in ``WITH (name = value)``.
        type: one of :data:`TYPES`.
        default: the value when the option is not given (None: not set; the statement decides).
        doc: what it does (Markdown, one paragraph; links are README anchors ``(#...)``).
        choices: the values of a ``choice`` option.
        min, max: the range of an ``int`` / ``number`` option (inclusive unless ``min_open`` / ``max_open``).
        many: one value or a list of distinct values (read as a tuple).
        default_doc: how the documentation says the default, when it is not a plain value
            ("the machine's cores").
    """

    name: str
    type: str
    default: Any = None
    doc: str = ""
    choices: Optional[tuple[str, ...]] = None
    min: Optional[float] = None
    max: Optional[float] = None
    min_open: bool = False
    max_open: bool = False
    many: bool = False
    default_doc: Optional[str] = None

    def __post_init__(self) -> None:
        if self.type not in TYPES:
            raise ValueError(f"option {self.name}: unknown type {self.type!r}")
        if (self.type in ("choice", "split")) != (self.choices is not None):
            raise ValueError(f"option {self.name}: choices go with type 'choice' or 'split'")
        if (self.min is not None or self.max is not None) and self.type not in ("int", "number"):
            raise ValueError(f"option {self.name}: a range needs type 'int' or 'number'")

    # -- reading ------------------------------------------------------------------------

    def read(self, node: exp.Expression, params: list) -> Any:
        """The Python value of ``node`` as this option reads it (before :meth:`check`)."""
        if self.type == "example" and isinstance(node, (exp.Identifier, exp.Column)):
            return ("table", node.name)
        return value(node, params)

    def check(self, raw: Any, where: str) -> Any:
        """``raw`` checked and normalised.

        Raises:
            ProgrammingError: ``invalid_option`` (its ``option`` attribute is this option's name).
        """
        if self.type == "names":
            return column_names(raw, self.name, where)
        if not self.many:
            ok, out = self._one(raw)
        else:
            items = tuple(raw) if isinstance(raw, (tuple, list)) else (raw,)
            read = [self._one(v) for v in items]
            out = tuple(v for _, v in read)
            ok = bool(items) and all(k for k, _ in read) and len(set(out)) == len(out)
        if not ok:
            hint = did_you_mean(raw, self.choices) if isinstance(raw, str) and self.choices else ""
            raise option_error(self.name, f"{where} option {self.name} must {self.expects()}, not "
                                          f"{sql_text(raw)}.{hint}")
        return out

    def _one(self, v: Any) -> tuple[bool, Any]:
        """(whether ``v`` is a value of this type in range, the value normalised)."""
        if v is None:
            return False, None
        t = self.type
        if t == "int":
            return (isinstance(v, int) and not isinstance(v, bool) and self._in_range(v)), v
        if t == "number":
            ok = isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and self._in_range(v)
            return ok, float(v) if ok else v
        if t == "bool":
            return isinstance(v, bool), v
        if t == "text":
            return isinstance(v, str), v
        if t == "choice":
            ok = isinstance(v, str) and v.lower() in (self.choices or ())
            return ok, v.lower() if ok else v
        if t == "device":
            try:
                return True, devices.parse(v, "")
            except ProgrammingError:
                return False, v
        if t == "example":
            return isinstance(v, str) or (isinstance(v, tuple) and v[:1] == ("table",)), v
        if t == "label":
            return isinstance(v, (int, str, bool)), v
        if t == "split":
            if isinstance(v, str):
                ok = v.lower() in (self.choices or ())
                return ok, v.lower() if ok else v
            return isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < 1, v
        raise AssertionError(t)  # pragma: no cover - __post_init__ checked the type

    def _in_range(self, v: float) -> bool:
        low = self.min is None or (v > self.min if self.min_open else v >= self.min)
        high = self.max is None or (v < self.max if self.max_open else v <= self.max)
        return low and high

    # -- describing ---------------------------------------------------------------------

    def bounds(self) -> str:
        """The range in words: ``from 1 to 64``, ``>= 0``, ``> 0 and < 1``; empty without one."""
        if self.min is not None and self.max is not None and not (self.min_open or self.max_open):
            return f"from {_number_text(self.min)} to {_number_text(self.max)}"
        parts = []
        if self.min is not None:
            parts.append(f"{'>' if self.min_open else '>='} {_number_text(self.min)}")
        if self.max is not None:
            parts.append(f"{'<' if self.max_open else '<='} {_number_text(self.max)}")
        return " and ".join(parts)

    def allowed(self) -> str:
        """The values this option takes, in words (the documentation's "values" column, messages)."""
        if self.type == "choice":
            return ", ".join(f"'{c}'" for c in self.choices or ())
        if self.type == "split":
            return ", ".join(f"'{c}'" for c in self.choices or ()) + ", or a fraction > 0 and < 1"
        if self.type == "device":
            return ", ".join(f"'{c}'" for c in devices.DEVICE_CHOICES)
        if self.type == "bool":
            return "true, false"
        if self.type == "names":
            return "(a, b, ...)"
        if self.type == "example":
            return "'package.module:name', or a table"
        return self.bounds() or ("any text" if self.type == "text" else "")

    def expects(self) -> str:
        """What a value must be, after "must" in a message: ``be an integer from 1 to 64``."""
        t, many = self.type, self.many
        if t in ("choice", "device"):
            what = f"one or more of {self.allowed()}, each once" if many else f"one of {self.allowed()}"
        elif t in ("int", "number"):
            noun = ("integers" if many else "an integer") if t == "int" else ("numbers" if many else "a number")
            what = " ".join(filter(None, (noun, self.bounds()))) + (", each once" if many else "")
        elif t == "bool":
            what = "true or false"
        elif t == "example":
            what = "a reference 'package.module:name' or a table name"
        elif t == "label":
            what = "a class label (an integer, a string or true / false)"
        elif t == "split":
            what = f"one of {self.allowed()}"
        else:
            what = "text"
        return f"be {what}"

    def type_doc(self) -> str:
        """The type as the documentation names it (``list of integers`` for ``many``)."""
        name = TYPES[self.type]
        return f"list of {name}s" if self.many and not name.endswith("s") else name

    def default_text(self) -> str:
        """The default as the documentation writes it."""
        if self.default_doc is not None:
            return self.default_doc
        return "none" if self.default is None else sql_text(self.default).lower() if isinstance(self.default, bool) \
            else sql_text(self.default)


class OptionValues(dict):
    """The options of one statement, defaults filled in: ``{name: value}``.

    Attributes:
        given: the names written in the statement.
        rest: options passed through unchecked (:meth:`OptionSet.parse`'s ``extra``), ``{name: value}``.
    """

    given: frozenset = frozenset()
    rest: dict = {}


class OptionSet:
    """A statement's options, declared once: read by :meth:`parse`, documented by :mod:`.docs`.

    Args:
        statement: how the documentation heads it (``"PREDICT"``, ``"PROFILE MODEL"``).
        options: its :class:`Option`\\s, in the documentation's order.
        doc: one paragraph the documentation puts before the table.
        parameters: whether a value may be a ``?`` / ``$k`` parameter (TUNE's and FINETUNE's may not: a study
            records its definition).
        node: the SQL node whose options these are (a class of :data:`modelsql.sql.registry.MODEL_NODES`:
            a statement, or a part such as ``PredictTable``); the statement reference and the recipe test
            find a statement's options by it.
    """

    def __init__(self, statement: str, *options: Option, doc: str = "", parameters: bool = True,
                 node: Optional[type] = None) -> None:
        self.statement = statement
        self.node = node
        self.options = options
        self.doc = doc
        self.parameters = parameters
        self.by_name = {o.name: o for o in options}
        if len(self.by_name) != len(options):
            raise ValueError(f"{statement}: an option is declared twice")

    def __getitem__(self, name: str) -> Option:
        return self.by_name[name]

    def __contains__(self, name: object) -> bool:
        return name in self.by_name

    def __iter__(self):
        return iter(self.options)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.by_name)

    def defaults(self) -> dict[str, Any]:
        return {o.name: o.default for o in self.options}

    def parse(self, given: Union[exp.Expression, Mapping[str, Any], None], params: Sequence = (), *,
              where: Optional[str] = None, extra: Iterable[str] = ()) -> OptionValues:
        """The options of a statement, checked, with the defaults of those not given.

        Args:
            given: the statement node (its ``options``: a list of ``name = value``), or ``{name: value}``
                already read (names case-insensitive).
            params: the statement's parameter values.
            where: how messages name the statement (``"PROFILE MODEL m"``); default :attr:`statement`.
            extra: more names accepted, passed through unchecked in ``.rest`` (TUNE's algorithm's options).

        Raises:
            ProgrammingError: ``duplicate_option``, ``unknown_option``, ``invalid_option`` (see the module).
            NotSupportedError: ``parameter_not_supported`` (a parameter where :attr:`parameters` is False).
        """
        where = where or self.statement
        extra = tuple(e.lower() for e in extra)
        raw = self._read(given, params, where)
        known = [*self.names, *(e for e in extra if e not in self.by_name)]
        unknown = [k for k in raw if k not in known]
        if unknown:
            raise option_error(unknown[0], f'{where}: unknown option "{unknown[0]}".{did_you_mean(unknown[0], known)} '
                                           f"Options are: {', '.join(known)}.", code="unknown_option")
        out = OptionValues((o.name, o.check(raw[o.name], where) if o.name in raw else o.default)
                           for o in self.options)
        out.given = frozenset(raw)
        out.rest = {k: v for k, v in raw.items() if k not in self.by_name}
        return out

    def _read(self, given, params: Sequence, where: str) -> dict[str, Any]:
        if given is None:
            return {}
        if isinstance(given, Mapping):
            return {str(k).lower(): v for k, v in given.items()}
        items = given.args.get("options") if isinstance(given, exp.Expression) else given
        no_repeats(items, where)
        out = {}
        for o in items or []:
            key, node = o.this.name.lower(), o.expression
            if not self.parameters and node.find(exp.Placeholder) is not None:
                err = NotSupportedError(f"{where}: a parameter (?) in option {key!r}: parameters are supported only "
                                        "inside ON (query) and VALIDATE ON (query); write the value itself",
                                        code="parameter_not_supported")
                err.option = key
                raise err
            option = self.by_name.get(key)
            out[key] = option.read(node, list(params)) if option is not None else value(node, list(params))
        return out
