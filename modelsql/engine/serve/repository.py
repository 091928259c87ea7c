"""The catalog's pipelines and models as a serving repository (PRETZEL's white-box server).

:class:`CatalogRepository` implements :class:`modelsql.serving.repository.Repository`
for ``SERVE``. What it serves is resident: each distinct step is one loaded
session, however many served pipelines run it (PRETZEL, Lee et al., OSDI
2018: the Object Store and shared state); requests for pipelines that share
steps are one batching *group*, run by one
:class:`~modelsql.operators.step_graph.StepGraph` built by the rule
:func:`~modelsql.engine.query.rules.pipeline_share_steps.share_steps`, so
the shared steps run once per batch over the rows of every request in it, and
each pipeline's own steps over its own rows. Steps needed by the same pipelines
run fused into one session (units, PRETZEL's stages: :mod:`modelsql.engine.serve.fused_steps`). A pipeline served with
``reserved_threads = k`` is a group of its own with ``k`` threads no other
group uses (PRETZEL's reservation scheduling), sharing memory but not threads.

Served models of one family (one architecture fingerprint, the same inputs) batch together too:
their group keeps a NetFuse-merged graph (Jeong et al., 2020; :mod:`modelsql.engine.artifacts.merged`)
and runs a batch with requests for several members as one merged run when the measured rule
(:func:`modelsql.engine.artifacts.merge_gain.estimate`, asked per batch with its rows per member) expects a gain,
else one run per member.

A served model is a one-step pipeline. Adding a pipeline loads only the steps
not resident yet; removing one releases the steps no other pipeline needs; a
memory budget unloads the least recently used idle steps
(:mod:`modelsql.engine.serve.resident_steps`).

Changes never fail requests for what stays served: a change builds the new
groups aside (loading what they need), then swaps them in with one assignment;
each served entry names the group that runs it (``ServedEntry.runner``), so a
request parsed before the swap runs on its old group, whose sessions are kept
until its last batch ends. A served entry whose blobs are gone from the store
(its model dropped and the store vacuumed) is not ready: ``ready`` is False and
``unready_reason`` and ``resident()`` say which blobs are missing (checked at
most every :data:`HEALTH_CHECK_S` seconds per entry).
"""

from __future__ import annotations

import concurrent.futures
import threading
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable, Hashable, Optional, Sequence, Union, cast

import numpy as np

from modelsql.catalog.entries import ModelVersion, PipelineStep, PipelineVersion, StepFeed, TensorSpec
from modelsql.errors import DataError, Error
from modelsql.operators.step_graph import GraphNode, StepGraph
from modelsql.serving.repository import TensorMetadata
from modelsql.serving.simple import text_feed
from modelsql.engine.artifacts import sessions as artifacts
from modelsql.engine.artifacts import merge_gain
from modelsql.engine.artifacts import merged as merged_models
from modelsql.engine.serve.resident_steps import ResidentSteps
from modelsql.engine.profile.run_traces import TraceSampler
from modelsql.engine.serve.fused_steps import fuse_units, unit_model
from modelsql.engine.query.rules.pipeline_share_steps import SharedSteps, share_steps

if TYPE_CHECKING:
    from modelsql.operators.backends import BackendModel
    from modelsql.operators.backends.routed import MergedRunner
    from modelsql.engine.serve.fused_steps import LiftedStep
    from modelsql.engine.serve.resident_steps import ResidentStep

__all__ = ["ServedEntry", "CatalogRepository", "as_pipeline", "ONNX_TO_OIP", "HEALTH_CHECK_S"]

HEALTH_CHECK_S = 1.0
"""Seconds between two checks that a served entry's blobs are still in the store."""

ONNX_TO_OIP = {"FLOAT": "FP32", "DOUBLE": "FP64", "FLOAT16": "FP16", "INT8": "INT8", "INT16": "INT16", "INT32": "INT32",
        "INT64": "INT64", "UINT8": "UINT8", "UINT16": "UINT16", "UINT32": "UINT32", "UINT64": "UINT64",
        "BOOL": "BOOL", "STRING": "BYTES"}
"""ONNX element type names (as the catalog writes them) -> Open Inference Protocol datatypes."""


