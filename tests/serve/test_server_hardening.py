"""The SERVE server against slow, idle and unauthenticated clients, and its state (issue 21, items 15-17).

Real servers on 127.0.0.1, real clients: raw sockets in threads for slow clients, ``http.client``, the real
``tritonclient.http`` (from the test thread only: it is gevent-based), real catalog databases for SERVE.

* 15: slow headers time out (408), connections are capped (the oldest waiting one makes room), a slow body
  times out (408), the bytes of unfinished bodies are bounded (503), a large body is parsed off the event
  loop; good requests keep their latency while all of that goes on (a few seconds here; ``-m serve_stress``
  runs a thousand slow clients for longer).
* 16: the default host is 127.0.0.1; a bearer token is required on every endpoint but ``/v2/health/*``;
  a host other machines reach is refused without a token unless ``allow_unauthenticated``.
* 17: SERVE ADD / REMOVE never fail requests for the models that stay; a model whose blobs were vacuumed
  is not ready and says why; STOP drains; NaN and infinities are written as Triton writes them; ragged
  nested ``data`` is refused naming the input.
"""

from __future__ import annotations

import http.client
import json
import math
import socket
import threading
import time

import numpy as np
import pytest
import tritonclient.http as triton
from onnx import TensorProto, helper, numpy_helper
from tritonclient.utils import InferenceServerException

import modelsql
from modelsql import errors
from modelsql.engine.serve.statements import stop_all
from modelsql.serving import ConnectionLimits, InferenceServer, UnauthenticatedExposure, is_loopback
from modelsql.serving.simple import OrtRepository

RNG = np.random.default_rng(21)
W = RNG.normal(size=(4, 3)).astype(np.float32)


def mlp(seed: int = 0) -> bytes:
    """X FLOAT [N, 4] -> y FLOAT [N, 3] = X @ W + B (weights from ``seed``: one family for all seeds)."""
    r = np.random.default_rng(seed)
    w, b = r.normal(size=(4, 3)).astype(np.float32), r.normal(size=3).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["X", "W"], ["xw"]), helper.make_node("Add", ["xw", "B"], ["y"])]
    graph = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])],
                              [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "B")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model.SerializeToString()


