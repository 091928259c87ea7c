"""Every statement's options, declared once (:class:`~.schema.OptionSet`): the statements read their
options with these, and ``docs/options.md``, README's PREDICT table and the shell's ``.help`` are generated
from them (:mod:`.docs`). Each set names the SQL node whose options it holds (``node=``), so the statement
reference finds it. To add an option: declare it here, read it in the statement, run
``python -m modelsql.engine.documents`` (``tests/engine/test_options.py`` fails until the documents match)."""

from __future__ import annotations

from modelsql.engine.options.schema import Option, OptionSet
from modelsql.sql.evaluate import EvaluateModel
from modelsql.sql.finetune import FinetunePipeline
from modelsql.sql.models import ImportModel
from modelsql.sql.pipelines import CreatePipeline
from modelsql.sql.predict import PredictTable
from modelsql.sql.profile import CompileModel, ProfileModel
from modelsql.sql.serve import Serve, ServeItem
from modelsql.sql.tune import TuneModel

__all__ = ["PREDICT", "EVALUATE", "IMPORT_MODEL", "CREATE_MODEL_FROM_PYTHON", "CREATE_MODEL_AS", "CREATE_PIPELINE", "PROFILE", "COMPILE",
           "TUNE", "FINETUNE", "SERVE", "SERVE_ITEM", "STATEMENTS", "MAX_BATCH_SIZE"]

MAX_BATCH_SIZE = 2**31 - 1
"""Largest ``batch_size`` (rows per model run) a PREDICT accepts."""

PREDICT = OptionSet(
    "PREDICT",
    Option("on_null", "choice", "error", choices=("error", "skip", "null"),
           doc="a NULL in a column fed to the model is an error naming the column and the number of NULL rows; "
               "`'skip'` leaves those rows out; `'null'` returns them with NULL outputs"),
    Option("on_error", "choice", "error", choices=("error", "null", "skip"),
           doc="rows ONNX Runtime fails on (a `OneHotEncoder` meeting an unseen category): an error naming the "
               "column, its value and how many rows of the failing batch; `'null'` returns those rows with NULL "
               "outputs; `'skip'` leaves them out"),
    Option("features", "names", doc="the columns that feed a single input, in order",
           default_doc="the model's feature names, else by name or position"),
    Option("backend", "choice", "onnxruntime", choices=("onnxruntime", "tvm"), default_doc="the planner's choice",
           doc="`'tvm'`: the model's checked TVM artifact (`COMPILE MODEL` first); unset, the planner runs ONNX "
               "Runtime unless a checked artifact is estimated 1.5x faster"),
    Option("batch_size", "int", min=1, max=MAX_BATCH_SIZE, default_doc="the planner's choice",
           doc="at most this many rows per model run (inputs arrive in DuckDB chunks of at most 2,048 rows)"),
    Option("execution", "choice", "auto", choices=("auto", "stream", "batch"),
           doc="how the model runs (see [How PREDICT runs](#how-predict-runs))"),
    Option("isolate_rows", "bool", True,
           doc="a batch-dependent model (see [Rows that depend on each other](#rows-that-depend-on-each-other)) "
               "runs one row at a time, so each row gets the answer it gets alone; `false` lets it see whole "
               "batches"),
    Option("merge", "choice", "auto", choices=("auto", "always", "never"),
           doc="models of one family (a routed `PREDICT(MODELS ... ROUTE BY c, ...)`, or PREDICTs of one "
               "statement over one input) run as one NetFuse-merged graph where the measured rule expects a "
               "gain, always, or never (see [Model families](#model-families-netfuse))"),
    Option("device", "device", "auto",
           doc="where the model runs: `'auto'` lets the cost function choose among the devices present (see "
               "[Devices](#devices)); a device that is not there is `device_not_available`"),
    doc="Named arguments after the input: `PREDICT(MODEL m, TABLE t, on_null = 'skip')` (`=`, `:=` or `=>`).",
    node=PredictTable,
)