def _meta(spec: TensorSpec) -> TensorMetadata:
    if spec.elem_type not in ONNX_TO_OIP:
        raise DataError(f'"{spec.name}" is a {spec.elem_type} tensor, which the Open Inference Protocol cannot carry',
                        code="unsupported_type")
    shape = tuple(d if isinstance(d, int) and d >= 0 else -1 for d in (spec.shape or (None,)))
    return TensorMetadata(spec.name, ONNX_TO_OIP[spec.elem_type], (-1,) + shape[1:] if shape else (-1,))


def as_pipeline(mv: ModelVersion) -> PipelineVersion:
    """A model version as a one-step pipeline (its inputs fed by pipeline inputs of the same names)."""
    step = PipelineStep(0, mv.name, mv, tuple(StepFeed(s.name, None, s.name) for s in mv.inputs))
    return PipelineVersion(mv.name, mv.version, (step,), digest=artifacts.artifact_digest(mv), source="model")


@dataclass(frozen=True)
class ServedEntry:
    """One served pipeline or model (a :class:`~modelsql.serving.repository.Servable`)."""

    name: str
    version: str
    versions: tuple[str, ...]
    platform: str
    inputs: tuple[TensorMetadata, ...]
    outputs: tuple[TensorMetadata, ...]
    group: Hashable
    pipeline: PipelineVersion = field(compare=False)
    kind: str = "pipeline"
    reserved_threads: int = 0
    runner: Optional[_Group] = field(default=None, compare=False, repr=False)
    """The group that runs this entry (set when it is swapped in)."""


@dataclass
class _Group:
    key: str
    members: list[str]
    shared: SharedSteps
    graph: StepGraph
    executor: concurrent.futures.Executor
    own_executor: bool
    unit_of: dict  # step key -> the key of the session running it
    family: Optional["_Family"] = None
    busy: int = 0  # batches running on it now

    @property
    def session_users(self) -> dict:
        """Session key -> how many distinct steps of the group run on it."""
        out: dict = {}
        for k in self.unit_of.values():
            out[k] = out.get(k, 0) + 1
        return out


@dataclass
class _Family:
    """A group of served models of one family and its merged graph."""

    names: list[str]  # served names, in merge order
    runner: MergedRunner
    cost: merge_gain.MemberCost
    outputs: list[str]
    merged_runs: int = 0
    separate_batches: int = 0

    def pays(self, rows: list[int]) -> bool:
        return merge_gain.estimate(self.cost, len(rows), [float(r) for r in rows]).merge


