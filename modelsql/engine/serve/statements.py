"""Serving statements: ``SERVE [ADD | REMOVE] ...``, ``STOP SERVER``, ``SHOW SERVERS``.

``SERVE`` starts an Open Inference Protocol server (:mod:`modelsql.serving`) in
this process, on 127.0.0.1 unless the statement names another host, and
returns at once; the server runs until ``STOP SERVER`` or the process ends.
What it serves is a :class:`~modelsql.engine.serve.repository.CatalogRepository`:
the catalog's pipelines and models resident once per distinct step, batched by
the steps they share. Servers are per process (:data:`SERVERS`, keyed by
port), so any connection can add to, remove from, list or stop them; closing
the connection that started one stops it (its catalog reads go through that
connection).

Options (``WITH (...)`` of the statement): ``max_batch_size`` (rows, default
32), ``max_queue_delay_ms`` (a fixed batching delay in ms; default: none, the adaptive policy of
:mod:`modelsql.serving.batching`: a request runs at once while a thread is free, what arrives while
all are busy is batched), ``threads`` (worker threads shared by the unreserved pipelines, default: the cores),
``max_request_mb`` (largest request body, default 64), ``memory_budget_mb`` (the most the loaded steps may
take, measured as anonymous resident memory; the least recently used idle
steps are unloaded past it and load again on their next request; default: no
limit), ``share_structures`` (true: served models that differ only in their
floating-point weights, such as many heads of one shape, run on one session,
each fed its own memory-mapped weights: less memory, some throughput (7% in
benchmarks/pretzel.py, within the runs' spread); default false), ``merge_families`` (true, the default: served
models of one architecture batch together, and a batch with requests for several of them runs as one
NetFuse-merged graph where the measured rule expects a gain), ``token`` (a bearer token: every request but
``/v2/health/*`` must then carry ``Authorization: Bearer <token>``; default: the environment variable
``MODELSQL_SERVE_TOKEN``, else none), ``allow_unauthenticated`` (true: listen on an address other machines
reach, such as ``'0.0.0.0'``, without a token; otherwise that is refused). Per item, in parentheses after its
name: ``reserved_threads`` (threads no other pipeline uses: PRETZEL's reservation).
"""

from __future__ import annotations

import errno
import os
import re
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Optional, Union

from modelsql.catalog import Catalog
from modelsql.catalog.entries import ModelVersion, PipelineVersion
from modelsql.errors import Error, NotSupportedError, OperationalError, ProgrammingError
from modelsql.sql.serve import Serve, ShowServers, StopServer
from modelsql.operators.backends import devices
from modelsql.engine.artifacts import sessions as artifacts
from modelsql.engine.handlers import handles
from modelsql.engine.options import OptionValues, option_error, sql_text, value
from modelsql.engine.options.declared import SERVE, SERVE_ITEM
from modelsql.engine.profile.run_traces import record_served_traces
from modelsql.engine.result import Result
from modelsql.engine.serve.repository import CatalogRepository

if TYPE_CHECKING:
    from modelsql.serving.server import InferenceServer
    from modelsql.engine.session import Session

__all__ = ["SERVERS", "DEFAULT_PORT", "SERVE_OPTIONS", "TOKEN_ENV", "stop_all"]

TOKEN_ENV = "MODELSQL_SERVE_TOKEN"
"""The environment variable SERVE reads its bearer token from when the statement gives none."""
_TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]+=*")  # RFC 6750's b64token

DEFAULT_PORT = 8000
SERVE_OPTIONS = SERVE
"""Statement options (:data:`modelsql.engine.options.declared.SERVE`)."""
ITEM_OPTIONS = SERVE_ITEM
"""Options of a served name, in parentheses after it (:data:`modelsql.engine.options.declared.SERVE_ITEM`)."""


@dataclass
class RunningServer:
    """A server this process runs and what it serves."""

    server: InferenceServer
    repository: CatalogRepository
    database: str
    owner: int = 0  # id() of the session that started it: closing that connection stops the server


SERVERS: dict[int, RunningServer] = {}
"""Running servers of this process, by port."""
_LOCK = threading.Lock()


