"""Diagnostic: the modules one PREDICT walks through (issue 23's "walk": a newcomer follows these).

Counts, with ``sys.setprofile``, the calls into modelsql's own code while ``cursor.execute`` + ``fetchall``
run one PREDICT of a scikit-learn model already loaded (a new text, so nothing is cached): the distinct
modules, the transitions between them in call order, the distinct caller -> callee module pairs, and the
calls from the query package into the session's methods. ``PYTHONPATH=<other checkout>`` counts another
revision (``benchmarks/revisions.py`` makes such checkouts).

Writes ``benchmarks/results/predict_path.json`` (``modules``, ``transitions``, ``module_pairs``).
Run: ``python benchmarks/predict_path.py``.
"""
import json
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import modelsql
from sklearn.linear_model import LogisticRegression
from sklearn.datasets import load_digits

X, y = load_digits(return_X_y=True)
d = tempfile.mkdtemp()
con = modelsql.connect(os.path.join(d, "w.duckdb"))
con.import_model("m", LogisticRegression(max_iter=200).fit(X[:200], y[:200]), example_input=X[:10].astype(np.float32))
con.execute("CREATE TABLE t AS SELECT " + ", ".join(f"{v}::FLOAT AS c{i}" for i, v in enumerate(X[0])))
con.execute("SELECT * FROM PREDICT(MODEL m, TABLE t)").fetchall()  # warm: imports, sessions
seq = []
edges = set()
ups = set()
def prof(frame, event, arg):
    if event == "call":
        mod = frame.f_globals.get("__name__", "")
        if mod.startswith("modelsql"):
            caller = frame.f_back.f_globals.get("__name__", "") if frame.f_back else ""
            if caller.startswith("modelsql") and caller != mod:
                edges.add((caller, mod))
                if (".query." in caller or ".planner." in caller) and mod.endswith(".session"):
                    ups.add((caller, frame.f_code.co_name))
            if not seq or seq[-1] != mod:
                seq.append(mod)
sys.setprofile(prof)
con.execute("SELECT label FROM PREDICT(MODEL m, TABLE t) WHERE 1 = 1").fetchall()
sys.setprofile(None)
result = {"modules": len(set(seq)), "transitions": len(seq) - 1, "module_pairs": len(edges),
          "query_calls_into_session": sorted(f"{a}.{b}" for a, b in ups), "module_list": sorted(set(seq)),
          "modelsql": modelsql.__file__}
out = Path(__file__).resolve().parent / "results" / "predict_path.json"
if len(sys.argv) > 2 and sys.argv[1] == "--out":
    out = Path(sys.argv[2])
out.write_text(json.dumps(result, indent=2) + "\n")
print(json.dumps({k: v for k, v in result.items() if isinstance(v, int)}))