class CatalogRepository:
    """Resident pipelines and models, their shared steps, and how their batches run.

    Args:
        store: the blob store the steps' models are read from.
        resolve: ``resolve(name, kind)`` -> the latest catalog entry (``kind`` ``"pipeline"`` or
            ``"model"``), for the protocol's repository load; raises ``LookupError`` when absent.
        threads: worker threads shared by the groups that reserve none.
        budget_bytes: the most the loaded steps may take (None: no limit).
        share_structures: run the one-step units of one structure on one session, each fed its own
            weights (:class:`~modelsql.engine.serve.fused_steps.LiftedStep`).
        merge_families: batch served models of one family together and run them merged where it pays.
        device: ``"cpu"`` or ``"cuda:N"``: where every unit runs (on a CUDA device each unit is a
            :class:`~modelsql.operators.backends.cuda.CudaModel`, replaying CUDA graphs captured per batch
            bucket: a batch of n rows is padded to the next bucket).
    """

    def __init__(self, store, resolve: Callable[[str, str], object], *, threads: int = 2,
                 budget_bytes: Optional[int] = None, share_structures: bool = False,
                 merge_families: bool = True, device: str = "cpu") -> None:
        self.device = device
        self.share_structures = share_structures
        self.merge_families = merge_families
        self.family_notes: dict[str, str] = {}
        """Group key -> why its family is not merged (a declined merge), for SHOW SERVERS and tests."""
        self._resolve = resolve
        self._lock = threading.RLock()
        self._entries: dict[str, ServedEntry] = {}
        self._unloaded: dict[str, str] = {}  # name -> why
        self._groups: dict[Hashable, _Group] = {}
        self._store = store
        self._swap = threading.Lock()  # the swap of entries and groups, and the batches' counts of their group
        self._retired: list[_Group] = []  # replaced groups that batches still run on
        self._health: dict[str, tuple[float, Optional[str]]] = {}  # name -> (checked at, why not ready)
        self.steps = ResidentSteps(budget_bytes)
        """The loaded steps (:class:`~modelsql.engine.serve.resident_steps.ResidentSteps`)."""
        self._pool = concurrent.futures.ThreadPoolExecutor(max(1, threads), thread_name_prefix="modelsql-serve")
        self.on_step: Optional[Callable[[str, int, float], None]] = None
        self.sampler = TraceSampler()
        """Sampled run times of single-model units (:mod:`~modelsql.engine.profile.run_traces`)."""

    # ------------------------------------------------------------ the resident set

    def add(self, entry, *, reserved_threads: int = 0, name: Optional[str] = None) -> ServedEntry:
        """Serve a pipeline version or a model version (under its name unless ``name`` is given).

        Loads only the steps not resident yet. Raises DataError when a step cannot load, leaving
        the resident set as it was.
        """
        served = name or entry.name
        return self.add_many([(entry, reserved_threads, served)])[0]

    def add_many(self, items: Sequence[tuple[object, int, str]]) -> list[ServedEntry]:
        """:meth:`add` of several ``(entry, reserved threads, served name)`` at once (one regrouping)."""
        with self._lock:
            entries = dict(self._entries)
            for entry, reserved, served in items:
                entries[served] = _served(entry, reserved, served)
            self._regroup(entries)
            for _, _, served in items:
                self._unloaded.pop(served, None)
            return [self._entries[served] for _, _, served in items]

    def remove(self, name: str) -> None:
        """Stop serving ``name``; steps no other served pipeline uses are released.

        Raises:
            LookupError: ``name`` is not served.
        """
        with self._lock:
            if name not in self._entries:
                raise LookupError(f'"{name}" is not served here; served: {", ".join(sorted(self._entries)) or "nothing"}')
            entries = dict(self._entries)
            del entries[name]
            self._regroup(entries)

    def _regroup(self, entries: dict[str, ServedEntry]) -> None:
        """Rebuild the groups for ``entries`` (loading missing steps first), then swap them in."""
        plans = _group_members(entries, self.merge_families)
        shares = {key: share_steps([(m, entries[m].pipeline) for m in members]) for key, members in plans.items()}
        fused = {key: fuse_units(shared) for key, shared in shares.items()}
        proxies: dict[str, Union[ResidentStep, LiftedStep]] = {}
        session_of: dict[str, str] = {}
        for units, _ in fused.values():
            for unit in units:
                if unit.key not in proxies:
                    proxies[unit.key], session_of[unit.key] = unit_model(
                        self._store, self.steps, unit, share_structures=self.share_structures, device=self.device)
                    if not self.steps.loaded(session_of[unit.key]):
                        proxies[unit.key].load()  # only the sessions not resident yet
        groups: dict[Hashable, _Group] = {}
        for key, members in plans.items():
            shared, reserved = shares[key], entries[members[0]].reserved_threads
            units, member_outputs = fused[key]
            old = self._groups.get(key)
            if old is not None and old.own_executor and old.members == members:
                executor, own = old.executor, True
            elif reserved:
                executor, own = concurrent.futures.ThreadPoolExecutor(reserved, thread_name_prefix=f"modelsql-{key}"), True
            else:
                executor, own = self._pool, False
            # (a resident step is run by GraphNode, which calls its run() alone: not a whole BackendModel)
            graph = StepGraph([GraphNode(st.name, cast("BackendModel", proxies[st.key]), st.feeds,
                                         tuple(e for _, _, e in st.outputs), st.members) for st in units],
                              member_outputs, on_step=self._observe)
            unit_of = {node.key: session_of[st.key] for st in units for _, node in st.nodes}
            for st in units:
                if not st.fused and st.nodes[0][1].model.kind not in ("pipeline", "models"):
                    self.sampler.watch(st.name, st.nodes[0][1].model)
            family = old.family if old is not None and old.members == members else self._family(key, entries, members)
            groups[key] = _Group(key, members, shared, graph, executor, own, unit_of, family)
        for gkey, old in self._groups.items():
            if old.own_executor and (gkey not in groups or groups[gkey].executor is not old.executor):
                old.executor.shutdown(wait=False)
        swapped = {n: replace(e, group=key, runner=groups[key]) for key, members in plans.items()
                   for n, e in entries.items() if n in members}
        with self._swap:
            self._retired += list(self._groups.values())
            self._entries, self._groups = swapped, groups  # requests see the old state or the new, never a mix
            self._health.clear()
            self._release_retired()

    def _release_retired(self) -> None:
        """Forget the replaced groups no batch runs on, and the sessions only they used (``_swap`` held)."""
        self._retired = [g for g in self._retired if g.busy]
        needed = {k for g in [*self._groups.values(), *self._retired] for k in g.unit_of.values()}
        self.steps.retain(needed)

    def _family(self, key: str, entries: dict, members: list[str]) -> Optional[_Family]:
        """The merged graph of a group of two or more served models of one family, or None."""
        models = [entries[m].pipeline.steps[0].model for m in members]
        if not self.merge_families or not _one_family([entries[m] for m in members]):
            return None
        try:
            data, record = merged_models.build_merged(self._store, models, "stacked", "conv")
            runner = merged_models.runner_of(self._store, data, record, models, 1)
        except Error as exc:  # MergeDeclined, an unreadable blob: the members then run one by one
            self.family_notes[key] = str(exc)
            return None
        return _Family(list(members), runner, merge_gain.member_cost(models[0]), [o.name for o in models[0].outputs])

    def family_stats(self) -> dict[Hashable, dict]:
        """Group key -> its family's members and how its batches ran (merged / separately)."""
        with self._lock:
            return {k: {"members": g.family.names, "merged_runs": g.family.merged_runs,
                        "separate_batches": g.family.separate_batches}
                    for k, g in self._groups.items() if g.family is not None}

    def _observe(self, step: str, rows: int, seconds: float) -> None:
        self.sampler.observe(step, rows, seconds)
        if self.on_step is not None:
            self.on_step(step, rows, seconds)

    def resident(self) -> list[dict]:
        """One dict per served entry: name, kind, version, group, steps, shared_steps (steps another served
        entry also runs), own_bytes / shared_bytes (RssAnon measured when its steps loaded), reserved_threads."""
        with self._lock:
            rows = []
            for name, e in sorted(self._entries.items()):
                g = self._groups[e.group]
                mine = [n for n in g.shared.nodes if name in n.members]
                shared = [n for n in mine if len(n.members) > 1]
                users = g.session_users
                own = {g.unit_of[n.key] for n in mine if len(n.members) == 1 and users[g.unit_of[n.key]] == 1}
                common = {g.unit_of[n.key] for n in mine} - own
                why = self._unready(e, fresh=True)
                rows.append(dict(
                    name=name, kind=e.kind, version=e.version, group=e.group,
                    state="READY" if why is None else "UNAVAILABLE", reason=why or "",
                    steps=len(mine), shared_steps=len(shared),
                    loaded_steps=sum(1 for n in mine if self.steps.loaded(g.unit_of[n.key])),
                    own_bytes=sum(self.steps.bytes_of(k) for k in own),
                    shared_bytes=sum(self.steps.bytes_of(k) for k in common),
                    reserved_threads=e.reserved_threads, device=self.device,
                    captured=self._captured(g, mine),
                ))
            for name, why in sorted(self._unloaded.items()):
                rows.append(dict(name=name, kind=None, version=None, group=None, state="UNAVAILABLE", steps=0,
                                 shared_steps=0, loaded_steps=0, own_bytes=0, shared_bytes=0, reserved_threads=0,
                                 reason=why, device=self.device, captured=None))
            return rows

    def _captured(self, g: "_Group", nodes) -> Optional[str]:
        """What the units of ``nodes`` captured as CUDA graphs (None on the CPU)."""
        if self.device == "cpu":
            return None
        said = {self.steps.describe(g.unit_of[n.key]) for n in nodes}
        return "; ".join(sorted(s for s in said if s)) or None

    def group_plan(self, key: str) -> SharedSteps:
        """The shared-step plan of group ``key`` (for EXPLAIN-like views and tests)."""
        with self._lock:
            return self._groups[key].shared

    # ------------------------------------------------------------ the Repository protocol

    def get(self, name: str, version: Optional[str] = None) -> ServedEntry:
        """The served entry ``name`` (as served, else whatever its case, as catalog names are). Raises LookupError for
        an unknown name or version (HTTP 404)."""
        e = self._served_as(name)
        if e is None:
            why = self._unloaded.get(name)
            if why is not None:
                raise LookupError(f'"{name}" is not loaded ({why})')
            raise LookupError(f'no model or pipeline "{name}" is served; served: {", ".join(self.names()) or "nothing"}')
        if version is not None and version != e.version:
            raise LookupError(f'"{name}" is served at version {e.version}, not version {version}')
        return e

    def names(self) -> list[str]:
        """The served names, sorted."""
        return sorted(self._entries)

    def ready(self, name: str, version: Optional[str] = None) -> bool:
        """Whether ``name`` (at ``version``, when given) is served and its blobs are in the store."""
        e = self._entries.get(name)
        return e is not None and version in (None, e.version) and self._unready(e) is None

    def unready_reason(self, name: str, version: Optional[str] = None) -> Optional[str]:
        """Why served ``name`` is not ready (its blobs are gone from the store), or None."""
        e = self._entries.get(name)
        return None if e is None else self._unready(e)

    def _unready(self, e: ServedEntry, fresh: bool = False) -> Optional[str]:
        """Why ``e`` cannot run (cached for :data:`HEALTH_CHECK_S` seconds unless ``fresh``), or None."""
        now = time.monotonic()
        checked = self._health.get(e.name)
        if checked is not None and not fresh and now - checked[0] < HEALTH_CHECK_S:
            return checked[1]
        why = _missing_blobs(self._store, e)
        self._health[e.name] = (now, why)
        return why

    def index(self) -> list[dict]:
        """Every served or unloaded name with its state (Triton's repository index)."""
        return [{"name": r["name"], "version": r["version"] or "", "state": r["state"], "reason": r.get("reason", "")}
                for r in self.resident()]

    def load(self, name: str) -> None:
        """Serve ``name`` (Triton's repository load): a served name again at the version it serves (a running
        server keeps its version, however the catalog's latest or an alias moves since); any other a catalog
        pipeline, else a catalog model, at its latest version."""
        served = self._served_as(name)
        if served is not None:
            kept = served.pipeline if served.kind == "pipeline" else served.pipeline.steps[0].model
            self.add(kept, reserved_threads=served.reserved_threads, name=served.name)
            return
        try:
            entry = self._resolve(name, "pipeline")
        except LookupError:
            entry = self._resolve(name, "model")
        self.add(entry, name=str(getattr(entry, "name", name)))

    def _served_as(self, name: str) -> Optional[ServedEntry]:
        """The entry served as ``name``, else the one whose name differs only in case (catalog names are
        case-insensitive: one entry each); None when neither is."""
        return self._entries.get(name) or next((e for n, e in self._entries.items() if n.lower() == name.lower()), None)

    def unload(self, name: str) -> None:
        """Stop serving ``name`` (it stays listed as UNAVAILABLE in the index)."""
        self.remove(name)
        with self._lock:
            self._unloaded[name] = "unloaded"

    def executor(self, group: Hashable) -> concurrent.futures.Executor:
        """The group's executor: its reserved threads, or the shared pool."""
        g = self._groups.get(group)
        return g.executor if g is not None else self._pool

    def run_group(self, group: Hashable, items: Sequence[tuple[ServedEntry, dict[str, np.ndarray]]]) -> list:
        """Run one batch of a group: every distinct step once over the rows that need it.

        Returns one result per item: its outputs, or the exception naming the pipeline, the batch and
        the first failing row of that request.
        """
        results: list = [None] * len(items)
        parts: dict[int, list[int]] = {}
        runners: dict[int, _Group] = {}
        with self._swap:
            for k, (e, _) in enumerate(items):
                g = self._runner_of(e)
                if g is None:
                    results[k] = LookupError(f'"{e.name}" is no longer served')
                    continue
                runners[id(g)] = g
                parts.setdefault(id(g), []).append(k)
            for g in runners.values():
                g.busy += 1
        try:
            for gid, ks in parts.items():
                for k, out in zip(ks, self._run_items(runners[gid], [items[k] for k in ks])):
                    results[k] = out
        finally:
            with self._swap:
                for g in runners.values():
                    g.busy -= 1
                if self._retired:
                    self._release_retired()
        return results

    def _runner_of(self, e: ServedEntry) -> Optional[_Group]:
        """The group to run a request for ``e`` on (``_swap`` held): the one it was parsed against while
        that group is current or still kept, else the current group of its name; None once unserved."""
        g = e.runner
        if g is not None and (any(g is c for c in self._groups.values()) or any(g is r for r in self._retired)):
            return g
        now = self._entries.get(e.name)
        return now.runner if now is not None else None

    def _run_items(self, g: _Group, items: Sequence[tuple[ServedEntry, dict[str, np.ndarray]]]) -> list:
        feeds: list = []
        for e, inputs in items:
            try:
                feeds.append({k: text_feed(k, v) for k, v in inputs.items()})
            except ValueError as exc:
                feeds.append(exc)
        good = [k for k, f in enumerate(feeds) if not isinstance(f, BaseException)]
        results: list = list(feeds)
        for k, out in zip(good, self._run(g, [items[k][0] for k in good], [feeds[k] for k in good])):
            results[k] = out
        return results

    def _run(self, g: _Group, entries: list, feeds: list[dict]) -> list:
        if not feeds:
            return []
        try:
            if g.family is not None and len({e.name for e in entries}) > 1:
                merged = _run_family(g.family, entries, feeds)
                if merged is not None:
                    return merged
            return _run_batch(g.graph, entries, feeds)
        except Exception as exc:
            if len(feeds) > 1:
                return [self._run(g, [e], [f])[0] for e, f in zip(entries, feeds)]
            return [_row_error(g.graph, entries[0], feeds[0], exc)]

    def close(self) -> None:
        """Release every session and executor (after the server stopped)."""
        with self._lock:
            for g in self._groups.values():
                if g.own_executor:
                    g.executor.shutdown(wait=False)
            self._groups, self._entries = {}, {}
            self.steps.clear()
        self._pool.shutdown(wait=False)