def odd_values() -> bytes:
    """X FLOAT [N, 4] -> log FLOAT [N, 4] = log(X), inv FLOAT [N, 4] = 1 / X: NaN and infinities on demand."""
    nodes = [helper.make_node("Log", ["X"], ["log"]), helper.make_node("Reciprocal", ["X"], ["inv"])]
    graph = helper.make_graph(nodes, "odd", [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 4])],
                              [helper.make_tensor_value_info("log", TensorProto.FLOAT, ["N", 4]),
                               helper.make_tensor_value_info("inv", TensorProto.FLOAT, ["N", 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model.SerializeToString()


class SlowRepo(OrtRepository):
    """ONNX Runtime models; a batch of model "slow" takes 0.6 s more (a slow model)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.slow_started = threading.Event()

    def run_group(self, group, items):
        if group == "slow":
            self.slow_started.set()
            time.sleep(0.6)
        return super().run_group(group, items)


def body_of(x: np.ndarray, name: str = "X") -> bytes:
    return json.dumps({"inputs": [{"name": name, "shape": list(x.shape), "datatype": "FP32",
                                   "data": x.ravel().tolist()}]}).encode()


def post(host: str, port: int, path: str, body: bytes, headers=None, timeout=10.0):
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        conn.request("POST", path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def get(host: str, port: int, path: str, headers=None):
    conn = http.client.HTTPConnection(host, port, timeout=10)
    try:
        conn.request("GET", path, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def read_all(s: socket.socket, timeout: float) -> bytes:
    """What the server sends until it closes the connection (or ``timeout`` passes)."""
    s.settimeout(timeout)
    chunks = []
    try:
        while True:
            data = s.recv(65536)
            if not data:
                break
            chunks.append(data)
    except (socket.timeout, ConnectionResetError):
        pass
    return b"".join(chunks)


def status_of(raw: bytes) -> int:
    return int(raw.split(b" ", 2)[1]) if raw.startswith(b"HTTP/1.1 ") else 0


@pytest.fixture
def server():
    repo = SlowRepo({"mlp": mlp(), "odd": odd_values()})
    srv = InferenceServer(repo, max_queue_delay_ms=0.5, limits=ConnectionLimits(max_connections=64, header_timeout_s=1.0),
                          body_timeout_s=1.0, max_request_bytes=64 << 20, max_buffered_bytes=48 << 20).start()
    yield srv
    srv.stop()
    repo.close()


def good_request(srv, x=None) -> float:
    x = np.ones((1, 4), np.float32) if x is None else x
    t0 = time.perf_counter()
    status, _, raw = post(srv.host, srv.port, "/v2/models/mlp/infer", body_of(x))
    assert status == 200, raw
    return time.perf_counter() - t0


# -- 15: slow and idle clients ------------------------------------------------------------------------


def test_slow_headers_get_408_and_are_closed(server):
    with socket.create_connection((server.host, server.port)) as s:
        s.sendall(b"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\n")
        t0 = time.perf_counter()
        for _ in range(6):  # a header line every 0.25 s: never complete
            time.sleep(0.25)
            try:
                s.sendall(b"X-Slow: 1\r\n")
            except OSError:
                break
        raw = read_all(s, 3.0)
    assert status_of(raw) == 408 and b"within 1 s" in raw, raw
    assert time.perf_counter() - t0 < 3.0
    with socket.create_connection((server.host, server.port)) as idle:  # connected, sends nothing
        assert read_all(idle, 3.0) == b""  # closed after the deadline (no request begun: no answer)
    assert server.guard.timed_out >= 2


def test_headers_larger_than_the_limit_get_431(server):
    with socket.create_connection((server.host, server.port)) as s:
        s.sendall(b"GET /v2 HTTP/1.1\r\nHost: x\r\n")
        try:
            for _ in range(200):
                s.sendall(b"X-Big: " + b"a" * 1000 + b"\r\n")
        except OSError:
            pass
        raw = read_all(s, 3.0)
    assert status_of(raw) == 431, raw[:200]


def test_connections_are_capped_and_idle_ones_make_room(server):
    idle = [socket.create_connection((server.host, server.port)) for _ in range(150)]
    try:
        for s in idle[:100]:
            s.sendall(b"POST /v2/models/mlp/infer HTTP/1.1\r\n")  # began a request, never finishes it
        time.sleep(0.1)
        assert server.guard.connections <= 65
        for _ in range(5):
            assert good_request(server) < 2.0  # a whole request gets through the crowd at once (not after a timeout)
        assert server.guard.evicted >= 150 - 64
    finally:
        for s in idle:
            s.close()


def test_slow_body_gets_408(server):
    body = body_of(np.ones((1, 4), np.float32))
    with socket.create_connection((server.host, server.port)) as s:
        s.sendall(b"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body))
        t0 = time.perf_counter()
        try:
            for i in range(len(body)):  # one byte every 0.1 s: 5 s for the whole body
                s.sendall(body[i:i + 1])
                time.sleep(0.1)
                if time.perf_counter() - t0 > 3:
                    break
        except OSError:
            pass
        raw = read_all(s, 3.0)
    assert status_of(raw) == 408 and b'model \\"mlp\\"' in raw and b"body_timeout_s" in raw, raw
    assert time.perf_counter() - t0 < 3.5


def test_unfinished_bodies_are_bounded_by_max_buffered_bytes(server):
    chunk = b" " * (1 << 20)
    holders = []
    try:
        for _ in range(3):  # three bodies of 20 MiB each, 17 MiB sent: 51 MiB held > 48 MiB
            s = socket.create_connection((server.host, server.port))
            s.sendall(b"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % (20 << 20))
            holders.append(s)
            for _ in range(17):
                try:
                    s.sendall(chunk)
                except OSError:
                    break
        answers = [read_all(s, 1.5) for s in holders]
    finally:
        for s in holders:
            s.close()
    refused = [a for a in answers if status_of(a) == 503]
    assert refused and b"max_buffered_bytes" in refused[0], [a[:120] for a in answers]
    assert good_request(server) < 2.0


def _slow_clients(srv, n: int, stop: threading.Event, sockets: list) -> None:
    """``n`` slowloris connections, a header line each every 0.2 s, reconnecting when closed."""
    def connect():
        s = socket.create_connection((srv.host, srv.port))
        s.sendall(b"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\n")
        return s

    conns = [connect() for _ in range(n)]
    sockets.extend(conns)
    while not stop.is_set():
        for k, s in enumerate(conns):
            try:
                s.sendall(b"X-Slow: 1\r\n")
            except OSError:
                s.close()
                try:
                    conns[k] = connect()
                    sockets.append(conns[k])
                except OSError:
                    pass
        stop.wait(0.2)


def _slow_bodies(srv, stop: threading.Event) -> None:
    while not stop.is_set():
        with socket.create_connection((srv.host, srv.port)) as s:
            s.sendall(b"POST /v2/models/mlp/infer HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n{")
            stop.wait(0.3)


def _big_json(srv, stop: threading.Event, rows: int, answers: list) -> None:
    x = np.ones((rows, 4), np.float32)
    big = body_of(x)
    while not stop.is_set():
        status, _, _ = post(srv.host, srv.port, "/v2/models/mlp/infer", big, timeout=60)
        answers.append(status)


_RECONNECTS: list[int] = []
"""Good requests whose connection the flood's churn closed before their headers were read (see below)."""


def _good_request_under_attack(srv, x) -> float:
    """A good request's latency while the slow clients churn: a connection the server closed to make room before it
    read the request (its connection cap evicts the connection waiting longest) is opened again once, as a client
    does, the time counting from the first try; the test bounds how often that happens."""
    t0 = time.perf_counter()
    try:
        good_request(srv, x)
    except (BrokenPipeError, ConnectionResetError):
        _RECONNECTS.append(1)
        good_request(srv, x)
    return time.perf_counter() - t0


def _latency_under_attack(srv, seconds: float, slow: int, rows: int) -> tuple[list[float], list[int]]:
    stop = threading.Event()
    sockets: list = []
    big: list = []
    workers = [threading.Thread(target=_slow_clients, args=(srv, slow, stop, sockets)),
               threading.Thread(target=_slow_bodies, args=(srv, stop)),
               threading.Thread(target=_slow_bodies, args=(srv, stop)),
               threading.Thread(target=_big_json, args=(srv, stop, rows, big))]
    for w in workers:
        w.start()
    time.sleep(0.3)
    latencies = []
    try:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            latencies.append(_good_request_under_attack(srv, RNG.normal(size=(2, 4)).astype(np.float32)))
            time.sleep(0.01)
    finally:
        stop.set()
        for w in workers:
            w.join(60)
        for s in sockets:
            s.close()
    return latencies, big


def test_good_requests_keep_their_latency_while_bad_clients_are_connected(server):
    quiet = sorted(good_request(server) for _ in range(20))
    _RECONNECTS.clear()
    latencies, big = _latency_under_attack(server, seconds=2.5, slow=200, rows=300_000)
    latencies.sort()
    assert len(latencies) > 20
    assert len(_RECONNECTS) <= max(1, len(latencies) // 20), (len(_RECONNECTS), len(latencies))  # rare, not the rule
    median, worst = latencies[len(latencies) // 2], latencies[-1]
    # the median stays within a few ms of the quiet one, and no request waits for a large body's parsing (the
    # bounds leave room for a second test process on the same cores: CI runs two)
    assert median < quiet[len(quiet) // 2] + 0.05, (quiet[:3], latencies[-5:])
    assert worst < 1.0, latencies[-5:]
    assert big and all(s == 200 for s in big)
    assert server.guard.timed_out + server.guard.evicted > 0


@pytest.mark.serve_stress
def test_good_requests_keep_their_latency_under_a_thousand_slow_clients(request):
    if "serve_stress" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("a thousand slow clients for 20 s run only with -m serve_stress")
    repo = SlowRepo({"mlp": mlp()})
    srv = InferenceServer(repo, limits=ConnectionLimits(header_timeout_s=2.0), body_timeout_s=2.0).start()
    try:
        latencies, big = _latency_under_attack(srv, seconds=20, slow=1000, rows=1_000_000)
        latencies.sort()
        median, p99 = latencies[len(latencies) // 2], latencies[int(len(latencies) * 0.99)]
        assert median < 0.05 and p99 < 1.0, (median, p99, latencies[-5:])  # 1 M-row JSON bodies: see README
        assert big and all(s == 200 for s in big)
    finally:
        srv.stop()
        repo.close()


# -- 16: authentication ------------------------------------------------------------------------------


def test_token_is_required_everywhere_but_health():
    repo = OrtRepository({"mlp": mlp()})
    srv = InferenceServer(repo, token="s3cret-token").start()
    try:
        host = f"{srv.host}:{srv.port}"
        auth = {"Authorization": "Bearer s3cret-token"}
        client = triton.InferenceServerClient(host)
        assert client.is_server_live() and client.is_server_ready()  # the probes need no token
        for call in (lambda: client.get_server_metadata(), lambda: client.get_model_metadata("mlp"),
                     lambda: client.get_model_repository_index(), lambda: client.unload_model("mlp")):
            with pytest.raises(InferenceServerException, match="Bearer"):
                call()
        inp = triton.InferInput("X", [2, 4], "FP32")
        inp.set_data_from_numpy(np.ones((2, 4), np.float32))
        with pytest.raises(InferenceServerException, match="Bearer"):
            client.infer("mlp", [inp])
        with pytest.raises(InferenceServerException, match="wrong"):
            client.infer("mlp", [inp], headers={"Authorization": "Bearer nope"})
        result = client.infer("mlp", [inp], headers=auth)
        assert result.as_numpy("y").shape == (2, 3)
        assert client.is_model_ready("mlp", headers=auth)
        client.close()
        for path in ("/metrics", "/v2", "/v2/models/mlp", "/v2/models/nope/ready", "/nothing/here"):
            status, headers, raw = get(srv.host, srv.port, path)
            assert status == 401 and headers["www-authenticate"].startswith("Bearer"), (path, raw)
        status, _, _ = post(srv.host, srv.port, "/v2/repository/models/mlp/unload", b"")
        assert status == 401 and repo.ready("mlp")  # the repository extension is guarded too
        assert get(srv.host, srv.port, "/metrics", auth)[0] == 200
        # the scheme in any case (RFC 7235); the token exactly
        assert get(srv.host, srv.port, "/metrics", {"Authorization": "bearer s3cret-token"})[0] == 200
        assert get(srv.host, srv.port, "/metrics", {"Authorization": "Bearer S3CRET-token"})[0] == 401
        assert get(srv.host, srv.port, "/metrics", {"Authorization": "Basic s3cret-token"})[0] == 401
    finally:
        srv.stop()
        repo.close()


def test_server_refuses_wildcard_hosts_without_a_token():
    repo = OrtRepository({"mlp": mlp()})
    try:
        assert InferenceServer(repo).host == "127.0.0.1" and is_loopback("localhost") and is_loopback("::1")
        for host in ("0.0.0.0", "::"):
            assert not is_loopback(host)
            with pytest.raises(UnauthenticatedExposure, match="token"):
                InferenceServer(repo, host=host)
            InferenceServer(repo, host=host, token="t")  # allowed with a token
            InferenceServer(repo, host=host, allow_unauthenticated=True)  # or when asked
    finally:
        repo.close()


@pytest.fixture
def catalog(tmp_path):
    con = modelsql.connect(str(tmp_path / "serve21.duckdb"))
    for k, name in enumerate(("b", "c", "a", "d")):
        con.import_model(name, mlp(k))
    con.commit()
    yield con
    stop_all()
    con.close()


def test_serve_defaults_to_loopback_and_needs_a_token_for_a_wildcard(catalog, monkeypatch):
    cur = catalog.cursor()
    cur.execute("SERVE MODEL b ON PORT 0")
    url = cur.fetchall()[0][0]
    assert url.startswith("http://127.0.0.1:")
    cur.execute("STOP SERVER")
    monkeypatch.delenv("MODELSQL_SERVE_TOKEN", raising=False)
    for host in ("0.0.0.0", "::"):
        with pytest.raises(errors.ProgrammingError) as info:
            cur.execute(f"SERVE MODEL b ON HOST '{host}' PORT 0")
        assert info.value.code == "unauthenticated_host" and "allow_unauthenticated" in str(info.value)
    with pytest.raises(errors.ProgrammingError) as info:
        cur.execute("SERVE MODEL b ON PORT 0 WITH (token = 'has space')")
    assert info.value.code == "invalid_option"
    cur.execute("SERVE MODEL b ON HOST '0.0.0.0' PORT 0 WITH (allow_unauthenticated = true)")
    port = int(cur.fetchall()[0][0].rsplit(":", 1)[1])
    assert get("127.0.0.1", port, "/v2/models/b")[0] == 200
    cur.execute("STOP SERVER")
    monkeypatch.setenv("MODELSQL_SERVE_TOKEN", "from-the-env")  # the environment's token, on any host
    cur.execute("SERVE MODEL b ON HOST '0.0.0.0' PORT 0")
    port = int(cur.fetchall()[0][0].rsplit(":", 1)[1])
    assert get("127.0.0.1", port, "/v2/models/b")[0] == 401
    assert get("127.0.0.1", port, "/v2/models/b", {"Authorization": "Bearer from-the-env"})[0] == 200
    cur.execute("STOP SERVER")
    cur.execute("SERVE MODEL b ON PORT 0 WITH (token = ?)", ["given"])
    port = int(cur.fetchall()[0][0].rsplit(":", 1)[1])
    assert get("127.0.0.1", port, "/v2/models/b", {"Authorization": "Bearer given"})[0] == 200
    assert get("127.0.0.1", port, "/v2/models/b", {"Authorization": "Bearer from-the-env"})[0] == 401


# -- 17: serving state -------------------------------------------------------------------------------


def _hammer(host: str, names: tuple, stop: threading.Event, seen: dict, errors_seen: list) -> None:
    conn = http.client.HTTPConnection(host, timeout=10)
    body = body_of(np.ones((1, 4), np.float32))
    k = 0
    while not stop.is_set():
        name = names[k % len(names)]
        k += 1
        conn.request("POST", f"/v2/models/{name}/infer", body)
        resp = conn.getresponse()
        raw = resp.read()
        seen[resp.status] = seen.get(resp.status, 0) + 1
        if resp.status != 200:
            errors_seen.append((name, resp.status, raw[:200]))


def test_serve_add_and_remove_never_fail_requests_for_the_other_models(catalog):
    cur = catalog.cursor()
    cur.execute("SERVE MODEL b, MODEL c ON PORT 0")  # one family: b, c; a sorts first and joins it
    host = cur.fetchall()[0][0].split("//")[1]
    stop, seen, failures = threading.Event(), {}, []
    workers = [threading.Thread(target=_hammer, args=(host, ("b", "c"), stop, seen, failures)) for _ in range(4)]
    for w in workers:
        w.start()
    try:
        changer = catalog.cursor()
        for _ in range(6):
            changer.execute("SERVE ADD MODEL a")
            time.sleep(0.03)
            changer.execute("SERVE REMOVE MODEL a")
            time.sleep(0.03)
    finally:
        stop.set()
        for w in workers:
            w.join(30)
    assert not failures, failures[:3]
    assert seen.get(200, 0) > 50


def test_a_served_model_whose_blobs_are_gone_is_not_ready(catalog):
    cur = catalog.cursor()
    cur.execute("SERVE MODEL b, MODEL d ON PORT 0")
    host, port = cur.fetchall()[0][0].split("//")[1].split(":")
    port = int(port)
    cur.execute("DROP MODEL d")
    catalog.commit()
    cur.execute("VACUUM MODELS")
    assert cur.fetchall()[0][0] > 0  # its blobs are gone
    time.sleep(1.1)  # the served entries' blobs are checked at most once a second
    status, _, raw = get(host, port, "/v2/models/d/ready")
    assert status == 400 and json.loads(raw)["ready"] is False
    assert "blobs are gone" in json.loads(raw)["reason"]
    status, _, raw = post(host, port, "/v2/models/d/infer", body_of(np.ones((1, 4), np.float32)))
    assert status == 503 and "not ready" in json.loads(raw)["error"] and "vacuum" in json.loads(raw)["error"]
    client = triton.InferenceServerClient(f"{host}:{port}")
    assert not client.is_model_ready("d") and client.is_model_ready("b")
    index = {e["name"]: e for e in client.get_model_repository_index()}
    assert index["d"]["state"] == "UNAVAILABLE" and "blobs are gone" in index["d"]["reason"]
    client.close()
    cols = [d[0] for d in cur.execute("SHOW SERVERS").description]
    rows = {r[1]: dict(zip(cols, r)) for r in cur.fetchall()}
    assert rows["d"]["state"] == "UNAVAILABLE" and "blobs are gone" in rows["d"]["reason"]
    assert rows["b"]["state"] == "READY" and rows["b"]["reason"] is None
    assert good_request_at(host, port, "b") == 200


def good_request_at(host: str, port: int, name: str) -> int:
    return post(host, port, f"/v2/models/{name}/infer", body_of(np.ones((1, 4), np.float32)))[0]


def _client(srv, keep_alive: bool, stop: threading.Event, outcomes: list) -> None:
    """Requests back to back: on one connection, reconnecting only when the server said Connection: close
    (``keep_alive``), or each on a new connection."""
    body = body_of(np.ones((1, 4), np.float32))
    conn = None
    while not stop.is_set():
        fresh = conn is None
        try:
            if fresh:
                conn = http.client.HTTPConnection(srv.host, srv.port, timeout=10)
            conn.request("POST", "/v2/models/mlp/infer", body)
            resp = conn.getresponse()
            resp.read()
            outcomes.append(("status", resp.status))
            if not keep_alive or resp.getheader("connection", "").lower() == "close":
                conn.close()
                conn = None
        except ConnectionRefusedError:
            outcomes.append(("refused", fresh))
            return
        except (OSError, http.client.HTTPException) as exc:
            outcomes.append((type(exc).__name__, fresh))
            conn = None


def test_stop_drains_and_resets_no_connection():
    repo = SlowRepo({"mlp": mlp(), "slow": mlp()})
    srv = InferenceServer(repo, max_queue_delay_ms=0).start()
    stop = threading.Event()
    outcomes: list = []
    slow: list = []
    clients = [threading.Thread(target=_client, args=(srv, k % 2 == 0, stop, outcomes)) for k in range(8)]
    long = threading.Thread(target=lambda: slow.append(post(srv.host, srv.port, "/v2/models/slow/infer",
                                                             body_of(np.ones((1, 4), np.float32)))[0]))
    for c in clients:
        c.start()
    time.sleep(0.5)
    long.start()
    assert repo.slow_started.wait(10)  # the slow request is running
    try:
        srv.stop(timeout=5.0)
    finally:
        stop.set()
        for c in clients:
            c.join(15)
        long.join(15)
        repo.close()
    assert slow == [200]  # in flight when STOP began: finished, not cut off
    broken = [o for o in outcomes if o[0] not in ("status", "refused")]
    assert not broken, broken  # answered, or refused once the server stopped listening: never reset
    assert {o[1] for o in outcomes if o[0] == "status"} == {200}
    assert len([o for o in outcomes if o[0] == "status"]) > 20


def test_nan_and_infinite_outputs_are_written_as_triton_writes_them(server):
    x = np.array([[-1.0, 0.0, 1.0, math.e]], np.float32)
    status, headers, raw = post(server.host, server.port, "/v2/models/odd/infer", body_of(x))
    assert status == 200 and headers["content-type"] == "application/json"
    assert b"null" not in raw and b"NaN" in raw and b"-Infinity" in raw
    out = {o["name"]: o["data"] for o in json.loads(raw)["outputs"]}  # Python's json reads the tokens
    with np.errstate(divide="ignore", invalid="ignore"):
        log, inv = np.log(x), 1 / x
    np.testing.assert_array_equal(np.array(out["log"], np.float32), log.ravel())
    np.testing.assert_array_equal(np.array(out["inv"], np.float32), inv.ravel())
    client = triton.InferenceServerClient(f"{server.host}:{server.port}")
    inp = triton.InferInput("X", [1, 4], "FP32")
    inp.set_data_from_numpy(x, binary_data=False)
    for binary in (False, True):
        res = client.infer("odd", [inp], outputs=[triton.InferRequestedOutput(n, binary_data=binary)
                                                 for n in ("log", "inv")])
        np.testing.assert_array_equal(res.as_numpy("log"), log)
        np.testing.assert_array_equal(res.as_numpy("inv"), inv)
    client.close()


@pytest.mark.parametrize("data, where", [
    ([[1, 2, 3, 4], [5, 6, 7]], "data[1] has shape [3] but data[0] has shape [4]"),
    ([[1, 2, 3, 4], 5, 6, 7, 8], "data[1] has shape [] but data[0] has shape [4]"),
    ([[[1, 2], [3, 4]], [[5, 6], [7]]], "data[1][1] has shape [1]"),
])
def test_ragged_nested_data_is_400_naming_the_input(server, data, where):
    body = json.dumps({"inputs": [{"name": "X", "shape": [2, 4], "datatype": "FP32", "data": data}]}).encode()
    status, _, raw = post(server.host, server.port, "/v2/models/mlp/infer", body)
    message = json.loads(raw)["error"]
    assert status == 400 and 'input "X"' in message and "ragged" in message and where in message, message


def test_large_ragged_data_is_400_too(server):
    rows = [[1.0, 2.0, 3.0, 4.0]] * 40_000 + [[1.0, 2.0]]
    body = json.dumps({"inputs": [{"name": "X", "shape": [40_001, 4], "datatype": "FP32", "data": rows}]}).encode()
    status, _, raw = post(server.host, server.port, "/v2/models/mlp/infer", body)
    assert status == 400 and "data[40000] has shape [2]" in json.loads(raw)["error"]
