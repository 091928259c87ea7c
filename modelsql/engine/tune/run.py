"""Running a study: the algorithm's rounds, trained as stage trees, with the catalog as the search plan.

Each round: the algorithm asks for requests (trials to train to some epoch); rule
``tune_stage_tree`` merges them into the tree of everything trained before and cuts the untrained
epochs into tasks; the executor trains them, critical path first, over its workers; every finished
stage is committed at once (its checkpoint in the store first, then its row), so another connection
sees progress and a killed process loses only the stages that were running. Then each request's
per-epoch metrics, read from its path in the tree, are told to the algorithm in trial order.

Resuming is replaying: the algorithm is deterministic given its seed and what it is told, and every
epoch already trained has its metrics in the catalog, so a re-run of the study asks for the same
requests and trains only what was not finished (Hippo, Shin et al., VLDB 2022, section 5: the stage
tree as the study's persistent search plan).

While it runs, the study's row names its owner (pid, host, the process's start identity) and a thread
records a heartbeat every few seconds (:mod:`modelsql.catalog.owners`), so a study whose process was
killed is shown ``interrupted`` by the next connection that opens the catalog, not ``running`` for ever.
"""

from __future__ import annotations

import concurrent.futures as cf
import errno
import json
import os
import threading
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable, Mapping, Optional

from modelsql.catalog import Catalog
from modelsql.catalog.owners import HEARTBEAT_SECONDS
from modelsql.catalog.studies import StageRow, StudyRow, TrialRow
from modelsql import errors as errors_module
from modelsql.errors import OperationalError
from modelsql.progress import tune_meter
from modelsql.tuning.algorithms import Request
from modelsql.tuning.executor import TaskOutcome, TaskSpec
from modelsql.tuning.stage_tree import EpochHP, Node, StageTree
from modelsql.engine.tune.round_plan import RoundPlan, StageTask
from modelsql.engine.tune.running import owner_fields
from modelsql.engine.tune.stage_tree import tune_stage_tree
from modelsql.engine.tune.spec import TRAINING_NAMES, StudySpec, frozen

if TYPE_CHECKING:
    from modelsql.engine.session import Session

__all__ = ["StudyRun", "hp_json", "hp_from_json", "load_tree"]

FLUSH_SECONDS = 1.0
"""Longest a told trial's row waits in memory while rounds train nothing (other connections read trials live)."""


def hp_json(sequence) -> str:
    """JSON text of per-epoch hyper-parameters: a list of objects."""
    return json.dumps([dict(hp) for hp in sequence])


def hp_from_json(text: str) -> tuple[EpochHP, ...]:
    """The per-epoch hyper-parameters of :func:`hp_json` text."""
    return tuple(tuple(sorted((k, frozen(v)) for k, v in hp.items())) for hp in json.loads(text))


def load_tree(catalog, key: str) -> StageTree:
    """The stage tree ``key`` as its done stages in the catalog describe it."""
    tree = StageTree(key)
    for row in catalog.studies.stages(key):
        tree.record_stage(row.stage, row.parent, hp_from_json(row.configuration), json.loads(row.metrics),
                          row.checkpoint, row.checkpoint_bytes)
    return tree


@dataclass
class _Trial:
    request: Request
    previous: int = 0          # epochs it had before this round
    status: str = "pending"
    error: Optional[str] = None


