"""What model statements bind to: small frozen nodes their handlers (:mod:`.statements`) carry out.

IMPORT / CREATE [OR REPLACE] MODEL, DROP MODEL, DESCRIBE MODEL and EXPORT MODEL.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from modelsql.catalog.entries import ModelVersion


@dataclass(frozen=True)
class CreateModel:
    """``IMPORT MODEL`` / ``CREATE [OR REPLACE] MODEL name FROM 'file' [WITH (...)]``."""

    name: str
    source: str
    replace: bool = False
    if_not_exists: bool = False
    features: Optional[tuple[str, ...]] = None
    options: tuple = ()


@dataclass(frozen=True)
class DropModelPlan:
    """``DROP MODEL [IF EXISTS] name [VERSION n]``."""

    name: str
    version: Optional[int] = None
    if_exists: bool = False


@dataclass(frozen=True)
class DescribeModelPlan:
    """``DESCRIBE MODEL name [VERSION n]``."""

    model: ModelVersion


@dataclass(frozen=True)
class ExportModelPlan:
    """``EXPORT MODEL name [VERSION n] TO 'file'``."""

    model: ModelVersion
    target: str