def _entries(stmt: Serve, session: Session, params: list) -> list[tuple[Union[ModelVersion, PipelineVersion], int]]:
    """Each item's catalog entry and reserved threads (lookup errors point at the name)."""
    out: list[tuple[Union[ModelVersion, PipelineVersion], int]] = []
    models: dict = {}  # model versions read once for the whole statement (pipelines share steps)
    for item in stmt.expressions:
        ref = item.this
        pipeline = bool(ref.args.get("pipeline"))
        entry = session.get_model(ref.model_name, ref.version_number, ref, pipeline=pipeline, models=models)
        word = "PIPELINE" if pipeline else "MODEL"
        opts = ITEM_OPTIONS.parse(item.args.get("options"), params, where=f"SERVE {word} {entry.name}")
        cores = artifacts.default_threads()
        if (opts["reserved_threads"] or 0) > cores:
            raise session.pointed(option_error("reserved_threads",
                f"SERVE {word} {entry.name}: reserved_threads = {opts['reserved_threads']} is more than this "
                f"machine's {cores} cores; reserve at most {cores}."), ref)
        _refuse_programs(entry, word, session, ref)
        out.append((entry, opts["reserved_threads"] or 0))
    names = [e.name for e, _ in out]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ProgrammingError(f'SERVE: "{twice[0]}" is named twice; a served name is one pipeline or one model '
                               "(a pipeline and a model of the same name cannot be served together).",
                               code="duplicate_served_name")
    return out


def _refuse_programs(entry, word: str, session: Session, ref) -> None:
    """A Python program (or a pipeline with one as a step) has no ONNX graph for the server to run.

    Raises:
        NotSupportedError: ``no_onnx_graph``, naming the program.
    """
    steps = [s.model for s in entry.steps] if getattr(entry, "kind", None) == "pipeline" else [entry]
    program = next((m for m in steps if getattr(m, "kind", None) == "python"), None)
    if program is not None:
        raise session.pointed(NotSupportedError(
            f"SERVE {word} {entry.name}: {program.label} is a Python program run as Python; SERVE runs ONNX graphs "
            "only. Query it with PREDICT, or import it as a whole graph (DESCRIBE MODEL says why it is not one).",
            code="no_onnx_graph"), ref)


def _resolver(session: Session) -> Callable[[str, str], Union[ModelVersion, PipelineVersion]]:
    """``resolve(name, kind)`` on a cursor of its own (the protocol's repository load runs in a server thread)."""
    cursor = session.duck.cursor()
    lock = threading.Lock()
    opened: list = []

    def resolve(name: str, kind: str) -> Union[ModelVersion, PipelineVersion]:
        with lock:
            try:
                if not opened:
                    opened.append(Catalog(cursor, read_only=True))
                catalog = opened[0]
                return catalog.pipelines.get(name) if kind == "pipeline" else catalog.get(name)
            except Error as exc:
                raise LookupError(str(exc)) from None

    return resolve


def _server_at(port: Optional[int], where: str) -> RunningServer:
    with _LOCK:
        if port is None:
            if not SERVERS:
                raise ProgrammingError(f"{where}: no server is running in this process (start one with SERVE).",
                                       code="server_not_found")
            if len(SERVERS) != 1:
                raise ProgrammingError(f"{where}: {len(SERVERS)} servers are running; name one with ON PORT n "
                                       f"({', '.join(map(str, sorted(SERVERS)))})", code="server_not_found")
            return next(iter(SERVERS.values()))
        if port not in SERVERS:
            raise ProgrammingError(f"{where}: no server of this process runs on port {port}"
                                   + (f"; running: {', '.join(map(str, sorted(SERVERS)))}" if SERVERS else ""),
                                   code="server_not_found")
        return SERVERS[port]


def _port(stmt, params: list) -> Optional[int]:
    node = stmt.args.get("port")
    if node is None:
        return None
    port = value(node, params)
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ProgrammingError(f"PORT must be an integer from 0 to 65535, not {sql_text(port)}.",
                               code="invalid_option")
    return port


_SERVED_COLUMNS = [(n, t, None, None, None, None, True) for n, t in
                   (("url", "VARCHAR"), ("name", "VARCHAR"), ("kind", "VARCHAR"), ("version", "VARCHAR"),
                    ("action", "VARCHAR"))]


