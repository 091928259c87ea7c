"""What a Python program must satisfy before PREDICT runs it as Python, and how it is batched.

PREDICT's answer is a function of each row, the same at every batch size and in every call. A program that
is not a whole graph is checked here:

* :func:`check_deterministic`: two calls on the same example give the same outputs (state kept across
  calls that changes outputs, or randomness, would make PREDICT's answer depend on call order: refused);
* :func:`batching`: why the program must be called one row at a time, or None. Testing cannot prove that
  rows are independent, so the rule is conservative: one row per call when a row's outputs differed
  between its batch and itself alone on any test batch (the example, the differential test's batches of
  1, 7, 8, 32 and 1000 rows, scaled, negated), when the gate proved a branch on the batch size
  (``batch_range``), when ``torch.export`` failed on data-dependent control flow (an ``if`` on a tensor
  value may read other rows), or when ONNX Runtime and eager disagreed (``differential_test``). The user
  may assert independence (``row_independent = true``) for the last three, never against a measurement.
"""

from __future__ import annotations

import copy
import time
from typing import Optional

from modelsql.errors import NotSupportedError
from modelsql.converters.python_program import Program, call, close, row_dependence, take, to_numpy
from modelsql.converters.whole_graph import GateResult, cases

__all__ = ["check_deterministic", "batching", "PER_ROW_BUDGET_S"]

PER_ROW_BUDGET_S = 5.0
"""Longest the row-by-row check of the 1000-row batch may take (estimated from the 32-row one); past it
that batch is skipped and the decision says so."""


def check_deterministic(prog: Program, label: str) -> None:
    """Raise NotSupportedError ``nondeterministic_program`` when two calls on the example differ."""
    module = copy.deepcopy(prog.module)
    first = to_numpy(call(module, prog.example, label))
    second = to_numpy(call(module, prog.example, label))
    diff = close(first, second)
    if diff is not None:
        raise NotSupportedError(
            f"{label}: two calls on the same example give different outputs ({diff}): state kept across calls "
            "or randomness would make PREDICT's answer depend on the order of its calls. Make forward a function "
            "of its input (keep counters and caches out of the outputs; no sampling at inference).",
            code="nondeterministic_program")


def batching(prog: Program, gate: Optional[GateResult], row_independent: bool = False) -> Optional[str]:
    """Why ``prog`` must run one row per call (see the module docstring), or None."""
    tests = list(cases(prog))
    measured = row_dependence(prog, [prog.example] + [a for w, a in tests if "1000" not in w])
    if measured is not None:
        return measured
    big = next(a for w, a in tests if "1000" in w)
    if _row_seconds(prog, big) * len(big[0]) <= PER_ROW_BUDGET_S:
        measured = row_dependence(prog, [big])
        if measured is not None:
            return measured
    if gate is None or row_independent:
        return None
    if gate.rule == "batch_range":
        return f"a branch on the batch size ({gate.reason.split(' (')[0]})"
    if gate.rule == "export_failed" and gate.suggestion:
        return ("data-dependent control flow (torch.export: " + gate.reason.split(": ", 1)[-1][:120] + "); an if on "
                "a tensor value may read other rows. Assert row_independent = true to batch it")
    if gate.rule == "differential_test":
        return f"ONNX Runtime and eager disagreed on a test batch ({gate.reason[:120]})"
    return None


def _row_seconds(prog: Program, args: tuple) -> float:
    start = time.perf_counter()
    for i in range(min(8, len(args[0]))):
        call(prog.module, take(args, slice(i, i + 1)), "the program")
    return (time.perf_counter() - start) / max(1, min(8, len(args[0])))
