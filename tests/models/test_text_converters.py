"""modelsql.converters.text (exact ONNX text featurizers and linear heads) and modelsql.datasets.reviews.

Every featurizer is fitted on ``reviews(3000)`` and compared with ONNX Runtime on the held-out
``reviews(800, seed=1)`` (odd rows included) plus hand-written edge strings, batched and one row
at a time. :mod:`modelsql.converters.text` lists what skl2onnx gets wrong.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
import time
import unicodedata

import numpy as np
import pytest

pytest.importorskip("sklearn")
ort = pytest.importorskip("onnxruntime")

from onnx import helper  # noqa: E402
from sklearn import linear_model as lm  # noqa: E402
from sklearn import svm  # noqa: E402
from sklearn.compose import ColumnTransformer  # noqa: E402
from sklearn.ensemble import RandomForestClassifier  # noqa: E402
from sklearn.feature_extraction.text import CountVectorizer, HashingVectorizer, TfidfVectorizer  # noqa: E402
from sklearn.pipeline import FeatureUnion, Pipeline  # noqa: E402

from modelsql.datasets import reviews  # noqa: E402
from modelsql.errors import NotSupportedError, ProgrammingError  # noqa: E402
from modelsql.converters import text  # noqa: E402

EDGE = [
    "", " ", "\t\n", "a", "I", "C# F#", "C++ U.S. don't", "\x00ab", "👍👍 ok", "cafe\u0301 café", "東京 大阪",
    "a\u200bb", "x\xa0\xa0y", "x\x0b\x0by", "a \tb", "a\tb", "a\nb", "  lead", "trail  ", "Ünïcödé ÉCOLE ŒUVRE",
    "!!!", "go a home", "ab" * 40, "x " * 60,
]
pytestmark = pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning", "ignore::FutureWarning")
TOLERANCE = 1e-6  # |onnx - sklearn| <= TOLERANCE * max(1, |sklearn|): float32 against float64


@pytest.fixture(scope="module")
def corpus():
    train, labels = reviews(3000)
    held_out, _ = reviews(800, seed=1)
    return train, np.array(labels), held_out + EDGE


def _session(model):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])


def _feed(texts, column=False):
    arr = np.array(list(texts), dtype=object)
    return arr.reshape(-1, 1) if column else arr


def _dense(x):
    return np.asarray(x.toarray() if hasattr(x, "toarray") else x, dtype=np.float64)


def _rel(got, want):
    return float(np.max(np.abs(got - want) / np.maximum(1.0, np.abs(want)))) if want.size else 0.0


def _digest(model):
    return hashlib.sha256(model.SerializeToString(deterministic=True)).hexdigest()


def _batched_and_single(sess, texts, name="text", column=False):
    batch = sess.run(None, {name: _feed(texts, column)})[0]
    single = np.vstack([sess.run(None, {name: _feed([t], column)})[0] for t in texts])
    return batch, single


FEATURIZERS = {
    "word_1_1": lambda: TfidfVectorizer(),
    "word_1_2": lambda: TfidfVectorizer(ngram_range=(1, 2)),
    "word_1_char_tokens": lambda: TfidfVectorizer(token_pattern=r"(?u)\b\w+\b", ngram_range=(1, 2)),
    "word_stop_words_1_3": lambda: TfidfVectorizer(stop_words="english", ngram_range=(1, 3)),
    "word_stop_list_2_2": lambda: TfidfVectorizer(stop_words=["the", "was", "a", "i"], ngram_range=(2, 2)),
    "char_2_4": lambda: TfidfVectorizer(analyzer="char", ngram_range=(2, 4)),
    "char_1_3": lambda: TfidfVectorizer(analyzer="char", ngram_range=(1, 3)),
    "char_wb_2_4": lambda: TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 4)),
    "char_wb_1_3": lambda: TfidfVectorizer(analyzer="char_wb", ngram_range=(1, 3)),
    "char_wb_4_5_short_words": lambda: TfidfVectorizer(analyzer="char_wb", ngram_range=(4, 5)),
    "lowercase_false_word": lambda: TfidfVectorizer(lowercase=False, ngram_range=(1, 2)),
    "lowercase_false_char_wb": lambda: TfidfVectorizer(lowercase=False, analyzer="char_wb", ngram_range=(2, 4)),
    "binary": lambda: TfidfVectorizer(binary=True, analyzer="char_wb", ngram_range=(1, 3)),
    "sublinear_tf": lambda: TfidfVectorizer(sublinear_tf=True, ngram_range=(1, 2)),
    "norm_none": lambda: TfidfVectorizer(norm=None, analyzer="char", ngram_range=(1, 2)),
    "norm_l1": lambda: TfidfVectorizer(norm="l1", ngram_range=(1, 2)),
    "norm_l2_no_smooth_idf": lambda: TfidfVectorizer(norm="l2", smooth_idf=False),
    "use_idf_false": lambda: TfidfVectorizer(use_idf=False, analyzer="char_wb", ngram_range=(2, 3)),
    "pruned_vocabulary": lambda: TfidfVectorizer(max_features=500, min_df=2, max_df=0.5, analyzer="char_wb",
                                                 ngram_range=(1, 4)),
    "float32_dtype": lambda: TfidfVectorizer(dtype=np.float32, ngram_range=(1, 2)),
    "count_word_1_2": lambda: CountVectorizer(ngram_range=(1, 2)),
    "count_char_binary": lambda: CountVectorizer(binary=True, analyzer="char", ngram_range=(1, 3)),
    "count_char_wb": lambda: CountVectorizer(analyzer="char_wb", ngram_range=(2, 4)),
}


@pytest.mark.parametrize("name", sorted(FEATURIZERS))
def test_featurizer_equals_sklearn_batched_and_one_row_at_a_time(name, corpus):
    train, _, held_out = corpus
    vec = FEATURIZERS[name]().fit(train)
    model = text.text_featurizer_onnx(vec)
    assert [i.name for i in model.graph.input] == ["text"] and [o.name for o in model.graph.output] == ["features"]
    want = _dense(vec.transform(held_out))
    batch, single = _batched_and_single(_session(model), held_out)
    assert batch.dtype == np.float32 and batch.shape == want.shape
    bound = 0.0 if isinstance(vec, CountVectorizer) and not isinstance(vec, TfidfVectorizer) else TOLERANCE
    assert _rel(batch, want) <= bound
    assert _rel(single, want) <= bound
    assert np.array_equal(batch, single)  # a row's features do not depend on the rest of its batch


def test_feature_union_of_word_and_char_wb(corpus):
    train, _, held_out = corpus
    union = FeatureUnion([("word", TfidfVectorizer(ngram_range=(1, 2))),
                          ("chars", TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 4)))]).fit(train)
    model = text.convert(union)
    want = _dense(union.transform(held_out))
    batch, single = _batched_and_single(_session(model), held_out)
    assert batch.shape == want.shape
    assert _rel(batch, want) <= TOLERANCE and _rel(single, want) <= TOLERANCE
    dims = [d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim]
    assert dims[1] == want.shape[1]


def test_column_transformer_over_one_text_column_composes(corpus):
    train, _, held_out = corpus
    ct = ColumnTransformer([("word", TfidfVectorizer(), 0),
                            ("chars", TfidfVectorizer(analyzer="char_wb", ngram_range=(1, 3)), 0)])
    ct.fit(_feed(train, column=True))
    parts = [text.text_featurizer_onnx(t, "review", column=True) for _, t, _ in ct.transformers_ if t != "drop"]
    model = text.union_onnx(parts, "review", "features")
    dims = model.graph.input[0].type.tensor_type.shape.dim
    assert [d.dim_param or d.dim_value for d in dims] == ["N", 1]
    want = _dense(ct.transform(_feed(held_out, column=True)))
    batch, single = _batched_and_single(_session(model), held_out, "review", column=True)
    assert _rel(batch, want) <= TOLERANCE and _rel(single, want) <= TOLERANCE


def test_empty_batch_and_fixed_batch_size(corpus):
    train, _, held_out = corpus
    vec = TfidfVectorizer(analyzer="char_wb").fit(train)
    empty = _session(text.text_featurizer_onnx(vec)).run(None, {"text": _feed([])})[0]
    assert empty.shape == (0, len(vec.vocabulary_))
    model = text.text_featurizer_onnx(vec, "t", "f", n_rows_hint=1)
    assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_value == 1
    got = _session(model).run(None, {"t": _feed(held_out[:1])})[0]
    assert _rel(got, _dense(vec.transform(held_out[:1]))) <= TOLERANCE


def test_whitespace_is_pythons():
    assert set(text._WHITESPACE) == {chr(c) for c in range(0x110000) if chr(c).isspace()}


def _single_node_session(model, op_type):
    node = next(n for n in model.graph.node if n.op_type == op_type)
    node = helper.make_node(node.op_type, ["x"], ["y"], domain=node.domain,
                            **{a.name: helper.get_attribute_value(a) for a in node.attribute})
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", 8, None)],
                              [helper.make_tensor_value_info("y", 8, None)])
    return _session(helper.make_model(graph, opset_imports=list(model.opset_import), ir_version=model.ir_version))


def _assigned_code_points():
    return [c for c in range(0x110000) if unicodedata.category(chr(c)) not in ("Cn", "Cs")]


def test_word_pattern_agrees_with_python_on_every_assigned_code_point(corpus):
    """RE2's [\\p{L}\\p{N}_] against Python's \\w, for the code points CPython's unicodedata assigns."""
    vec = TfidfVectorizer().fit(corpus[0])
    sess = _single_node_session(text.text_featurizer_onnx(vec), "Tokenizer")
    pairs = _feed([chr(c) * 2 for c in _assigned_code_points()])
    tokens = sess.run(None, {"x": pairs})[0]
    onnx_word = tokens[:, 0] == pairs
    python_word = np.array([re.fullmatch(r"(?u)\b\w\w+\b", p) is not None for p in pairs])
    assert not np.any(onnx_word != python_word)