def _served(entry, reserved_threads: int, served: str) -> ServedEntry:
    pv = entry if isinstance(entry, PipelineVersion) else as_pipeline(entry)
    kind = "pipeline" if isinstance(entry, PipelineVersion) else "model"
    return ServedEntry(served, str(pv.version), (str(pv.version),),
                       "modelsql_pipeline" if kind == "pipeline" else "onnxruntime_onnx",
                       tuple(_meta(s) for s in pv.inputs), tuple(_meta(s) for s in pv.outputs),
                       group="", pipeline=pv, kind=kind, reserved_threads=int(reserved_threads))


def _missing_blobs(store, e: ServedEntry) -> Optional[str]:
    """Which of ``e``'s blobs are gone from ``store`` (a message), or None when all are there."""
    for step in e.pipeline.steps:
        mv = step.model
        gone = [d for d in (mv.graph_digest, *(t.digest for t in mv.tensors)) if not store.has(d)]
        if gone:
            return (f"{mv.label}'s blobs are gone from the store ({len(gone)} missing, e.g. {gone[0][:12]}...): "
                    "the model was dropped and its blobs vacuumed; SERVE ADD a version that exists or SERVE REMOVE it")
    return None


def _one_family(entries: Sequence[ServedEntry]) -> bool:
    """Whether every entry is a served model (one step, its own inputs) with one architecture fingerprint."""
    models = [e.pipeline.steps[0].model for e in entries if e.kind == "model" and len(e.pipeline.steps) == 1]
    return (len(models) == len(entries) >= 2 and models[0].fingerprint is not None
            and all(m.fingerprint == models[0].fingerprint for m in models))