@handles(Serve)
def _serve(stmt: Serve, session: Session, params: list) -> Result:
    action = stmt.args.get("action") or "start"
    port = _port(stmt, params)
    if action == "start":
        return _start(stmt, session, params, port, SERVE_OPTIONS.parse(stmt, params, where="SERVE"))
    if stmt.args.get("options"):
        raise option_error(stmt.args["options"][0].this.name.lower(), f"SERVE {action.upper()}: server options are "
                           "given when it starts, not here.")
    running = _server_at(port, f"SERVE {action.upper()}")
    rows: list[tuple[str, str, Optional[str], Optional[str], str]] = []
    if action == "add":
        added = running.repository.add_many([(e, r, e.name) for e, r in _entries(stmt, session, params)])
        rows = [(running.server.url, se.name, se.kind, se.version, "added") for se in added]
    else:
        names = [_served_name(item, running.repository, session) for item in stmt.expressions]  # all, or none
        for name in dict.fromkeys(names):  # (an item named twice is removed once)
            running.repository.remove(name)
            rows.append((running.server.url, name, None, None, "removed"))
    return Result(session.duck, description=list(_SERVED_COLUMNS), rows=rows)


def _served_name(item, repository, session: Session) -> str:
    """The served name a ``SERVE REMOVE`` item names, checked before anything is removed: served, as the kind it
    names (MODEL or PIPELINE), at the version it names (``VERSION n``, or the one ``ALIAS a`` names now).

    Raises:
        ProgrammingError: ``not_served`` pointing at the item.
    """
    ref = item.this
    name = ref.model_name.lower()
    wanted = session.get_model(ref.model_name, None, ref).version if ref.alias_name is not None else ref.version_number
    kind = "pipeline" if ref.args.get("pipeline") else "model"
    try:
        served = repository.get(name, None if wanted is None else str(wanted))
        if served.kind != kind:
            raise LookupError(f'"{name}" is served as a {served.kind}, not a {kind}: SERVE REMOVE {served.kind.upper()} '
                              f"{name}")
    except LookupError as exc:
        raise session.pointed(ProgrammingError(f"SERVE REMOVE: {exc}", code="not_served"), ref) from None
    return served.name


def _start(stmt: Serve, session: Session, params: list, port: Optional[int], opts: OptionValues) -> Result:
    from modelsql.serving import InferenceServer

    device = _device(opts["device"])
    token = _token(opts)
    port = DEFAULT_PORT if port is None else port
    host = stmt.args["host"].this if stmt.args.get("host") is not None else "127.0.0.1"
    _check_exposure(host, token, opts["allow_unauthenticated"])
    with _LOCK:
        if port and port in SERVERS:
            raise OperationalError(f"SERVE: this process already serves on port {port} ({SERVERS[port].server.url}); "
                                   "use SERVE ADD ... ON PORT n, or STOP SERVER ON PORT n first.", code="port_in_use")
    entries = _entries(stmt, session, params)
    budget = opts["memory_budget_mb"]
    repo = CatalogRepository(session.store, _resolver(session), threads=opts["threads"] or artifacts.default_threads(),
                             budget_bytes=None if budget is None else int(budget * (1 << 20)),
                             share_structures=opts["share_structures"], merge_families=opts["merge_families"],
                             device=device)
    try:
        repo.add_many([(entry, reserved, entry.name) for entry, reserved in entries])
        server = InferenceServer(repo, host=host, port=port, max_batch_size=opts["max_batch_size"],
                                 max_queue_delay_ms=opts["max_queue_delay_ms"],
                                 max_request_bytes=opts["max_request_mb"] << 20, token=token,
                                 allow_unauthenticated=opts["allow_unauthenticated"])
        repo.on_step = server.metrics.observe_step
        server.start()
    except OSError as exc:
        repo.close()
        in_use = getattr(exc, "errno", None) == errno.EADDRINUSE or "in use" in str(exc).lower()
        raise OperationalError(f"SERVE: cannot listen on {host}:{port}: {exc}",
                               code="port_in_use" if in_use else "listen_failed") from None
    except BaseException:
        repo.close()
        raise
    with _LOCK:
        SERVERS[server.port] = RunningServer(server, repo, session.database, id(session))
    rows = [(server.url, r["name"], r["kind"], r["version"], "serving") for r in repo.resident()]
    return Result(session.duck, description=list(_SERVED_COLUMNS), rows=rows)