def test_lowercase_differs_from_str_lower_only_on_documented_code_points(corpus):
    """StringNormalizer maps one code point at a time: U+0130 is the only single character it lowers
    differently (str.lower gives 'i' + U+0307); final sigma is the context-dependent other case."""
    vec = TfidfVectorizer().fit(corpus[0])
    sess = _single_node_session(text.text_featurizer_onnx(vec), "StringNormalizer")
    chars = [chr(c) for c in _assigned_code_points()]
    lowered = sess.run(None, {"x": _feed(chars)})[0]
    assert [hex(ord(c)) for c, low in zip(chars, lowered) if c.lower() != low] == ["0x130"]
    assert sess.run(None, {"x": _feed(["ΟΔΟΣ"])})[0][0] != "ΟΔΟΣ".lower()  # 'οδοσ' vs 'οδος'


# ---------------------------------------------------------------------------------------------
# linear heads


@pytest.fixture(scope="module")
def features(corpus):
    """(sklearn train features, sklearn held-out features, ONNX held-out features) of a FeatureUnion."""
    train, _, held_out = corpus
    union = FeatureUnion([("word", TfidfVectorizer(ngram_range=(1, 2))),
                          ("chars", TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 4)))]).fit(train)
    onnx_rows = _session(text.convert(union)).run(None, {"text": _feed(held_out)})[0]
    return union.transform(train), _dense(union.transform(held_out)), onnx_rows