class StudyRun:
    """One run (or resumption) of a study.

    Args:
        session: the :class:`~modelsql.engine.session.Session` owning the catalog connection.
        spec: the bound study.
        executor: a :class:`~modelsql.tuning.executor.LocalExecutor` or a Ray executor.
        progress: the progress hook (:mod:`modelsql.progress`, kind ``tune``: ``trials_done``, ``trials``,
            ``best_trial``, ``best_metric``, ``epochs_trained``, ``epochs_requested``), called after every stage
            and round and when the run ends, or None.
    """

    def __init__(self, session: Session, spec: StudySpec, executor, progress: Optional[Callable[[dict], None]] = None):
        self.session, self.spec, self.executor, self.progress = session, spec, executor, progress
        self.meter = tune_meter(progress, spec.name)
        self.catalog, self.store = session.catalog, session.store
        self.trees: dict[str, StageTree] = {}
        self.next_stage: dict[str, int] = {}
        self.trials: dict[int, _Trial] = {}
        self.trained = 0
        self.requested = 0
        self.running: dict[cf.Future, tuple] = {}
        self.submitted = 0
        self.node_errors: dict[int, str] = {}
        """``{id(node): error}`` of the epochs whose stage failed this run."""
        self.failures: dict[str, tuple[str, str, str]] = {}
        """``{error text: (class name, code, message)}`` of the stages that failed this run."""
        self.dirty: set[int] = set()
        """Trials whose row is not written yet (:meth:`_flush_trials`)."""
        self.flushed = time.monotonic()
        self.counted = 0
        """Epochs of ``trained`` already added to the study row's ``epochs_trained``."""
        self.data = executor.put_data(spec.data, spec.trainable.code_digest)
        self.deadline = time.monotonic() + spec.time_budget_s if spec.time_budget_s else None

    # ----------------------------------------------------------------- trees

    def tree_key(self, trial: int) -> str:
        """The tree a trial trains in: the study's, or (trial-based execution) one of its own."""
        return self.spec.tree if self.spec.sharing else f"{self.spec.tree}/{self.spec.name}/trial-{trial}"

    def tree(self, key: str) -> StageTree:
        """The stage tree ``key``, loaded from its done stages on first use."""
        tree = self.trees.get(key)
        if tree is None:
            tree = self.trees[key] = load_tree(self.catalog, key)
            self.next_stage[key] = self.catalog.studies.next_stage(key)
        return tree

    def _target(self, request: Request) -> Node:
        tree = self.tree(self.tree_key(request.trial))
        if request.donor is not None and not self.spec.sharing:
            self._copy_from_donor(tree, request)
        return tree.insert(request.sequence)

    def _copy_from_donor(self, tree: StageTree, request: Request) -> None:
        """Trial-based PBT: an exploit copies the donor's checkpoint (as Ray Tune does), recorded as a stage
        of the trial's own tree that trained nothing."""
        assert request.donor is not None  # _target copies for an exploit only
        prefix = request.sequence[:request.branch_epoch]
        found = tree.find(prefix)
        if found is not None and found.restorable:
            return
        donor = self.tree(self.tree_key(request.donor)).find(prefix)
        if donor is None or not donor.restorable:
            return  # the donor's state is gone: the trial trains the prefix itself
        stage = self._new_stage(tree.key)
        metrics = [_trained_metrics(n) for n in donor.path()]
        tree.record_stage(stage, None, prefix, metrics, donor.checkpoint, donor.checkpoint_bytes)
        self._put_stage(StageRow(tree.key, stage, None, 0, len(prefix), hp_json(prefix), json.dumps(metrics), "done",
                                 donor.checkpoint, donor.checkpoint_bytes, self.spec.name, "copy", 0.0))

    def _new_stage(self, key: str) -> int:
        number = self.next_stage[key]
        self.next_stage[key] = number + 1
        return number

    # ---------------------------------------------------------------- the run

    def run(self) -> StudyRow:
        """Run the study to its end (or its time budget); returns its final catalog row.

        Raises:
            OperationalError: ``study_stopped`` when interrupted (KeyboardInterrupt); everything finished
                is committed and the study is resumable.
        """
        ok = False
        try:
            row = self._run()
            ok = True
            return row
        finally:
            self.meter.finish(ok=ok)

    def _run(self) -> StudyRow:
        spec = self.spec
        algorithm = spec.search
        assert algorithm is not None  # bind_tune builds it (once: building it checked its options)
        self._write_study("running")
        heartbeat = Heartbeat(self.session.duck.cursor(), spec.name, os.getpid())
        try:
            try:
                self._rounds(algorithm)
            finally:
                heartbeat.stop()  # before the study's row is written again
        except KeyboardInterrupt:
            self._abandon()
            self._write_study("stopped", stopped=True)
            raise OperationalError(f'Study "{spec.name}" was stopped; its finished stages are kept: run the '
                                   "TUNE statement again (or add RESUME) to go on.", code="study_stopped") from None
        except OSError as exc:
            self._abandon()
            self._write_study("interrupted", error=str(exc), stopped=True)
            raise OperationalError(f'Study "{spec.name}" stopped: writing a checkpoint failed ({exc}); its finished '
                                   "stages are kept: free space and run the TUNE statement again to go on.",
                                   code="disk_full" if exc.errno == errno.ENOSPC else "io_error") from None
        except BaseException as exc:
            self._abandon()
            self._write_study("interrupted", error=str(exc), stopped=True)
            raise
        status = "finished" if algorithm.finished else "stopped"
        if status == "finished" and self.trials and all(t.status == "failed" for t in self.trials.values()):
            error = self.trials[min(self.trials)].error
            self._write_study("failed", error=error)
            raise _every_trial_failed(spec.name, self.failures.get(error) if error is not None else None, error)
        if status == "finished":
            self._collect_checkpoints()
        return self._write_study(status, stopped=status == "stopped")

    def _rounds(self, algorithm) -> None:
        """Ask, plan, train and tell, round after round. Trial rows are written with the next stage a round
        trains, and at least every :data:`FLUSH_SECONDS` (rounds the tree already holds write nothing)."""
        while True:
            requests = algorithm.ask()
            if not requests:
                break
            self._execute([(key, tune_stage_tree(plan)) for key, plan in self._plan_round(requests).items()])
            if self._out_of_time():
                break  # the round may be unfinished: its requests are asked again on resume
            self._tell_each(algorithm, requests)
            if self.dirty and time.monotonic() - self.flushed >= FLUSH_SECONDS:
                with self._txn():
                    self._flush_trials()
            self._report()

    def _abandon(self) -> None:
        """Cancel the tasks still queued (a task already training finishes in its worker, unrecorded)."""
        for future in list(self.running):
            future.cancel()
        self.running.clear()

    def _out_of_time(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline

    def _plan_round(self, requests: list[Request]) -> dict[str, RoundPlan]:
        """The round's plan per stage tree, its requests' trials written ``running``."""
        plans: dict[str, RoundPlan] = {}
        for request in requests:
            trial = self.trials.get(request.trial)
            previous = trial.request.sequence if trial else ()
            if request.donor is not None:
                assert request.branch_epoch is not None  # an exploit names the epoch it branches at
                base = request.branch_epoch
            else:
                base = len(previous)
            self.requested += max(len(request.sequence) - base, 0)
            self.trials[request.trial] = _Trial(request, len(previous), "running")
            target = self._target(request)
            key = self.tree_key(request.trial)
            plan = plans.get(key) or RoundPlan(self.tree(key), (), self.spec.change_points)
            plans[key] = replace(plan, targets=plan.targets + (target,))
        self._put_trials([request.trial for request in requests])
        return plans

    # -------------------------------------------------------------- executing

    def _execute(self, plans: list[tuple[str, RoundPlan]]) -> None:
        """Train every task of the round's plans, at most ``workers`` at once, critical path first."""
        pending = [(key, task) for key, plan in plans for task in plan.tasks]
        done: set[tuple[str, int]] = set()
        failed: dict[tuple[str, int], str] = {}
        running = self.running
        while pending or running:
            for key, task in list(pending):
                if task.after is not None and (key, task.after) in failed:
                    failed[(key, task.id)] = failed[(key, task.after)]
                    self._fail_nodes(task.stages, failed[(key, task.id)])
                    pending.remove((key, task))
            ready = [(k, t) for k, t in pending if t.after is None or (k, t.after) in done]
            ready.sort(key=lambda kt: -kt[1].critical)
            if self._out_of_time() and self.submitted:
                ready = []  # the time budget is spent: let the running tasks finish, start no more
            for key, task in ready[:max(self.executor.workers - len(running), 0)]:
                pending.remove((key, task))
                future, numbers, parent = self._submit(key, task)
                self.submitted += 1
                running[future] = (key, task, numbers, parent)
            if not running:
                break
            finished, _ = cf.wait(list(running), return_when=cf.FIRST_COMPLETED)
            for future in finished:
                key, task, numbers, parent = running.pop(future)
                error = self._finish(key, task, future, numbers, parent)
                (failed.__setitem__((key, task.id), error) if error else done.add((key, task.id)))

    def _submit(self, key: str, task: StageTask) -> tuple[cf.Future, list[int], Optional[int]]:
        tree = self.trees[key]
        start = task.stages[0].start
        parent = None if start.is_root else self.store.get(_checkpoint_of(start))
        first_factory = self.spec.factory_params_of(_hp(task.stages[0].nodes[0]))
        spec = TaskSpec(self.spec.trainable.factory, first_factory, self.spec.seed, self.spec.threads,
                        tuple((s.nodes[0].epoch, tuple(_training(_hp(n)) for n in s.nodes)) for s in task.stages),
                        self.spec.device)
        numbers = [self._new_stage(key) for _ in task.stages]
        parent_stage = tree.stage_of(start)
        with self._txn():
            self._flush_trials()  # the trials' rows before the stages they run
            for stage, number in zip(task.stages, numbers):
                self._put_stage(self._stage_row(key, number, parent_stage, stage.nodes, "running"))
                parent_stage = number
        return self.executor.submit(spec, self.data, parent), numbers, tree.stage_of(start)

    def _stage_row(self, key, number, parent, nodes, status, **extra) -> StageRow:
        return StageRow(key, number, parent, nodes[0].epoch, nodes[-1].epoch + 1, hp_json(n.hp for n in nodes),
                        extra.pop("metrics", None), status, extra.pop("checkpoint", None),
                        extra.pop("checkpoint_bytes", None), self.spec.name, **extra)

    def _finish(self, key: str, task: StageTask, future: cf.Future, numbers: list[int],
                parent: Optional[int]) -> Optional[str]:
        """Record a finished task's stages (checkpoint blob first, then the row, committed); returns the
        error text when a stage failed. ``numbers``: the stages' numbers; ``parent``: the first one's parent."""
        try:
            outcome: TaskOutcome = future.result()
        except Exception as exc:  # the worker process died
            outcome = TaskOutcome((), (type(exc).__name__, "worker_died", f"the worker process died ({exc!r})"))
        with self.store.writing():  # no VACUUM deletes the checkpoints before their rows commit
            digests = [self.store.put(r.checkpoint) for r in outcome.results]  # blobs before the rows naming them
            with self._txn():
                error = self._record(key, task, numbers, parent, outcome, digests)
        self._report()
        return error

    def _record(self, key, task, numbers, parent, outcome, digests) -> Optional[str]:
        tree = self.trees[key]
        for stage, number, result, digest in zip(task.stages, numbers, outcome.results, digests):
            metrics = [dict(m) for m in result.metrics]
            tree.record_stage(number, parent, [n.hp for n in stage.nodes], metrics, digest, len(result.checkpoint))
            self._put_stage(self._stage_row(key, number, parent, stage.nodes, "done", metrics=json.dumps(metrics),
                                            checkpoint=digest, checkpoint_bytes=len(result.checkpoint),
                                            worker=outcome.worker, seconds=result.seconds))
            self.trained += len(stage.nodes)
            parent = number
        error = None
        if outcome.error is not None:
            cls, code, message = outcome.error
            error = f"{cls} ({code}): {message}"
            rest = task.stages[len(outcome.results):]
            bad = rest[0]
            self._put_stage(self._stage_row(key, numbers[len(outcome.results)], parent, bad.nodes, "failed",
                                            worker=outcome.worker, error=error))
            self._fail_nodes(rest, error)
            self.failures[error] = outcome.error
        return error

    def _fail_nodes(self, stages, error: str) -> None:
        for stage in stages:
            for node in stage.nodes:
                if not node.trained:
                    self.node_errors[id(node)] = error

    # ---------------------------------------------------------------- telling

    def _tell_each(self, algorithm, requests: list[Request]) -> None:
        for request in sorted(requests, key=lambda r: r.trial):
            trial = self.trials[request.trial]
            node = self.tree(self.tree_key(request.trial)).find(request.sequence)
            assert node is not None  # _target inserted the request's sequence into its tree
            path = node.path()
            missing = next((n for n in path if not n.trained), None)
            if missing is not None:
                trial.error = self.node_errors.get(id(missing), "its stage did not finish")
                algorithm.tell_failed(request.trial, trial.error)
            else:
                algorithm.tell(request.trial, [_metric(n.metrics, self.spec.metric) for n in path])
        # an algorithm may decide on the whole round at its last tell (Hyperband's rung, PBT's interval):
        # every trial's status is read once all are told
        asked = {r.trial for r in requests}
        changed = []
        for number, trial in self.trials.items():
            status = algorithm.status(number)
            status = "completed" if status == "stopped" else status  # PBT's member at max_t
            if status != trial.status or number in asked:
                trial.status = status
                changed.append(number)
        self._put_trials(changed)

    # ---------------------------------------------------------------- catalog

    def _put_trials(self, numbers: list[int]) -> None:
        """Mark trials' rows to write (the next :meth:`_flush_trials`, inside a catalog transaction)."""
        self.dirty.update(numbers)

    def _flush_trials(self) -> None:
        if self.dirty:
            self.catalog.studies.put_trials([self._trial_row(n) for n in sorted(self.dirty)])
            self.dirty.clear()
        self.flushed = time.monotonic()

    def _trial_row(self, number: int) -> TrialRow:
        trial = self.trials[number]
        request = trial.request
        node = self.tree(self.tree_key(number)).find(request.sequence)
        path = node.path() if node is not None else []
        metrics = tuple(_metric(n.metrics, self.spec.metric) for n in path if n.trained)
        best = _best(metrics, self.spec.mode)
        last = node if node is not None and node.trained else None
        return TrialRow(
            self.spec.name, number, json.dumps(dict(request.config), default=list), hp_json(request.sequence),
            trial.status, len(metrics), metrics, metrics[-1] if metrics else None, best,
            last.stage if last is not None else None, last.checkpoint if last is not None else None, trial.error)

    def _put_stage(self, row: StageRow) -> None:
        self.catalog.studies.put_stage(row)

    def _txn(self):
        """One catalog transaction of its own (TUNE runs outside the session's transaction): committed at the
        end of the block, so other connections see it."""
        return self.catalog.transaction(join=False)

    def _best_trial(self) -> tuple[Optional[int], Optional[float]]:
        best = None
        for number in sorted(self.trials):
            trial = self.trials[number]
            if trial.status == "failed":
                continue
            node = self.tree(self.tree_key(number)).find(trial.request.sequence)
            if node is None or not node.trained:
                continue
            value = _metric(node.metrics, self.spec.metric)
            if value == value and (best is None or _better(value, best[1], self.spec.mode)):
                best = (number, value)
        return best if best is not None else (None, None)

    def _write_study(self, status: str, *, error: Optional[str] = None, stopped: bool = False) -> StudyRow:
        with self._txn():
            return self._study_row(status, error, stopped)

    def _study_row(self, status: str, error: Optional[str], stopped: bool) -> StudyRow:
        if stopped:
            self.catalog.studies.interrupt_stages(self.spec.name)
            left = [number for number, trial in self.trials.items() if trial.status in ("running", "pending")]
            for number in left:
                self.trials[number].status = "stopped"
            self._put_trials(left)
        self._flush_trials()
        old = self.catalog.studies.study(self.spec.name)
        best_trial, best_metric = self._best_trial()
        done = sum(1 for t in self.trials.values() if t.status in ("completed", "pruned", "failed"))
        row = replace(self.spec.study_row(), status=status, error=error, best_trial=best_trial,
                      best_metric=best_metric, trials_done=done,
                      epochs_trained=(old.epochs_trained if old else 0) + self.trained - self.counted,
                      epochs_requested=max(self.requested, old.epochs_requested if old else 0),
                      checkpoint_bytes=self._checkpoint_bytes(),
                      **owner_fields(status == "running"))
        self.counted = self.trained
        self.catalog.studies.put_study(row)
        return row

    def _checkpoint_bytes(self) -> int:
        return sum(n.checkpoint_bytes or 0 for tree in self.trees.values() for n in tree.nodes()
                   if n.checkpoint is not None)

    def _collect_checkpoints(self) -> None:
        """Drop the checkpoints no trial can still need: every one but the last epoch of each trial that is not
        pruned or failed (in any study of the tree). Their blobs go once nothing references them."""
        with self._txn():
            self._flush_trials()  # this study's rows are read below
        keep = self.catalog.studies.live_trial_checkpoints()
        dropped: list[str] = []
        with self._txn():
            for key, tree in self.trees.items():
                gone = [n for n in tree.nodes() if n.checkpoint and n.checkpoint not in keep]
                self.catalog.studies.forget_checkpoints(key, [s for s in map(tree.stage_of, gone) if s is not None])
                for node in gone:
                    if node.checkpoint:  # (every node of gone has one)
                        dropped.append(node.checkpoint)
                    node.checkpoint = node.checkpoint_bytes = None
            self._put_trials(list(self.trials))
            self._flush_trials()
        # committed references read under the store's sweep lock; a checkpoint another writer still commits stays
        self.store.discard(dropped, self.catalog.referenced_digests)

    def _report(self) -> None:
        if self.progress is None:
            return
        best_trial, best_metric = self._best_trial()
        done = sum(1 for t in self.trials.values() if t.status in ("completed", "pruned", "failed"))
        self.meter.update(done, len(self.trials), trials=len(self.trials), trials_done=done, best_trial=best_trial,
                          best_metric=best_metric, epochs_trained=self.trained, epochs_requested=self.requested)


class Heartbeat:
    """A thread recording, every :data:`~modelsql.catalog.owners.HEARTBEAT_SECONDS`, that the TUNE of
    ``study`` in process ``pid`` is alive, on its own DuckDB cursor ``con`` (closed by :meth:`stop`).
    A failed beat (a conflicting write) is skipped: the next one comes soon."""

    def __init__(self, con, study: str, pid: int) -> None:
        self.con, self.study, self.pid = con, study, pid
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._beat, name=f"modelsql-heartbeat-{study}", daemon=True)
        self.thread.start()

    def _beat(self) -> None:
        try:
            catalog = Catalog(self.con)
            while not self.done.wait(HEARTBEAT_SECONDS):
                try:
                    with catalog.transaction(join=False):
                        catalog.studies.heartbeat(self.study, self.pid)
                except errors_module.Error:
                    continue
        except errors_module.Error:
            return

    def stop(self) -> None:
        """Stop beating and close the cursor."""
        self.done.set()
        self.thread.join()
        self.con.close()