def _token(opts: OptionValues) -> Optional[str]:
    """SERVE's bearer token: the ``token`` option, else :data:`TOKEN_ENV`, else None.

    Raises:
        ProgrammingError: ``invalid_option``, a token that is not RFC 6750 token characters.
    """
    token = opts["token"] if "token" in opts.given else os.environ.get(TOKEN_ENV) or None
    if token is None:
        return None
    if not _TOKEN.fullmatch(token):
        where = "token" if "token" in opts.given else TOKEN_ENV
        raise option_error("token", f"SERVE: {where} must be a bearer token: letters, digits and - . _ ~ + / "
                                    "(then = signs), not empty.")
    return token


def _check_exposure(host: str, token: Optional[str], allowed: bool) -> None:
    """Refuse a host other machines can reach when the server has no token and that was not allowed.

    Raises:
        ProgrammingError: ``unauthenticated_host``.
    """
    from modelsql.serving import is_loopback

    if token or allowed or is_loopback(host):
        return
    raise ProgrammingError(
        f"SERVE: ON HOST '{host}' can be reached from other machines, and the server has no authentication: "
        f"give it a token (WITH (token = '...'), or the environment variable {TOKEN_ENV}; clients then send "
        "Authorization: Bearer <token>), or say WITH (allow_unauthenticated = true).", code="unauthenticated_host")


def _device(device: str) -> str:
    """SERVE's ``device`` option (read by the schema): ``'cpu'`` (the default: ``'auto'`` means it too, since
    serving runs small batches whose device the cost function has no traces for), ``'cuda'`` or ``'cuda:N'``.

    Raises:
        NotSupportedError: ``device_not_available``.
    """
    device = devices.require(device, "SERVE")
    return "cpu" if device == "auto" else device


@handles(StopServer)
def _stop(stmt: StopServer, session: Session, params: list) -> Result:
    running = _server_at(_port(stmt, params), "STOP SERVER")
    with _LOCK:
        SERVERS.pop(running.server.port, None)
    running.server.stop()
    running.repository.close()
    if running.database == session.database:
        record_served_traces(session, running.repository.sampler, running.repository.device)  # sampled run times, for the cost model
    return Result(session.duck, rowcount=1)


def stop_all(owner=None) -> None:
    """Stop every server of this process (tests, and the CLI on exit), or those ``owner`` (a session) started."""
    with _LOCK:
        ports = [p for p, r in SERVERS.items() if owner is None or r.owner == id(owner)]
        running = [SERVERS.pop(p) for p in ports]
    for r in running:
        r.server.stop()
        r.repository.close()


_SHOW_COLUMNS = [(n, t, None, None, None, None, True) for n, t in (
    ("url", "VARCHAR"), ("name", "VARCHAR"), ("kind", "VARCHAR"), ("version", "VARCHAR"), ("state", "VARCHAR"),
    ("batch_group", "VARCHAR"), ("steps", "INTEGER"), ("shared_steps", "INTEGER"), ("loaded_steps", "INTEGER"),
    ("own_bytes", "BIGINT"),
    ("shared_bytes", "BIGINT"), ("reserved_threads", "INTEGER"), ("started_at", "TIMESTAMP WITH TIME ZONE"),
    ("device", "VARCHAR"), ("captured", "VARCHAR"), ("reason", "VARCHAR"))]


@handles(ShowServers, reads_only=True)
def _show(stmt: ShowServers, session: Session, params: list) -> Result:
    with _LOCK:
        running = sorted(SERVERS.items())
    rows = []
    for _, r in running:
        for e in r.repository.resident():
            rows.append((r.server.url, e["name"], e["kind"], e["version"], e["state"], e["group"], e["steps"],
                         e["shared_steps"], e["loaded_steps"], e["own_bytes"], e["shared_bytes"],
                         e["reserved_threads"], r.server.started_at, e["device"], e["captured"], e["reason"] or None))
    return Result(session.duck, description=list(_SHOW_COLUMNS), rows=rows)