def _run_family(family: _Family, entries: list, feeds: list[dict]) -> Optional[list[dict]]:
    """One batch of a family's requests as one merged run, when it pays; None: run it the usual way."""
    index = {n: i for i, n in enumerate(family.names)}
    per: list[list[int]] = [[] for _ in family.names]
    for k, e in enumerate(entries):
        per[index[e.name]].append(k)
    sizes = [len(next(iter(f.values()))) for f in feeds]
    rows = [sum(sizes[k] for k in ks) for ks in per]
    if not family.pays(rows):
        family.separate_batches += 1
        return None
    names = list(feeds[0])
    parts = [None if not ks else {n: np.concatenate([feeds[k][n] for k in ks], axis=0) for n in names}
             for ks in per]
    outs = family.runner.run(parts, family.outputs)
    family.merged_runs += 1
    results: list = [None] * len(entries)
    for i, ks in enumerate(per):
        at = 0
        for k in ks:
            results[k] = {o: arr[at: at + sizes[k]] for o, arr in zip(family.outputs, outs[i])}
            at += sizes[k]
    return results


def _group_members(entries: dict[str, ServedEntry], families: bool = True) -> dict[str, list[str]]:
    """Group keys -> member names: entries that share a step and take the same inputs batch together,
    and so do served models of one family (``families``); a reserved entry is a group of its own."""
    parent = {n: n for n in entries}

    def find(n):
        while parent[n] != n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    owner: dict[tuple, str] = {}
    for name, e in sorted(entries.items()):
        if e.reserved_threads:
            continue
        inputs = tuple(sorted((m.name, m.datatype) for m in e.inputs))
        for step in e.pipeline.steps:
            key = (inputs, artifacts.artifact_digest(step.model), tuple((f.input, f.from_step is None, f.from_name)
                                                                        for f in step.feeds if f.from_step is None))
            if not any(f.from_step is None for f in step.feeds):
                continue
            if key in owner:
                parent[find(name)] = find(owner[key])
            else:
                owner[key] = name
    if families:
        first_of: dict[tuple, str] = {}
        for name, e in sorted(entries.items()):
            if e.reserved_threads or not _one_family([e, e]):
                continue
            family = (tuple(sorted((m.name, m.datatype) for m in e.inputs)), e.pipeline.steps[0].model.fingerprint)
            if family in first_of:
                parent[find(name)] = find(first_of[family])
            else:
                first_of[family] = name
    groups: dict[str, list[str]] = {}
    for name in sorted(entries):
        groups.setdefault(find(name), []).append(name)
    return {f"g:{root}": members for root, members in groups.items()}


