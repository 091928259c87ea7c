"""Trainable models, hyper-parameter studies, their trials and the stage trees they train in
(``modelsql.trainable_versions``, ``studies``, ``trials``, ``stages``; see :mod:`modelsql.catalog.schema`).

A stage (Hippo: Shin et al., VLDB 2022) trains epochs ``[first_epoch, end_epoch)`` of one model once,
from its parent stage's checkpoint, and checkpoints its end. Stages belong to a *tree* (the key of
what training depends on besides the hyper-parameters: the trainable version, the data, the seed), not
to a study, so a second study over the same tree reuses them. :class:`Studies` is reached as
``Catalog.studies``; it runs its SQL through :meth:`Catalog.query` and never begins or commits.
"""

from __future__ import annotations

import datetime as _dt
import json
from dataclasses import dataclass, fields
from typing import Any, Optional, Sequence

from modelsql import errors
from modelsql.catalog.owners import GRACE_SECONDS, Owner, owner_state, this_process
from modelsql.catalog.study_parameters import restored_parameters

__all__ = ["Studies", "Trainable", "StudyRow", "TrialRow", "StageRow"]


def _now() -> _dt.datetime:
    return _dt.datetime.now(_dt.timezone.utc)


@dataclass(frozen=True)
class Trainable:
    """One version of a trainable model (``CREATE MODEL m FROM PYTHON 'pkg.mod:factory'``).

    Attributes:
        name, version: as for models (lower-case name, versions from 1).
        factory: ``package.module:function``, called as ``f(in_features=F, n_outputs=K, **params)``.
        code_digest: SHA-256 of the factory module's source file at registration.
        options: the ``WITH (...)`` options, as (key, value) text pairs.
    """

    name: str
    version: int
    factory: str
    code_digest: str
    options: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class StudyRow:
    """One row of ``modelsql.studies`` (see the table's column comments)."""

    name: str
    model: str
    model_version: int
    algorithm: str
    metric: str
    mode: str
    max_epochs: int
    seed: int
    space: str
    options: str
    train_sql: str
    validate_sql: Optional[str]
    target: str
    tree: str
    definition: str
    status: str
    error: Optional[str] = None
    best_trial: Optional[int] = None
    best_metric: Optional[float] = None
    trials_done: int = 0
    epochs_trained: int = 0
    epochs_requested: int = 0
    checkpoint_bytes: int = 0
    owner_pid: Optional[int] = None
    owner_host: Optional[str] = None
    owner_start: Optional[str] = None
    heartbeat_at: Optional[_dt.datetime] = None

    @property
    def parameters(self) -> list:
        """The ``?`` values of the TUNE statement that made the study (its ON / VALIDATE ON read them), as kept in
        its options (:mod:`modelsql.catalog.study_parameters`); empty for none."""
        return restored_parameters(json.loads(self.options or "{}").get("parameters") or [])


@dataclass(frozen=True)
class TrialRow:
    """One row of ``modelsql.trials``: ``config`` and ``sequence`` are JSON text, ``metrics`` one per epoch."""

    study: str
    trial: int
    config: str
    sequence: str
    status: str
    epochs: int
    metrics: tuple[float, ...]
    metric: Optional[float]
    best_metric: Optional[float]
    stage: Optional[int]
    checkpoint: Optional[str]
    error: Optional[str] = None


def _trial_row(r: Sequence[Any]) -> TrialRow:
    """A ``modelsql.trials`` row (columns as ``_TRIAL_COLUMNS``) as a TrialRow, its metrics list as a tuple."""
    fields = list(r)
    fields[6] = tuple(fields[6])
    return TrialRow(*fields)


@dataclass(frozen=True)
class StageRow:
    """One row of ``modelsql.stages``: ``configuration`` and ``metrics`` are JSON lists, one entry per epoch."""

    tree: str
    stage: int
    parent: Optional[int]
    first_epoch: int
    end_epoch: int
    configuration: str
    metrics: Optional[str]
    status: str
    checkpoint: Optional[str]
    checkpoint_bytes: Optional[int]
    study: str
    worker: Optional[str] = None
    seconds: Optional[float] = None
    error: Optional[str] = None


_STUDY_COLUMNS = [f.name for f in fields(StudyRow)]
_TRIAL_COLUMNS = [f.name for f in fields(TrialRow)]
_STAGE_COLUMNS = [f.name for f in fields(StageRow)]