EVALUATE = OptionSet(
    "EVALUATE",
    Option("average", "choice", choices=("binary", "macro", "weighted", "micro"),
           default_doc="`'binary'` for two classes (the model's, when its graph names them; else the rows'), "
                       "else `'macro'`",
           doc="how precision, recall, F1 and ROC AUC combine over classes, as scikit-learn's `average`: "
               "`'binary'` scores the positive class alone; `'macro'` the unweighted mean over the classes; "
               "`'weighted'` the mean weighted by each class's rows; `'micro'` pools every class's counts "
               "(ROC AUC: every row's every probability ranked together, one-vs-rest)"),
    Option("positive", "label", default_doc="`true` for booleans; for integers `1` if a class (or the only class is "
                                            "`0`), else the greatest; else the last class in sorted order",
           doc="the positive class of a binary task (precision, recall, F1, ROC AUC, `threshold`)"),
    Option("threshold", "number", min=0, max=1,
           doc="a binary classifier's predicted class is the positive one when its probability is at least "
               "this, instead of the model's own label", default_doc="the model's label"),
    Option("features", "names", doc="the columns fed to the model, in order",
           default_doc="as PREDICT binds them, never the TARGET"),
    Option("on_null", "choice", "error", choices=("error", "skip"),
           doc="a NULL in a column fed to the model is an error naming the column (PREDICT's); `'skip'` leaves "
               "those rows out of the evaluation"),
    doc="`EVALUATE MODEL | PIPELINE m ON TABLE t | (query) TARGET y WITH (...)`.",
    node=EvaluateModel,
)

IMPORT_MODEL = OptionSet(
    "IMPORT MODEL",
    Option("features", "names", doc="the columns that feed the model's single input, in order (PREDICT binds "
                                    "them by name)", default_doc="scikit-learn's `feature_names_in_`, if any"),
    Option("description", "text", doc="free text kept in the catalog"),
    doc="`IMPORT MODEL m FROM 'file.onnx' WITH (...)`, and `CREATE [OR REPLACE] MODEL m FROM 'file.onnx' "
        "WITH (...)`.",
    node=ImportModel,
)

CREATE_MODEL_FROM_PYTHON = OptionSet(
    "CREATE MODEL FROM PYTHON",
    Option("example", "example", default_doc="the module's `example()`",
           doc="the example input: a `'package.module:name'` reference (a value, or a function returning one) or "
               "a table whose rows are the example"),
    Option("outputs", "names", default_doc="`output`, or `output0`, `output1`, ...", doc="the names of the program's outputs"),
    Option("description", "text", doc="free text kept in the catalog"),
    Option("execution", "choice", "auto", choices=("auto", "whole_graph", "coexecute", "eager"),
           doc="`'auto'`: a whole graph if the safety gate passes, else co-execution or eager, whichever was "
               "faster; `'whole_graph'`: a whole graph or an error naming the rule that refused it; "
               "`'coexecute'`, `'eager'`: skip the whole graph"),
    Option("row_independent", "bool", False,
           doc="assert that a row's outputs never depend on the other rows of its batch (for the cases testing "
               "cannot prove; never against a measurement)"),
    Option("device", "device", "auto",
           doc="where PREDICT runs a program kept as Python: `'auto'` and `'cpu'` the CPU, `'cuda'` / `'cuda:N'` "
               "that GPU (eagerly)"),
    doc="Importing a `torch.nn.Module` for PREDICT (see [Models written as Python programs]"
        "(#models-written-as-python-programs)). A trainable factory's `WITH (...)` holds its default "
        "arguments instead, any names (TUNE's SEARCH may override them).",
    node=ImportModel,
)