def _run_batch(graph: StepGraph, entries: list, feeds: list[dict]) -> list[dict]:
    """Concatenate the requests' inputs, grouped by pipeline (so each pipeline's rows are one run of
    consecutive rows, which its own steps read without a copy), run the graph, split the outputs back."""
    order = sorted(range(len(entries)), key=lambda k: entries[k].name)
    sizes = [len(next(iter(feeds[k].values()))) for k in order]
    names = list(feeds[0])
    batch = {n: feeds[order[0]][n] if len(feeds) == 1 else np.concatenate([feeds[k][n] for k in order], axis=0)
             for n in names}
    starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    rows: dict[str, tuple[int, int]] = {}
    for i, k in enumerate(order):
        lo, hi = rows.get(entries[k].name, (starts[i], starts[i]))
        rows[entries[k].name] = (lo, starts[i + 1])
    outs = graph.run(batch, {m: np.arange(lo, hi) for m, (lo, hi) in rows.items()})
    results: list = [None] * len(entries)
    for i, k in enumerate(order):
        at = starts[i] - rows[entries[k].name][0]
        results[k] = {n: arr[at: at + sizes[i]] for n, arr in outs[entries[k].name].items()}
    return results


def _row_error(graph: StepGraph, entry: ServedEntry, feed: dict, exc: BaseException) -> BaseException:
    """The error of a request that failed alone: the first of its rows that fails alone, named."""
    n = len(next(iter(feed.values())))
    label = entry.pipeline.label
    for r in range(min(n, 256)):
        try:
            graph.run({k: v[r: r + 1] for k, v in feed.items()}, {entry.name: np.arange(1)})
        except Exception as row_exc:
            return DataError(f"{label}: row {r} of this request ({n} rows) fails: {row_exc}", code="inference_failed")
    return DataError(f"{label}: the request of {n} rows fails: {exc}", code="inference_failed")

