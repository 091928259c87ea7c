"""A closed-loop load generator for the Open Inference Protocol server, shared by the serving benchmarks
(``pretzel.py``, ``serving_latency.py``): raw HTTP/1.1 keep-alive requests on asyncio streams, so the client
costs little beside the server it measures."""

from __future__ import annotations

import asyncio
import json
import time

import numpy as np

__all__ = ["infer_request", "read_response", "closed_loop"]


def infer_request(name: str, inputs: list[dict]) -> bytes:
    """The bytes of ``POST /v2/models/{name}/infer`` with the Open Inference Protocol ``inputs``."""
    body = json.dumps({"inputs": inputs}).encode()
    return (f"POST /v2/models/{name}/infer HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


async def read_response(reader: asyncio.StreamReader) -> int:
    """Read one response (head and ``Content-Length`` body); its status code."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), 0)
    await reader.readexactly(length)
    return int(head.split(b" ", 2)[1])


async def closed_loop(port: int, queue: list[bytes], clients: int, warmup: int) -> dict:
    """Send ``queue`` in order over ``clients`` connections, each waiting for its answer before its next
    request; latencies (ms) and throughput (requests/s) of all but the first ``warmup`` requests, and how many
    of those were not 200."""
    latencies: list[float] = []
    errors = 0
    next_i = 0

    async def worker() -> None:
        nonlocal next_i, errors
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        while next_i < len(queue):
            i = next_i
            next_i += 1
            t = time.perf_counter()
            writer.write(queue[i])
            status = await read_response(reader)
            if i >= warmup:
                latencies.append(time.perf_counter() - t)
                errors += status != 200
        writer.close()

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(clients)))
    wall = time.perf_counter() - start
    lat = np.array(latencies) * 1000
    return {"p50_ms": float(np.percentile(lat, 50)), "p99_ms": float(np.percentile(lat, 99)),
            "throughput_rps": len(latencies) / wall, "errors": errors, "requests": len(latencies)}