CREATE_MODEL_AS = OptionSet(
    "CREATE MODEL AS",
    Option("model_type", "text", doc="what to train: a name of [Model types](#model-types) (`'logistic_reg'`, "
                                     "`'boosted_tree_classifier'` ...) or a scikit-learn estimator class name "
                                     "(`'ExtraTreesClassifier'`)", default_doc="required"),
    Option("target", "text", doc="the column the model predicts (a clusterer takes none)",
           default_doc="required but for a clusterer"),
    Option("input_label_cols", "names", doc="BigQuery ML's spelling of `target`: a list of the one column "
                                            "(`input_label_cols = ['churned']`)"),
    Option("features", "names", doc="the columns that feed the model",
           default_doc="every column but the target and the key-like ones, as PREDICT binds them"),
    Option("validation", "split", "auto", choices=("auto", "random", "seq", "none"),
           doc="the rows held out to evaluate the model: `'auto'` none under 500 rows, a random 20% up to 50,000, "
               "else 10,000 random rows (BigQuery ML's `AUTO_SPLIT`); `'random'` or a fraction (`0.1`) random rows; "
               "`'seq'` the last rows in the query's order; `'none'` every row trains"),
    Option("validation_size", "number", 0.2, min=0, max=1, min_open=True, max_open=True,
           doc="the fraction of the rows `'random'` and `'seq'` hold out (named apart from estimators' own "
               "`validation_fraction`, a hyper-parameter here)"),
    Option("seed", "int", 0, min=0, max=2**32 - 1,
           doc="the random split's seed, and the estimator's `random_state` unless given"),
    Option("on_null", "choice", "error", choices=("error", "skip", "impute"),
           doc="a NULL in a feature or the target is an error naming the column; `'skip'` leaves those rows out; "
               "`'impute'` (BigQuery ML's automatic imputation) keeps them: the model replaces a NULL number by "
               "the training mean and makes NULL text a category of its own, in training and at PREDICT (a NULL "
               "target is still an error)"),
    Option("accept_mismatch", "bool", False,
           doc="keep the model when its ONNX conversion differs from the estimator (labels, or numbers past the "
               "check's tolerance: k-nearest neighbours over tied distances, float32 rounding of an ill-conditioned "
               "fit); the difference is recorded (`DESCRIBE MODEL`'s `conversion_check`)"),
    Option("description", "text", doc="free text kept in the catalog"),
    doc="`CREATE [OR REPLACE] MODEL m WITH (model_type = ..., target = y, ...) AS SELECT ...` (see [Training models "
        "in SQL](#training-models-in-sql)); any other option is a hyper-parameter of the estimator "
        "(`max_depth = 4`, `hidden_layer_sizes = (64, 32)`), checked against its `get_params()`.",
    node=ImportModel,
)

CREATE_PIPELINE = OptionSet(
    "CREATE PIPELINE",
    Option("description", "text", doc="free text kept in the catalog"),
    node=CreatePipeline,
)

PROFILE = OptionSet(
    "PROFILE MODEL",
    Option("batch_sizes", "int", (1, 8, 64), min=1, max=1 << 20, many=True,
           default_doc="(1, 8, 64), or the model's fixed batch", doc="rows per model run to time"),
    Option("threads", "int", (1,), min=1, max=256, many=True, doc="ONNX Runtime intra-op threads to time"),
    Option("repeat", "int", 20, min=1, max=10_000, doc="timed runs per configuration (with `ON`: per batch size)"),
    Option("warmup", "int", 2, min=0, max=100, doc="untimed runs before them"),
    Option("backends", "choice", ("onnxruntime",), choices=("onnxruntime", "tvm"), many=True,
           doc="`'tvm'` times the checked TVM artifact (`COMPILE MODEL` first)"),
    Option("devices", "device", ("auto",), many=True,
           doc="`'auto'`: every device present; or the devices named"),
    Option("merge_factors", "int", (1,), min=1, max=64, many=True,
           doc="N > 1 also times an N-way NetFuse merge of the model on a shared input"),
    Option("operators", "bool", True, doc="record ONNX Runtime's per-operator kernel times"),
    Option("train_cost_model", "bool", True, doc="retrain the learned cost model on every trace"),
    doc="`PROFILE MODEL | PIPELINE m [ON TABLE t | ON (query)] WITH (...)`; with `ON` only `batch_sizes`, "
        "`repeat`, `backends`, `devices` and `train_cost_model` apply. Large values are refused: they would "
        "run for hours.",
    node=ProfileModel,
)

