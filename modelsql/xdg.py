"""Where modelsql keeps files outside a database, by the XDG Base Directory Specification.

``$XDG_CACHE_HOME`` (by default ``~/.cache``) holds caches (the empty-catalog template, TVM's name of this
machine's CPU); ``$XDG_CONFIG_HOME`` (by default ``~/.config``) the user's signing key. As the specification
says, a value that is not an absolute path is ignored.
"""

from __future__ import annotations

import os

__all__ = ["cache_home", "config_home"]


def _base(variable: str, default: str) -> str:
    value = os.environ.get(variable, "")
    return value if os.path.isabs(value) else os.path.join(os.path.expanduser("~"), default)


def cache_home() -> str:
    """``$XDG_CACHE_HOME`` when it is an absolute path, else ``~/.cache``."""
    return _base("XDG_CACHE_HOME", ".cache")


def config_home() -> str:
    """``$XDG_CONFIG_HOME`` when it is an absolute path, else ``~/.config``."""
    return _base("XDG_CONFIG_HOME", ".config")