class Studies:
    """The trainables, studies, trials and stages of one :class:`~modelsql.catalog.Catalog`."""

    def __init__(self, catalog) -> None:
        self._catalog = catalog

    def _rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple]:
        return self._catalog.query(sql, params)

    def _write(self, sql: str, params: Sequence[Any] = ()) -> None:
        self._catalog.check_writable()
        self._rows(sql, params)

    # ------------------------------------------------------------- trainables

    def trainable(self, name: str, version: Optional[int] = None) -> Optional[Trainable]:
        """The trainable ``name`` (its latest version, or ``version``), or None when there is none."""
        if not self._catalog.present:
            return None
        sql = ("SELECT name, version, factory, code_digest, map_entries(options) FROM {s}.trainable_versions "
               "WHERE name = ?" + (" AND version = ?" if version is not None else "")
               + " ORDER BY version DESC LIMIT 1")
        rows = self._rows(sql, [name.lower()] + ([version] if version is not None else []))
        if not rows:
            return None
        n, v, factory, digest, options = rows[0]
        return Trainable(n, v, factory, digest, tuple((e["key"], e["value"]) for e in options))

    def add_trainable(self, trainable: Trainable) -> None:
        """Record one trainable version (the caller picked the next version number)."""
        self._write("INSERT INTO {s}.trainable_versions VALUES (?, ?, ?, ?, MAP(?::VARCHAR[], ?::VARCHAR[]), ?)",
                    [trainable.name, trainable.version, trainable.factory, trainable.code_digest,
                     [k for k, _ in trainable.options], [v for _, v in trainable.options], _now()])

    def drop_trainable(self, name: str) -> int:
        """Delete every version of trainable ``name``; returns how many there were."""
        n = self._rows("SELECT count(*) FROM {s}.trainable_versions WHERE name = ?", [name.lower()])[0][0]
        self._write("DELETE FROM {s}.trainable_versions WHERE name = ?", [name.lower()])
        return n

    # ---------------------------------------------------------------- studies

    def study(self, name: str) -> Optional[StudyRow]:
        """The study ``name``, or None."""
        if not self._catalog.present:
            return None
        rows = self._rows(f"SELECT {', '.join(_STUDY_COLUMNS)} FROM {{s}}.studies WHERE name = ?", [name.lower()])
        return StudyRow(*rows[0]) if rows else None

    def study_names(self) -> list[str]:
        """Every study's name, sorted."""
        if not self._catalog.present:
            return []
        return [r[0] for r in self._rows("SELECT name FROM {s}.studies ORDER BY name")]

    def put_study(self, row: StudyRow) -> None:
        """Insert or replace the row of study ``row.name``."""
        now = _now()
        created = self._rows("SELECT created_at FROM {s}.studies WHERE name = ?", [row.name])
        self._write("DELETE FROM {s}.studies WHERE name = ?", [row.name])
        values = [getattr(row, c) for c in _STUDY_COLUMNS]
        self._write(f"INSERT INTO {{s}}.studies ({', '.join(_STUDY_COLUMNS)}, created_at, updated_at) "
                    f"VALUES ({', '.join('?' * (len(values) + 2))})", values + [created[0][0] if created else now, now])

    def drop_study(self, name: str) -> Optional[set[str]]:
        """Delete study ``name`` and its trials; its stages stay in their tree while another study trains in it,
        else they go too (and the trees of its trial-based trials, which are its own). Returns the digests of
        the checkpoints the deleted rows named (the caller deletes the blobs nothing references any more), or
        None when there was no such study."""
        study = self.study(name)
        if study is None:
            return None
        name = name.lower()
        digests = {r[0] for r in self._rows("SELECT checkpoint FROM {s}.trials WHERE study = ? AND checkpoint IS NOT "
                                            "NULL", [name])}
        self._write("DELETE FROM {s}.trials WHERE study = ?", [name])
        self._write("DELETE FROM {s}.studies WHERE name = ?", [name])
        shared = self._rows("SELECT count(*) FROM {s}.studies WHERE tree = ?", [study.tree])[0][0]
        own = "tree LIKE ? ESCAPE '\\'" if shared else "(tree = ? OR tree LIKE ? ESCAPE '\\')"
        prefix = (study.tree + "/" + name + "/").replace("_", "\\_").replace("%", "\\%") + "%"
        params = [prefix] if shared else [study.tree, prefix]
        digests |= {r[0] for r in self._rows(f"SELECT checkpoint FROM {{s}}.stages WHERE {own} AND checkpoint IS NOT "
                                             "NULL", params)}
        self._write(f"DELETE FROM {{s}}.stages WHERE {own}", params)
        return digests

    def mark_interrupted(self, live: Optional[Sequence[str]] = None) -> int:
        """Studies left ``running`` by a process that died become ``interrupted``, their running stages
        ``interrupted`` and their running or pending trials ``stopped``: resumable (run the TUNE again),
        never running forever. A study whose owner cannot be checked from this host and sent no heartbeat
        for :data:`~modelsql.catalog.owners.GRACE_SECONDS` becomes ``failed`` (Optuna's heartbeat), its
        stages and trials likewise. The owner stays recorded; ``error`` says what was found.

        Args:
            live: the studies this process is running now (then a study this process owns but does not
                run is dead too), or None when unknown (the studies this process owns are left alone).

        Returns:
            the number of studies marked.
        """
        if not self._catalog.present or self._catalog.read_only:
            return 0
        me = this_process()
        found: dict[str, list[tuple[str, Optional[Owner], Any]]] = {"dead": [], "lost": []}
        for name, pid, host, start, beat in self._rows(
                "SELECT name, owner_pid, owner_host, owner_start, heartbeat_at FROM {s}.studies "
                "WHERE status = 'running'"):
            mine = pid == me.pid and host in (None, me.host) and (start or "") == me.start
            if mine:
                state = "dead" if live is not None and name not in {n.lower() for n in live} else "alive"
            else:
                state = owner_state(pid, host, start, beat)
            if state != "alive":
                found[state].append((name, Owner(pid, host, start) if pid is not None else None, beat))
        for state, status in (("dead", "interrupted"), ("lost", "failed")):
            for name, owner, beat in found[state]:
                self._end_run(name, status, _owner_gone(state, owner, beat))
        return len(found["dead"]) + len(found["lost"])

    def _end_run(self, study: str, status: str, error: str) -> None:
        now = _now()
        self._write("UPDATE {s}.studies SET status = ?, error = ?, updated_at = ? WHERE name = ?",
                    [status, error, now, study])
        self._write("UPDATE {s}.trials SET status = ?, updated_at = ? WHERE status IN ('running', 'pending') "
                    "AND study = ?", ["stopped" if status == "interrupted" else "failed", now, study])
        self._write("UPDATE {s}.stages SET status = ?, finished_at = ?, error = ? WHERE status = 'running' "
                    "AND study = ?", [status, now, error, study])

    def heartbeat(self, study: str, pid: int) -> None:
        """Record that the TUNE of ``study`` in process ``pid`` is alive (``heartbeat_at`` = now)."""
        self._write("UPDATE {s}.studies SET heartbeat_at = ? WHERE name = ? AND owner_pid = ? AND status = 'running'",
                    [_now(), study.lower(), pid])

    def interrupt_stages(self, study: str) -> None:
        """Mark the stages ``study`` left ``running`` (their results will never be recorded) ``interrupted``."""
        self._write("UPDATE {s}.stages SET status = 'interrupted', finished_at = ? WHERE study = ? "
                    "AND status = 'running'", [_now(), study.lower()])

    # ----------------------------------------------------------------- trials

    def trials(self, study: str) -> list[TrialRow]:
        """The trials of ``study``, by trial number."""
        rows = self._rows(f"SELECT {', '.join(_TRIAL_COLUMNS)} FROM {{s}}.trials WHERE study = ? ORDER BY trial",
                          [study.lower()])
        return [_trial_row(r) for r in rows]

    def put_trial(self, row: TrialRow) -> None:
        """Insert or replace one trial."""
        self.put_trials([row])

    def put_trials(self, rows: Sequence[TrialRow]) -> None:
        """Insert or replace trials of one study (two statements, however many)."""
        if not rows:
            return
        study = rows[0].study
        assert all(r.study == study for r in rows)  # one study's trials per call
        self._write("DELETE FROM {s}.trials WHERE study = ? AND list_contains(?::BIGINT[], trial)",
                    [study, [r.trial for r in rows]])
        now, values, width = _now(), [], len(_TRIAL_COLUMNS) + 1
        for row in rows:
            one = [getattr(row, c) for c in _TRIAL_COLUMNS]
            one[_TRIAL_COLUMNS.index("metrics")] = list(row.metrics)
            values += one + [now]
        marks = ", ".join([f"({', '.join('?' * width)})"] * len(rows))
        self._write(f"INSERT INTO {{s}}.trials ({', '.join(_TRIAL_COLUMNS)}, updated_at) VALUES {marks}", values)

    # ----------------------------------------------------------------- stages

    def stages(self, tree: str, status: str = "done") -> list[StageRow]:
        """The stages of ``tree`` with ``status``, parents before children (by stage number)."""
        if not self._catalog.present:
            return []
        rows = self._rows(f"SELECT {', '.join(_STAGE_COLUMNS)} FROM {{s}}.stages WHERE tree = ? AND status = ? "
                          "ORDER BY stage", [tree, status])
        return [StageRow(*r) for r in rows]

    def next_stage(self, tree: str) -> int:
        """A stage number not yet used in ``tree``."""
        return self._rows("SELECT coalesce(max(stage), -1) + 1 FROM {s}.stages WHERE tree = ?", [tree])[0][0]

    def put_stage(self, row: StageRow) -> None:
        """Insert or replace one stage; ``started_at`` is kept from an earlier row of it, ``finished_at`` set
        when the status is final."""
        self._catalog.check_writable()
        started = self._rows("DELETE FROM {s}.stages WHERE tree = ? AND stage = ? RETURNING started_at",
                             [row.tree, row.stage])
        now = _now()
        values = [getattr(row, c) for c in _STAGE_COLUMNS]
        final = now if row.status != "running" else None
        self._write(f"INSERT INTO {{s}}.stages ({', '.join(_STAGE_COLUMNS)}, started_at, finished_at) "
                    f"VALUES ({', '.join('?' * (len(values) + 2))})",
                    values + [started[0][0] if started else now, final])

    def epoch_seconds(self, tree: str) -> Optional[float]:
        """Measured seconds per epoch of training in ``tree`` (its done stages), or None before any."""
        if not self._catalog.present:
            return None
        row = self._rows("SELECT sum(seconds), sum(end_epoch - first_epoch) FROM {s}.stages WHERE tree = ? "
                         "AND status = 'done' AND seconds > 0", [tree])[0]
        return row[0] / row[1] if row[0] and row[1] else None

    def forget_checkpoints(self, tree: str, stages: Sequence[int]) -> None:
        """Set the checkpoint of ``stages`` to NULL (their blobs are collected by the caller / VACUUM)."""
        if stages:
            self._write("UPDATE {s}.stages SET checkpoint = NULL, checkpoint_bytes = NULL "
                        "WHERE tree = ? AND list_contains(?::BIGINT[], stage)", [tree, list(stages)])

    def live_trial_checkpoints(self) -> set[str]:
        """Digests of the checkpoints trials of every study reference, but pruned and failed trials' (one
        statement, however many studies the catalog holds)."""
        if not self._catalog.present:
            return set()
        return {r[0] for r in self._rows("SELECT DISTINCT checkpoint FROM {s}.trials WHERE checkpoint <> '' "
                                         "AND status NOT IN ('pruned', 'failed')")}

    def checkpoint_digests(self) -> set[str]:
        """Digests of every checkpoint a stage or a trial references."""
        if not self._catalog.present:
            return set()
        return {r[0] for r in self._rows("SELECT checkpoint FROM {s}.stages WHERE checkpoint IS NOT NULL UNION "
                                         "SELECT checkpoint FROM {s}.trials WHERE checkpoint IS NOT NULL")}

    def not_found(self, name: str) -> errors.ProgrammingError:
        """The error for a study that does not exist, listing the ones that do."""
        names = self.study_names()
        known = ("Studies: " + ", ".join(names) + ".") if names else "There are no studies."
        return errors.ProgrammingError(f'Study "{name}" does not exist. {known}', code="study_not_found")


def _owner_gone(state: str, owner: Optional[Owner], beat) -> str:
    """The ``error`` of a study whose owner died (``dead``) or was lost (``lost``)."""
    who = "its process" if owner is None else f"its process {owner.pid} on {owner.host or 'this host'}"
    if state == "dead":
        return f"{who} ended without finishing it (killed?); run the TUNE statement again to resume it"
    since = "never" if beat is None else f"last at {beat.isoformat(timespec='seconds')}"
    return (f"{who} sent no heartbeat for over {GRACE_SECONDS:g} s ({since}); run the TUNE statement again to "
            "resume it")