def _every_trial_failed(study: str, failure: Optional[tuple[str, str, str]], text: Optional[str]):
    """The error of a study whose every trial failed: of the first failure's PEP 249 class (a DataError for
    a diverging loss, a ProgrammingError for a factory refusing its arguments ...), with its code."""
    cls_name, code, message = failure or ("OperationalError", "trial_failed", text or "unknown")
    cls = getattr(errors_module, cls_name, None)
    if not (isinstance(cls, type) and issubclass(cls, errors_module.Error)):
        cls = errors_module.OperationalError
    return cls(f'Study "{study}": every trial failed; the first: {message}. DESCRIBE STUDY {study} lists them.',
               code=code)


def _training(hp: EpochHP) -> EpochHP:
    return tuple((k, v) for k, v in hp if k in TRAINING_NAMES)


def _hp(node: Node) -> EpochHP:
    """The hyper-parameters of an epoch's node (only the root has none, and no stage holds it)."""
    assert node.hp is not None
    return node.hp


def _checkpoint_of(node: Node) -> str:
    """The checkpoint a task starts from (a task starts at the root or at a restorable node)."""
    assert node.checkpoint is not None
    return node.checkpoint


def _trained_metrics(node: Node) -> Mapping[str, float]:
    """The metrics of a trained epoch (the donor's path up to a restorable node is trained)."""
    assert node.metrics is not None
    return node.metrics


def _metric(metrics, name: str) -> float:
    value = metrics.get(name) if metrics else None
    return float("nan") if value is None else float(value)


def _better(a: float, b: float, mode: str) -> bool:
    return a < b if mode == "min" else a > b


def _best(values, mode: str) -> Optional[float]:
    good = [v for v in values if v == v]
    if not good:
        return None
    return min(good) if mode == "min" else max(good)