CLASSIFIERS = {
    "logistic": lambda: lm.LogisticRegression(max_iter=100),
    "logistic_cv": lambda: lm.LogisticRegressionCV(Cs=[1.0], cv=2, max_iter=50),
    "linear_svc": lambda: svm.LinearSVC(),
    "linear_svc_crammer_singer": lambda: svm.LinearSVC(multi_class="crammer_singer"),
    "ridge_classifier": lambda: lm.RidgeClassifier(),
    "sgd_hinge": lambda: lm.SGDClassifier(random_state=0),
    "sgd_log_loss": lambda: lm.SGDClassifier(loss="log_loss", random_state=0),
    "sgd_modified_huber": lambda: lm.SGDClassifier(loss="modified_huber", random_state=0),
    "perceptron": lambda: lm.Perceptron(random_state=0),
    "passive_aggressive": lambda: lm.PassiveAggressiveClassifier(random_state=0),
    "ridge_classifier_cv": lambda: lm.RidgeClassifierCV(alphas=(0.1, 1.0), cv=2),
}
STRING_LABELS = ("logistic", "linear_svc", "sgd_modified_huber", "ridge_classifier")
LABELS = {
    "binary": lambda y: y >= 3,
    "multiclass": lambda y: y,
    "strings": lambda y: np.array(["awful", "bad", "okay", "good", "great"])[y],
}


