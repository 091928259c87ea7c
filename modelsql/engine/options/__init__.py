"""Statement options: the declarative schema (:mod:`.schema`: :class:`Option`, :class:`OptionSet`, and reading
SQL values), every statement's declaration (:mod:`.declared`) and the documents generated from them
(:mod:`.docs`)."""

from modelsql.engine.options.schema import (Option, OptionSet, OptionValues, column_names, no_repeats, option_error,
                                            option_node, option_of, sql_text, uses_parameters, value)

__all__ = ["Option", "OptionSet", "OptionValues", "column_names", "no_repeats", "option_error", "option_node", "option_of",
           "sql_text", "uses_parameters", "value"]