COMPILE = OptionSet(
    "COMPILE MODEL",
    Option("tune_trials", "int", 0, min=0, doc="MetaSchedule trials (0: untuned); needs `batch_size`; "
                                               "refused `FOR 'cuda'`"),
    Option("batch_size", "int", min=1, default_doc="none: a symbolic batch",
           doc="the batch to compile and tune for (one artifact per batch bucket)"),
    Option("threads", "int", min=1, default_doc="the cores this process may use", doc="the target's threads"),
    doc="`COMPILE MODEL m FOR 'llvm' | 'cuda' | 'cuda:N' WITH (...)`.",
    node=CompileModel,
)

TUNE = OptionSet(
    "TUNE MODEL",
    Option("max_epochs", "int", min=1, max=100_000, default_doc="`max_t`, else 10",
           doc="epochs of a fully trained trial"),
    Option("seed", "int", 0, min=0, max=2**32 - 1, doc="the study seed: the same seed makes the same study"),
    Option("metric", "choice", "val_loss", choices=("val_loss", "val_accuracy", "train_loss", "accuracy",
                                                     "precision", "recall", "f1_score", "log_loss", "roc_auc",
                                                     "mean_absolute_error", "mean_squared_error",
                                                     "root_mean_squared_error", "median_absolute_error", "r2_score",
                                                     "explained_variance"),
           doc="what the algorithm optimizes (`'val_accuracy'` needs a class label TARGET); a scikit-learn "
               "model type is scored by EVALUATE's metrics (`'val_loss'`: the log loss or the mean squared error, "
               "`'val_accuracy'`: the accuracy), a trainable by the first three"),
    Option("mode", "choice", choices=("min", "max"), default_doc="the metric's", doc="whether lower or higher is better"),
    Option("workers", "int", 1, min=1, max=1024, doc="stages trained at once"),
    Option("threads", "int", 1, min=1, max=1024, doc="threads per worker (local workers: at most the cores)"),
    Option("executor", "choice", "local", choices=("local", "processes", "ray"),
           doc="`'local'`: on this machine (one worker on the CPU trains in this process, as Optuna does; more, "
               "or CUDA, in worker processes); `'processes'`: always in worker processes; `'ray'`: Ray tasks"),
    Option("address", "text", doc="the Ray cluster's address (`executor = 'ray'`)"),
    Option("execution", "choice", "stages", choices=("stages", "trials"),
           doc="`'stages'`: the stage tree; `'trials'`: every trial on its own (the baseline)"),
    Option("validation_fraction", "number", 0.2, min=0, max=1, min_open=True, max_open=True,
           doc="rows held out for validation without `VALIDATE ON`"),
    Option("features", "names", default_doc="every column but the TARGET and the keys",
           doc="the columns fed to the model, in order"),
    Option("on_null", "choice", "error", choices=("error", "impute"), default_doc="`'error'`, or the model's",
           doc="a scikit-learn model type's: `'impute'` keeps rows with NULL features, imputed as `CREATE MODEL ... "
               "AS` does with `on_null = 'impute'` (a model trained so keeps its imputation)"),
    Option("time_budget_s", "number", min=0, min_open=True, default_doc="none", doc="stop the study after this long"),
    Option("study_name", "text", default_doc="`<model>_study`", doc="the study's name (letters, digits, underscores)"),
    Option("device", "device", "auto", doc="where trials train (`'auto'`: the GPU when there is one)"),
    Option("objective", "text", default_doc="none",
           doc="`'package.module:function'`: tune a Python objective, called as `function(config, train, validate, "
               "target)` with the rows as Arrow tables, returning the score (see [Tuning a Python objective]"
               "(#tuning-a-python-objective)); `mode` says whether higher or lower is better"),
    Option("model_type", "text", default_doc="the model's, if it was trained in SQL",
           doc="tune a scikit-learn model type (see [Tuning scikit-learn models](#tuning-scikit-learn-models)) "
               "instead of a trainable: the SEARCH names are the estimator's hyper-parameters"),
    doc="`TUNE MODEL m ... USING algorithm WITH (...)`: these options, and the algorithm's own (`trials`, "
        "`grace_period` ...: docs/options.md lists them). Values are written, never parameters.",
    parameters=False,
    node=TuneModel,
)