def _reference(est, x):
    """sklearn's (labels, the 'probabilities' output: predict_proba, else the scores as skl2onnx emits them)."""
    loss = getattr(est, "loss", "log_loss")
    if hasattr(est, "predict_proba") and loss in ("log_loss", "modified_huber"):
        return est.predict(x), est.predict_proba(x)
    d = est.decision_function(x)
    return est.predict(x), (np.c_[-d, d] if d.ndim == 1 else d)


# crammer_singer is multiclass only; string labels go through the same Gather for every head
HEAD_CASES = [(name, labels) for name in sorted(CLASSIFIERS) for labels in sorted(LABELS)
              if not (name == "linear_svc_crammer_singer" and labels == "binary")
              and (labels != "strings" or name in STRING_LABELS)]


@pytest.mark.parametrize("name,labels", [pytest.param(*c, marks=pytest.mark.slow) if c == ("logistic_cv", "multiclass")
                                         else c for c in HEAD_CASES])  # LogisticRegressionCV: the slowest fit
def test_linear_classifier_head(name, labels, corpus, features):
    x_train, x_held, x_onnx = features
    y = LABELS[labels](corpus[1])
    est = CLASSIFIERS[name]().fit(x_train, y)
    model = text.linear_head_onnx(est, x_train.shape[1])
    assert [o.name for o in model.graph.output] == ["label", "probabilities"]
    assert {t.name.split("_")[0] for t in model.graph.initializer} >= {"coef", "intercept", "classes"}
    assert not any(n.domain == "ai.onnx.ml" for n in model.graph.node)
    sess = _session(model)
    want_labels, want_proba = _reference(est, x_held)
    for rows in (x_onnx, x_held.astype(np.float32)):  # end to end, and the head alone
        got_labels, got_proba = sess.run(None, {"features": rows})
        assert got_labels.shape == want_labels.shape and np.array_equal(got_labels, want_labels)
        assert got_proba.shape == want_proba.shape
        assert np.max(np.abs(got_proba - want_proba)) <= 1e-5 * max(1.0, np.max(np.abs(want_proba)))


REGRESSORS = {
    "linear_regression": lambda: lm.LinearRegression(),
    "ridge": lambda: lm.Ridge(),
    "ridge_cv": lambda: lm.RidgeCV(),
    "lasso": lambda: lm.Lasso(alpha=1e-3),
    "elastic_net": lambda: lm.ElasticNet(alpha=1e-3),
    "lars": lambda: lm.Lars(n_nonzero_coefs=10),
    "sgd_regressor": lambda: lm.SGDRegressor(random_state=0),
    "linear_svr": lambda: svm.LinearSVR(random_state=0),
    "huber": lambda: lm.HuberRegressor(max_iter=200),
    "bayesian_ridge": lambda: lm.BayesianRidge(),
    "no_intercept": lambda: lm.Ridge(fit_intercept=False),
    "lasso_cv": lambda: lm.LassoCV(alphas=3, cv=2),
    "elastic_net_cv": lambda: lm.ElasticNetCV(alphas=3, cv=2),
    "lasso_lars": lambda: lm.LassoLars(alpha=1e-3),
    "ard": lambda: lm.ARDRegression(max_iter=50),
    "quantile": lambda: lm.QuantileRegressor(alpha=0.0),
    "theil_sen": lambda: lm.TheilSenRegressor(max_subpopulation=200, random_state=0),
    "omp": lambda: lm.OrthogonalMatchingPursuit(n_nonzero_coefs=10),
}


@pytest.mark.parametrize("name", sorted(REGRESSORS))
def test_linear_regressor_head(name, corpus, features):
    x_train, x_held, x_onnx = features
    cols = slice(0, 40)
    est = REGRESSORS[name]().fit(x_train[:, cols].toarray(), corpus[1].astype(float))
    model = text.linear_head_onnx(est)
    assert [o.name for o in model.graph.output] == ["variable"]
    got = _session(model).run(None, {"features": np.ascontiguousarray(x_onnx[:, cols])})[0]
    want = est.predict(x_held[:, cols])
    assert got.shape == (len(want), 1)
    assert _rel(got[:, 0], want) <= 1e-5


