"""What pipeline statements bind to: small frozen nodes their handlers (:mod:`.statements`) carry out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class StepSpec:
    """One step as ``CREATE PIPELINE`` names it: a model (its latest version unless pinned), and a step name."""

    model: str
    version: Optional[int] = None
    name: Optional[str] = None


@dataclass(frozen=True)
class CreatePipelinePlan:
    """``CREATE [OR REPLACE] PIPELINE [IF NOT EXISTS] p AS (step, ...) [WITH (...)]``."""

    name: str
    steps: tuple[StepSpec, ...]
    replace: bool = False
    if_not_exists: bool = False
    options: tuple = ()
    source: str = "CREATE PIPELINE"


@dataclass(frozen=True)
class DropPipelinePlan:
    """``DROP PIPELINE [IF EXISTS] p [VERSION n]``."""

    name: str
    version: Optional[int] = None
    if_exists: bool = False