FINETUNE = OptionSet(
    "FINETUNE PIPELINE",
    Option("epochs", "int", 300, min=1, max=100_000, doc="full-batch Adam steps"),
    Option("temperature", "number", 0.1, min=0, max=100, doc="soft trees' temperature"),
    Option("lr", "number", 3e-3, min=0, max=10, doc="learning rate"),
    Option("seed", "int", 0, min=0, max=2**32 - 1, doc="the seed (the same options give the same result)"),
    Option("eval_every", "int", 10, min=1, max=100_000, doc="steps between validation metrics"),
    Option("validation_fraction", "number", 0.2, min=0, max=1, min_open=True, max_open=True,
           doc="rows held out for validation without `VALIDATE ON`"),
    Option("test", "text", doc="a held-out table: the result reports the metric on it before and after"),
    Option("device", "device", "auto", doc="where training runs (`'auto'`: the GPU when there is one)"),
    Option("features", "names", default_doc="the pipeline's features, else every column but the TARGET and the keys",
           doc="the columns fed to the pipeline, in order"),
    doc="`FINETUNE PIPELINE p ON TABLE t [VALIDATE ON ...] TARGET y WITH (...)`. Values are written, never "
        "parameters.",
    parameters=False,
    node=FinetunePipeline,
)

SERVE = OptionSet(
    "SERVE",
    Option("max_batch_size", "int", 32, min=1, max=1 << 20, doc="rows per batch"),
    Option("max_queue_delay_ms", "number", min=0, max=60_000, default_doc="none: adaptive",
           doc="a fixed batching delay; without it a request runs at once while a thread is free"),
    Option("threads", "int", min=1, max=1024, default_doc="the cores",
           doc="worker threads shared by the unreserved pipelines"),
    Option("max_request_mb", "int", 64, min=1, max=1 << 14, doc="largest request body"),
    Option("memory_budget_mb", "number", min=0, max=1 << 24, default_doc="no limit",
           doc="the most the loaded steps may take; the least recently used idle steps are unloaded past it"),
    Option("share_structures", "bool", False,
           doc="models that differ only in their floating-point weights run on one session"),
    Option("merge_families", "bool", True,
           doc="models of one architecture batch together, as one NetFuse-merged graph where it pays"),
    Option("device", "device", "cpu", doc="where every step runs (`'auto'` means `'cpu'`)"),
    Option("token", "text", default_doc="`$MODELSQL_SERVE_TOKEN`, else none",
           doc="a bearer token every request but `/v2/health/*` must carry"),
    Option("allow_unauthenticated", "bool", False,
           doc="listen on an address other machines reach without a token"),
    doc="`SERVE ... [ON [HOST h] PORT n] WITH (...)`: the server's options, given when it starts.",
    node=Serve,
)

SERVE_ITEM = OptionSet(
    "SERVE item",
    Option("reserved_threads", "int", min=1, max=1024, default_doc="none",
           doc="threads no other pipeline uses (at most the cores)"),
    doc="In parentheses after a served name: `SERVE PIPELINE p (reserved_threads = 1)`.",
    node=ServeItem,
)

STATEMENTS = (PREDICT, EVALUATE, IMPORT_MODEL, CREATE_MODEL_FROM_PYTHON, CREATE_MODEL_AS, CREATE_PIPELINE, PROFILE, COMPILE, TUNE, FINETUNE,
              SERVE, SERVE_ITEM)
"""Every option set, in the documentation's order."""