def test_multi_target_regressor_head(corpus, features):
    x_train, x_held, x_onnx = features
    y = np.c_[corpus[1], corpus[1] >= 3].astype(float)
    est = lm.Ridge().fit(x_train, y)
    got = _session(text.linear_head_onnx(est)).run(None, {"features": x_onnx})[0]
    assert got.shape == (len(x_held), 2) and _rel(got, est.predict(x_held)) <= 1e-5


def test_pipeline_of_featurizer_and_head_converts_whole(corpus):
    train, y, held_out = corpus
    pipe = Pipeline([("features", FeatureUnion([("word", TfidfVectorizer(ngram_range=(1, 2))),
                                                ("chars", TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 4)))])),
                     ("head", lm.LogisticRegression(max_iter=300))]).fit(train, y)
    assert text.supports(pipe)
    model = text.convert(pipe, input_name="review")
    assert [i.name for i in model.graph.input] == ["review"]
    assert [o.name for o in model.graph.output] == ["label", "probabilities"]
    labels, proba = _session(model).run(None, {"review": _feed(held_out)})
    assert np.array_equal(labels, pipe.predict(held_out))
    assert np.max(np.abs(proba - pipe.predict_proba(held_out))) <= 1e-5


def test_supports_and_convert_leave_other_estimators_to_skl2onnx(corpus, features):
    x_train, _, _ = features
    forest = RandomForestClassifier(n_estimators=2, random_state=0).fit(x_train[:, :5].toarray(), corpus[1])
    multilabel = lm.RidgeClassifier().fit(x_train, np.c_[corpus[1] >= 3, corpus[1] <= 1, corpus[1] == 2])
    for est in (forest, multilabel, Pipeline([("t", TfidfVectorizer().fit(corpus[0])), ("f", forest)])):
        assert not text.supports(est) and text.convert(est) is None
    with pytest.raises(NotSupportedError, match="classes_"):
        text.linear_head_onnx(multilabel)
    with pytest.raises(NotSupportedError, match="RandomForestClassifier"):
        text.linear_head_onnx(forest)
    with pytest.raises(ProgrammingError) as info:
        text.linear_head_onnx(lm.Ridge().fit(x_train, corpus[1]), n_features=7)
    assert info.value.code == "feature_mismatch"


# ---------------------------------------------------------------------------------------------
# determinism


def test_two_conversions_serialize_identically(corpus, features):
    train, y, _ = corpus
    word = TfidfVectorizer(ngram_range=(1, 2)).fit(train)
    chars = TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 4)).fit(train)
    union = FeatureUnion([("w", word), ("c", chars)])
    head = lm.LogisticRegression(max_iter=300).fit(features[0], y)
    pipe = Pipeline([("f", union), ("h", head)])
    for build, obj in [(text.text_featurizer_onnx, word), (text.text_featurizer_onnx, chars),
                       (text.convert, union), (text.linear_head_onnx, head), (text.convert, pipe)]:
        assert _digest(build(obj)) == _digest(build(obj)) == _digest(build(copy.deepcopy(obj)))
    refit = TfidfVectorizer(ngram_range=(1, 2)).fit(list(train))
    assert _digest(text.text_featurizer_onnx(refit)) == _digest(text.text_featurizer_onnx(word))
    other = TfidfVectorizer(ngram_range=(1, 2)).fit(train[1:])
    assert _digest(text.text_featurizer_onnx(other)) != _digest(text.text_featurizer_onnx(word))
    assert all(not g.name.count("-") for g in [text.text_featurizer_onnx(word).graph])  # no uuid4


# ---------------------------------------------------------------------------------------------
# refusals


REFUSED = [
    ("strip_accents", "unicode"),
    ("strip_accents", "ascii"),
    ("preprocessor", str.lower),
    ("tokenizer", str.split),
    ("analyzer", str.split),
    ("token_pattern", r"(?u)\b\w\w\w+\b"),
    ("input", "filename"),
]


@pytest.mark.parametrize("param,value", REFUSED, ids=[f"{p}={v!r}"[:40] for p, v in REFUSED])
def test_refused_configuration_names_the_parameter(param, value, corpus):
    vec = TfidfVectorizer().fit(corpus[0]).set_params(**{param: value})
    with pytest.raises(NotSupportedError) as info:
        text.text_featurizer_onnx(vec)
    assert info.value.code == "conversion_failed"
    assert f"{param}={value!r}" in str(info.value)


