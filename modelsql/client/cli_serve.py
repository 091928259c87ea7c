"""``modelsql serve``: run SERVE from the command line and keep serving until interrupted.

    modelsql serve -d shop.duckdb --pipeline sentiment --pipeline spam --model churn --port 8000 \\
        [--host 127.0.0.1] [--max-batch-size 32] [--max-queue-delay-ms 1] [--memory-budget-mb 512]

It prints the server's URL and what it serves, then waits; Ctrl-C (SIGINT) or
SIGTERM stops the server (draining the requests in progress) and exits 0. The
statement it runs is printed first, so the same server can be started from SQL.

The bearer token is read from the environment variable ``MODELSQL_SERVE_TOKEN``
(never from the command line, which other users of the machine can read); a
``--host`` other machines can reach needs it, or ``--allow-unauthenticated``.
"""

from __future__ import annotations

import argparse
import signal
import threading

__all__ = ["add_parser", "serve_statement", "run"]


def add_parser(sub) -> argparse.ArgumentParser:
    """The ``serve`` subcommand's arguments (the ``-d/--database`` options are added by the caller)."""
    p = sub.add_parser("serve", help="serve catalog pipelines and models over the Open Inference Protocol (HTTP)")
    p.add_argument("--pipeline", action="append", default=[], metavar="NAME", help="a pipeline to serve (repeatable)")
    p.add_argument("--model", action="append", default=[], metavar="NAME", help="a model to serve (repeatable)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 picks a free one)")
    p.add_argument("--max-batch-size", type=int, metavar="ROWS")
    p.add_argument("--max-queue-delay-ms", type=float, metavar="MS")
    p.add_argument("--threads", type=int, metavar="N")
    p.add_argument("--memory-budget-mb", type=float, metavar="MB")
    p.add_argument("--device", metavar="DEVICE", help="cpu (the default), cuda or cuda:N: where the models run")
    p.add_argument("--allow-unauthenticated", action="store_true",
                   help="serve on a --host other machines can reach without a token (MODELSQL_SERVE_TOKEN)")
    return p


def _name(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


def serve_statement(args: argparse.Namespace) -> str:
    """The SERVE statement the arguments stand for.

    Raises:
        ValueError: nothing to serve.
    """
    items = [f"PIPELINE {_name(p)}" for p in args.pipeline] + [f"MODEL {_name(m)}" for m in args.model]
    if not items:
        raise ValueError("modelsql serve: name at least one --pipeline or --model")
    host = args.host.replace("'", "''")
    options = {k: getattr(args, k) for k in ("max_batch_size", "max_queue_delay_ms", "threads", "memory_budget_mb")}
    given = ", ".join(f"{k} = {v}" for k, v in options.items() if v is not None)
    if args.device is not None:
        given += (", " if given else "") + "device = '" + args.device.replace("'", "''") + "'"
    if getattr(args, "allow_unauthenticated", False):
        given += (", " if given else "") + "allow_unauthenticated = true"
    return (f"SERVE {', '.join(items)} ON HOST '{host}' PORT {args.port}" + (f" WITH ({given})" if given else ""))


def run(args: argparse.Namespace, database: str, console, err) -> int:
    """Start the server, print its URL, serve until SIGINT/SIGTERM; the exit status."""
    import modelsql
    from modelsql.engine.serve.statements import stop_all

    try:
        sql = serve_statement(args)
    except ValueError as exc:
        err.print(str(exc), highlight=False)
        return 2
    con = modelsql.connect(database)
    done = threading.Event()
    try:
        cur = con.cursor()
        cur.execute(sql)
        rows = cur.fetchall()
        for sig in (signal.SIGINT, signal.SIGTERM):  # before the URL is printed: a client may stop us at once
            signal.signal(sig, lambda *_: done.set())
        console.print(f"-- {sql}", highlight=False)
        console.print(f"serving at {rows[0][0]}", highlight=False)
        for _, name, kind, version, _ in rows:
            console.print(f"  {kind} {name} version {version}", highlight=False)
        console.file.flush()
        done.wait()
        return 0
    finally:
        stop_all()
        con.close()