def test_refused_vocabulary_term_the_analyzer_never_emits(corpus):
    vec = CountVectorizer(analyzer="char", ngram_range=(2, 3), vocabulary=["ab", "abcdef"]).fit(corpus[0])
    with pytest.raises(NotSupportedError, match="vocabulary='abcdef'"):
        text.text_featurizer_onnx(vec)


def test_other_objects_and_unfitted_vectorizers(corpus):
    with pytest.raises(NotSupportedError, match="HashingVectorizer"):
        text.text_featurizer_onnx(HashingVectorizer())
    with pytest.raises(ProgrammingError) as info:
        text.text_featurizer_onnx(TfidfVectorizer())
    assert info.value.code == "not_fitted"
    vec = TfidfVectorizer().fit(corpus[0])
    with pytest.raises(ProgrammingError) as info:
        text.text_featurizer_onnx(vec, input_name="Shape_1")
    assert info.value.code == "name_conflict"


def test_register_skl2onnx_makes_mixed_column_transformers_exact(corpus):
    pd = pytest.importorskip("pandas")
    from skl2onnx import convert_sklearn
    from skl2onnx.common import _registration
    from skl2onnx.common.data_types import FloatTensorType, StringTensorType
    from sklearn.preprocessing import StandardScaler

    train, y, held_out = corpus
    frame = lambda rows: pd.DataFrame({"review": rows, "stars": np.arange(len(rows), dtype=float) % 5})  # noqa: E731
    pipe = Pipeline([("ct", ColumnTransformer([("w", TfidfVectorizer(ngram_range=(1, 2)), "review"),
                                               ("c", TfidfVectorizer(analyzer="char_wb"), "review"),
                                               ("n", StandardScaler(), ["stars"])])),
                     ("lr", lm.LogisticRegression(max_iter=300))]).fit(frame(train), y)
    saved = {k: _registration._converter_pool[k] for k in ("SklearnTfidfVectorizer", "SklearnCountVectorizer")}
    try:
        text.register_skl2onnx()
        model = convert_sklearn(pipe, initial_types=[("review", StringTensorType([None, 1])),
                                                     ("stars", FloatTensorType([None, 1]))],
                                options={id(pipe.steps[-1][1]): {"zipmap": False}},
                                target_opset={"": text.OPSET, "ai.onnx.ml": 3})
    finally:
        _registration._converter_pool.update(saved)
    rows = frame(held_out)
    labels, proba = _session(model).run(None, {"review": _feed(held_out, column=True),
                                               "stars": rows[["stars"]].to_numpy(np.float32)})
    assert np.array_equal(labels, pipe.predict(rows))
    assert np.max(np.abs(proba - pipe.predict_proba(rows))) <= 1e-5


# ---------------------------------------------------------------------------------------------
# the review generator


def test_reviews_are_deterministic_and_pinned():
    texts, labels = reviews(100)
    assert (texts, labels) == reviews(100)
    digest = hashlib.sha256(json.dumps([texts, labels]).encode()).hexdigest()
    assert digest == "626dbbc4e2a73c151e9f45eb94225bcf0f2a879124680790766dcd629677bca6"
    longer, longer_labels = reviews(3000)
    assert longer[:100] == texts and longer_labels[:100] == labels
    assert reviews(100, seed=1)[0] != texts


def test_reviews_contain_the_odd_rows():
    texts, labels = reviews(800, seed=1)
    assert "" in texts[:16] and any(t and not t.strip() for t in texts[:16])
    assert any(any(ord(c) > 127 for c in t) for t in texts)
    assert any("\t" in t or "  " in t or "\n" in t for t in texts)
    assert set(labels) == set(range(5))
    clean, _ = reviews(500, odd=False)
    assert all(t.isascii() and t.strip() and "  " not in t and "\t" not in t for t in clean)
    assert set(reviews(200, classes=2)[1]) == {0, 1}


def test_reviews_are_fast():
    start = time.perf_counter()
    texts, _ = reviews(100_000)
    assert len(texts) == 100_000 and time.perf_counter() - start < 10.0


def test_reviews_reject_bad_arguments():
    for kwargs in ({"n": -1}, {"n": 3, "classes": 1}, {"n": 3, "noise": 2.0}):
        with pytest.raises(ValueError):
            reviews(**kwargs)
