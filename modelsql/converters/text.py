"""Exact ONNX graphs for scikit-learn text featurizers and linear heads (PRETZEL white-box steps).

PRETZEL (Lee et al., OSDI 2018) serves many text pipelines by splitting each into white-box
steps, storing identical parameters once and sharing a featurizer across the heads that use it.
This module builds those steps as ONNX graphs that agree with scikit-learn:

* :func:`text_featurizer_onnx`: a fitted ``TfidfVectorizer`` / ``CountVectorizer`` ->
  ``text: string[N]`` (or ``[N, 1]``) -> ``features: float[N, F]``;
* :func:`union_onnx`: featurizers over one text input concatenated on axis 1 (``FeatureUnion``,
  or a ``ColumnTransformer`` applying several vectorizers to one text column);
* :func:`linear_head_onnx`: a fitted linear classifier / regressor -> ``MatMul + Add`` (+
  ``Softmax`` / ``Sigmoid``, ``ArgMax``, label ``Gather``) with its weights as initializers, so a
  store can share and memory-map them across sessions (research notes, section 4);
* :func:`convert` / :func:`supports`: the hook ``converters.sklearn.from_sklearn`` calls first;
  :func:`register_skl2onnx` makes skl2onnx itself use the exact featurizer inside any pipeline.

The graphs are built node by node (skl2onnx is not used), which corrects what skl2onnx 1.20 gets
wrong on text (found by ``tests/models/test_text_converters.py``):

* ``analyzer='char_wb'`` is refused by skl2onnx; here each whitespace-separated word becomes one
  cell ``' ' + word + ' '`` (``Tokenizer`` -> ``StringConcat`` x2) tokenized into characters, so
  no n-gram spans two words (one crossing cells contains a pad token or two spaces);
* skl2onnx rewrites the word pattern ``(?u)\\b\\w\\w+\\b`` to ASCII ``[a-zA-Z0-9_]+`` (dropping
  "café" and keeping 1-letter words); here it is ``[\\p{L}\\p{N}_][\\p{L}\\p{N}_]+`` (RE2);
* skl2onnx's ``StringNormalizer`` uses locale ``en_US.UTF-8``, absent on many hosts; here ``C.UTF-8``;
* skl2onnx pads short rows of a batch with ``'#'``, which counts as a character n-gram; here the
  pad is ``'<pad>'``, longer than any character token and not a word token;
* skl2onnx keeps tabs and runs of spaces that sklearn's char analyzers collapse; here runs of 2+
  whitespace characters become one space, as ``_white_spaces.sub(" ", doc)`` does;
* skl2onnx computes ``sublinear_tf`` as ``log(1 + tf)``; sklearn computes ``1 + log(tf)``;
* skl2onnx reads ``stop_words_``, gone in scikit-learn 1.9, so it ignores ``stop_words`` and forms
  n-grams across them (412 of 800 held-out reviews differ, by up to 0.81); with older releases it
  hands them to ``StringNormalizer``, which drops whole documents, not tokens. Here stop-word
  tokens leave each row (a stable ``TopK``) before n-grams are formed;
* skl2onnx puts a random uuid4 in ``graph.name``; here every name is a constant, so two
  conversions of one fitted object serialize (``deterministic=True``) byte-identically.

Exactness (checked by ``tests/models/test_text_converters.py`` on generated reviews with odd rows, batched
and one row at a time): token counts are exact; TF-IDF values are float32 (sklearn: float64), so
``|onnx - sklearn| <= 1e-6 * max(1, |sklearn|)`` (measured <= 2.2e-7); labels equal ``predict``;
probabilities agree within 1e-5 (measured <= 3.1e-6; LogisticRegression <= 2.4e-7). Known
differences, outside ONNX's reach: ``str.lower`` maps U+0130 (İ) to two code points and Σ to ς at
a word's end, ``StringNormalizer`` does neither (every other assigned code point lowers alike);
RE2's ``\\p{L}``/``\\p{N}`` tables are newer than CPython's ``unicodedata`` (they also match
5,010 code points CPython 3.11 leaves unassigned; on assigned ones they agree with ``\\w``).

ONNX Runtime's ``Tokenizer`` and ``StringNormalizer`` refuse a batch of 0 rows; the graphs append
one constant row and drop it again, so an empty batch gives ``features: float[0, F]``. Cost: the
token tensor is dense, ``[N, T]`` (char_wb: ``[N, W * C]``, most words x longest word + 2), so
one very long row widens the whole batch; chunk big batches.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from modelsql.errors import NotSupportedError, ProgrammingError
from modelsql.converters.graph_edit import BATCH_DIM

__all__ = [
    "text_featurizer_onnx",
    "union_onnx",
    "linear_head_onnx",
    "convert",
    "supports",
    "register_skl2onnx",
    "OPSET",
    "PAD",
]

OPSET = 20
"""Default-domain opset of the graphs (``StringConcat``, ``RegexFullMatch``: 20; string ``Equal``: 19)."""
_ML_OPSET = 3  # ai.onnx.ml: LabelEncoder (stop words)
_MS_OPSET = 1  # com.microsoft: Tokenizer
_IR_VERSION = 9  # the oldest IR with opset 20: ONNX Runtime 1.17 (pyproject's floor) reads it
_PRODUCER = ("modelsql", "text-1")

PAD = "<pad>"
"""Pad token of short rows: several characters, so never a character token; '<' is no word character."""
_WORD_PAD = " "  # pad cell of char_wb's word tensor: a word never contains whitespace
_EXTRA_ROW = "x"  # appended to every batch (Tokenizer refuses 0 rows), dropped from the output

# CPython's str.isspace() / re's \s (29 code points; RE2's \s has only 5 of them); checked by the tests
_WHITESPACE = (
    "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006"
    "\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
_WS = "".join(f"\\x{{{ord(c):x}}}" for c in _WHITESPACE)  # the class body, as RE2 escapes
_WORD = r"[\p{L}\p{N}_]"
_TOKEN_PATTERNS = {  # sklearn token_pattern -> RE2 tokenexp with the same maximal-run matches
    r"(?u)\b\w\w+\b": f"{_WORD}{_WORD}+",
    r"\b\w\w+\b": f"{_WORD}{_WORD}+",
    r"(?u)\b\w+\b": f"{_WORD}+",
    r"\b\w+\b": f"{_WORD}+",
}
_ANALYZERS = ("word", "char", "char_wb")


class _Graph:
    """Nodes and initializers of a graph being built, named ``<op>_<k>`` in creation order."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self._k = 0

    def _name(self, base: str) -> str:
        self._k += 1
        return f"{base}_{self._k}"

    def op(self, op_type: str, inputs: Sequence[str], *, out: Optional[str] = None, n_out: int = 1,
           domain: str = "", **attrs: Any):
        """Append a node; return its output name (a list of them when ``n_out > 1``)."""
        base = self._name(op_type)
        outs = [out] if out is not None else [f"{base}_out{i}" if n_out > 1 else base for i in range(n_out)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=base, domain=domain, **attrs))
        return outs[0] if n_out == 1 else outs

    def const(self, base: str, value: Any, dtype: Any = None) -> str:
        """Add an initializer (strings: ``dtype=object``) and return its name."""
        name = self._name(base)
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name


def _tensor(name: str, elem: int, dims: Sequence[Any]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, list(dims))


def _model(g: _Graph, inputs: list, outputs: list, graph_name: str, doc: str,
           opsets: Optional[dict[str, int]] = None) -> onnx.ModelProto:
    """A model with constant names, producer and opsets, so equal graphs serialize identically.

    Raises:
        ProgrammingError: code ``name_conflict`` if an input is named like a value of the graph.
    """
    produced = {t.name for t in g.inits} | {x for n in g.nodes for x in n.output}
    clash = sorted(v.name for v in inputs if v.name in produced)
    if clash:
        raise ProgrammingError(f"the input name {clash[0]!r} is the name of a value inside the graph: choose another",
                               code="name_conflict")
    graph = helper.make_graph(g.nodes, graph_name, inputs, outputs, initializer=g.inits, doc_string=doc)
    if opsets is None:
        domains = {n.domain for n in g.nodes}
        known = {"": OPSET, "com.microsoft": _MS_OPSET, "ai.onnx.ml": _ML_OPSET}
        opsets = {d: v for d, v in known.items() if d == "" or d in domains}
    imports = [helper.make_opsetid(d, opsets[d]) for d in sorted(opsets)]
    model = helper.make_model(graph, opset_imports=imports, ir_version=_IR_VERSION, doc_string=doc,
                              producer_name=_PRODUCER[0], producer_version=_PRODUCER[1])
    onnx.checker.check_model(model)
    return model


ROWS_INDEPENDENT_KEY = "modelsql.rows_independent"
"""``metadata_props`` key by which a model declares each output row a function of its own input row
alone, where :func:`modelsql.analyses.batch_axis.batch_dependence` cannot follow the graph."""


def rows_independent(model: onnx.ModelProto) -> onnx.ModelProto:
    """Declare ``model`` row-independent (:data:`ROWS_INDEPENDENT_KEY`), and return it.

    A featurizer here appends one constant row to every batch and drops it again (ONNX Runtime's
    string ops refuse zero rows) and pads tokens to the batch's longest row; neither changes a
    row's features (batched and one-row-at-a-time outputs are equal, ``tests/models/test_text_converters.py``),
    but the batch-axis analysis cannot prove it from the operators' semantics.
    """
    for p in model.metadata_props:
        if p.key == ROWS_INDEPENDENT_KEY:
            return model
    entry = model.metadata_props.add()
    entry.key, entry.value = ROWS_INDEPENDENT_KEY, "modelsql.converters.text: each row is tokenized and counted alone"
    return model


def _refuse(cls: str, param: str, value: Any, why: str) -> NotSupportedError:
    return NotSupportedError(
        f"cannot convert {cls}({param}={value!r}) to ONNX exactly: {why}", code="conversion_failed"
    )


# ---------------------------------------------------------------------------------------------
# featurizers


def _check_vectorizer(v: Any) -> None:
    """Raise unless ``v`` is a fitted Count/TfidfVectorizer whose transform this module reproduces."""
    from sklearn.feature_extraction.text import CountVectorizer

    cls = type(v).__name__
    if not isinstance(v, CountVectorizer):
        raise NotSupportedError(f"{cls} is not a CountVectorizer or TfidfVectorizer", code="conversion_failed")
    if not getattr(v, "vocabulary_", None) or (getattr(v, "use_idf", False) and not hasattr(v, "idf_")):
        raise ProgrammingError(f"the {cls} is not fitted: call fit() before converting it", code="not_fitted")
    checks = [
        ("analyzer", v.analyzer, v.analyzer in _ANALYZERS, "only 'word', 'char' and 'char_wb' have a graph"),
        ("input", v.input, v.input == "content", "the graph reads strings, not files"),
        ("strip_accents", v.strip_accents, v.strip_accents is None, "ONNX has no accent stripping"),
        ("preprocessor", v.preprocessor, v.preprocessor is None, "a Python callable has no graph"),
    ]
    if v.analyzer == "word":
        checks.append(("tokenizer", v.tokenizer, v.tokenizer is None, "a Python callable has no graph"))
        checks.append(("token_pattern", v.token_pattern, v.token_pattern in _TOKEN_PATTERNS,
                       f"only {sorted(set(_TOKEN_PATTERNS))} have an exact RE2 translation"))
    for param, value, ok, why in checks:
        if not ok:
            raise _refuse(cls, param, value, why)


def _lowercase(g: _Graph, x: str) -> str:
    # C.UTF-8: the default en_US.UTF-8 is missing on many hosts ("Failed to construct locale")
    return g.op("StringNormalizer", [x], case_change_action="LOWER", is_case_sensitive=0, locale="C.UTF-8")


def _tokenize(g: _Graph, x: str, tokenexp: str, pad: str = PAD) -> str:
    """``[B]`` strings -> ``[B, T]`` regex matches (leftmost-longest, RE2), right-padded with ``pad``."""
    return g.op("Tokenizer", [x], domain="com.microsoft", mark=0, mincharnum=1, pad_value=pad, tokenexp=tokenexp)


def _word_tokens(g: _Graph, x: str, v: Any) -> str:
    """sklearn's word tokens, less its stop words: ``[B] -> [B, T]``."""
    tokens = _tokenize(g, x, _TOKEN_PATTERNS[v.token_pattern])
    stop = v.get_stop_words()
    return _drop_stop_words(g, tokens, sorted(stop)) if stop else tokens


def _drop_stop_words(g: _Graph, tokens: str, stop: list[str]) -> str:
    """Move the stop words of each row to its end (a stable TopK on a 0/1 key) and pad them, so
    n-grams form over the remaining tokens as in sklearn's ``_word_ngrams``."""
    is_stop = g.op("LabelEncoder", [tokens], domain="ai.onnx.ml", keys_strings=stop,
                   values_int64s=[1] * len(stop), default_int64=0)
    width = g.op("Shape", [tokens], start=1, end=2)
    _, order = g.op("TopK", [is_stop, width], n_out=2, axis=1, largest=0, sorted=1)  # ties keep order
    kept = g.op("GatherElements", [tokens, order], axis=1)
    moved = g.op("Cast", [g.op("GatherElements", [is_stop, order], axis=1)], to=TensorProto.BOOL)
    return g.op("Where", [moved, g.const("pad", [PAD], object), kept])


def _char_tokens(g: _Graph, x: str) -> str:
    """Characters, with each run of 2+ whitespace characters as one ' ' (sklearn's
    ``_white_spaces.sub(" ", doc)``): ``[B] -> [B, T]``."""
    tokens = _tokenize(g, x, f"[^{_WS}]|[{_WS}]+")
    runs = g.op("RegexFullMatch", [tokens], pattern=f"[{_WS}][{_WS}]+")
    return g.op("Where", [runs, g.const("space", [" "], object), tokens])


def _char_wb_tokens(g: _Graph, x: str) -> str:
    """Characters of ``' ' + word + ' '`` for each whitespace-separated word, one cell per word:
    ``[B] -> [B, W * C]``. Pad cells become '' (no characters), so a row's ' ' count is twice
    its word count, as in sklearn's ``_char_wb_ngrams``."""
    words = _tokenize(g, x, f"[^{_WS}]+", pad=_WORD_PAD)
    space = g.const("space", [" "], object)
    cells = g.op("StringConcat", [g.op("StringConcat", [space, words]), space])
    pad_cell = g.op("Equal", [words, g.const("word_pad", [_WORD_PAD], object)])
    cells = g.op("Where", [pad_cell, g.const("empty", [""], object), cells])
    chars = g.op("Tokenizer", [cells], domain="com.microsoft", mark=0, mincharnum=1, pad_value=PAD, separators=[""])
    return g.op("Flatten", [chars], axis=1)


def _producible(term: str, gram: list[str], v: Any) -> bool:
    """Whether sklearn's analyzer can emit ``term`` (split into ``gram``): its length is in
    ``ngram_range``, or it is char_wb's whole padded short word ``' ' + word + ' '``."""
    low, high = v.ngram_range
    if low <= len(gram) <= high:
        return all(gram)
    word = term[1:-1]
    return (v.analyzer == "char_wb" and len(gram) < low and len(term) >= 3 and term[0] == term[-1] == " "
            and not any(c in _WHITESPACE for c in word))


def _ngram_pool(v: Any) -> dict[str, Any]:
    """TfIdfVectorizer attributes counting ``v.vocabulary_``'s n-grams, grouped by length.

    Raises:
        NotSupportedError: a term (of a ``vocabulary`` given to the vectorizer) the analyzer never
            emits, which the graph could count: sklearn's column stays 0, ONNX's might not.
    """
    split = (lambda term: term.split(" ")) if v.analyzer == "word" else list
    grams = sorted(((split(t), i, t) for t, i in v.vocabulary_.items()), key=lambda gi: (len(gi[0]), gi[1]))
    for gram, _, term in grams:
        if not _producible(term, gram, v):
            raise _refuse(type(v).__name__, "vocabulary", term, f"the {v.analyzer!r} analyzer with "
                          f"ngram_range={tuple(v.ngram_range)} never emits this term; drop it from the vocabulary")
    pool: list[str] = []
    counts: list[int] = []
    indexes: list[int] = []
    for n in range(1, len(grams[-1][0]) + 1):
        counts.append(len(pool))
        for gram, i, _ in grams:
            if len(gram) == n:
                pool.extend(gram)
                indexes.append(i)
    # char_wb counts a padded word shorter than min_n once, whole: keep such short grams countable
    shortest = min(v.ngram_range[0], len(grams[0][0]))
    return dict(mode="TF", min_gram_length=shortest, max_gram_length=len(grams[-1][0]), max_skip_count=0,
                pool_strings=pool, ngram_counts=counts, ngram_indexes=indexes)


def _weighting(g: _Graph, counts: str, v: Any) -> str:
    """sklearn's binary / sublinear_tf / idf / norm on float32 ``[B, F]`` counts."""
    if v.binary:
        counts = g.op("Min", [counts, g.const("one", 1.0, np.float32)])
    if not hasattr(v, "use_idf"):  # CountVectorizer
        return counts
    if v.sublinear_tf:  # 1 + log(tf) where tf > 0 (skl2onnx: log(1 + tf))
        zero = g.const("zero", 0.0, np.float32)
        logged = g.op("Add", [g.op("Log", [counts]), g.const("one", 1.0, np.float32)])
        counts = g.op("Where", [g.op("Greater", [counts, zero]), logged, zero])
    if v.use_idf:
        counts = g.op("Mul", [counts, g.const("idf", np.asarray(v.idf_, dtype=np.float32))])
    if v.norm is None:
        return counts
    if v.norm not in ("l1", "l2"):
        raise _refuse(type(v).__name__, "norm", v.norm, "only 'l1', 'l2' and None are defined")
    reduce = "ReduceL2" if v.norm == "l2" else "ReduceL1"
    norms = g.op(reduce, [counts, g.const("axis", [1], np.int64)], keepdims=1)
    zero_norm = g.op("Equal", [norms, g.const("zero", 0.0, np.float32)])
    norms = g.op("Where", [zero_norm, g.const("one", 1.0, np.float32), norms])  # sklearn leaves 0 rows 0
    return g.op("Div", [counts, norms])


def text_featurizer_onnx(vectorizer: Any, input_name: str = "text", output_name: str = "features", *,
                         column: bool = False, n_rows_hint: Optional[int] = None) -> onnx.ModelProto:
    """An ONNX graph computing ``vectorizer.transform(texts).toarray()`` (PRETZEL's featurizer step).

    Args:
        vectorizer: a fitted ``TfidfVectorizer`` or ``CountVectorizer``: analyzer ``'word'``
            (token_pattern sklearn's default or ``(?u)\\b\\w+\\b``), ``'char'`` or ``'char_wb'``;
            any ``ngram_range``, ``lowercase``, ``binary``, ``stop_words``, ``norm`` (l1, l2,
            None), ``use_idf``, ``smooth_idf``, ``sublinear_tf``; ``min_df`` / ``max_df`` /
            ``max_features`` / ``vocabulary`` only shape ``vocabulary_``.
        input_name: the graph input: ``string[N]``, or ``string[N, 1]`` with ``column=True``
            (a text column as ``from_sklearn`` feeds a ``ColumnTransformer``).
        output_name: the graph output: ``float[N, F]``, ``F = len(vectorizer.vocabulary_)``,
            columns in ``vocabulary_`` order. CountVectorizer counts are exact float32 integers.
        column: declare the input ``[N, 1]`` instead of ``[N]``.
        n_rows_hint: declare the batch dimension with this fixed size (e.g. 1 for a single-row
            serving session) instead of the symbolic ``N``; the computation is the same.

    Returns:
        A checked ModelProto, opset 20 plus ``com.microsoft`` (``Tokenizer``: ONNX Runtime only)
        and, with stop words, ``ai.onnx.ml``. The vocabulary is in ``TfIdfVectorizer``'s node
        attributes, ``idf_`` (float32 ``[F]``) is an initializer.

    Raises:
        NotSupportedError: code ``conversion_failed``, naming the parameter and its value, for
            ``strip_accents``, a ``preprocessor`` / ``tokenizer`` / callable ``analyzer``, another
            ``token_pattern``, ``input`` other than ``'content'``, or a non-vectorizer.
        ProgrammingError: code ``not_fitted``.
    """
    _check_vectorizer(vectorizer)
    g = _Graph()
    rows: Any = n_rows_hint if n_rows_hint is not None else BATCH_DIM
    x = g.op("Reshape", [input_name, g.const("flat", [-1], np.int64)]) if column else input_name
    n = g.op("Shape", [x], start=0, end=1)
    x = g.op("Concat", [x, g.const("extra_row", [_EXTRA_ROW], object)], axis=0)
    if vectorizer.lowercase:
        x = _lowercase(g, x)
    analyzer = vectorizer.analyzer
    tokens = (_word_tokens(g, x, vectorizer) if analyzer == "word"
              else _char_tokens(g, x) if analyzer == "char" else _char_wb_tokens(g, x))
    counts = g.op("TfIdfVectorizer", [tokens], **_ngram_pool(vectorizer))
    features = _weighting(g, counts, vectorizer)
    g.op("Slice", [features, g.const("start", [0], np.int64), n, g.const("axis", [0], np.int64)], out=output_name)
    width = len(vectorizer.vocabulary_)
    inputs = [_tensor(input_name, TensorProto.STRING, [rows, 1] if column else [rows])]
    outputs = [_tensor(output_name, TensorProto.FLOAT, [rows, width])]
    doc = f"{type(vectorizer).__name__}(analyzer={analyzer!r}, ngram_range={tuple(vectorizer.ngram_range)}), F={width}"
    return rows_independent(_model(g, inputs, outputs, "modelsql_text_featurizer", doc))


def _one_value(values: Sequence[onnx.ValueInfoProto], what: str) -> onnx.ValueInfoProto:
    if len(values) != 1:
        raise NotSupportedError(f"union_onnx needs parts with one {what}, got {len(values)}", code="conversion_failed")
    return values[0]


def union_onnx(parts: Sequence[onnx.ModelProto], input_name: str = "text",
               output_name: str = "features") -> onnx.ModelProto:
    """Featurizers sharing one input, their outputs concatenated on axis 1 (``FeatureUnion``,
    or a ``ColumnTransformer`` applying several vectorizers to one text column).

    Args:
        parts: models with one input each, all of the same type (``string[N]`` or
            ``string[N, 1]``), and one output ``float[N, F_i]``, in the union's order.
        input_name: the shared input's name.
        output_name: the output, ``float[N, sum F_i]``.

    Returns:
        A checked ModelProto; part ``i``'s names are prefixed ``p<i>_`` (``onnx.compose.add_prefix``);
        names, producer and doc string are constants, so equal parts give equal bytes.

    Raises:
        NotSupportedError: code ``conversion_failed`` if ``parts`` is empty or a part has
            more than one input or output, or the parts' input types differ.
    """
    if not parts:
        raise NotSupportedError("union_onnx needs at least one part", code="conversion_failed")
    first = _one_value(parts[0].graph.input, "input")
    g = _Graph()
    outs: list[str] = []
    widths: list[Optional[int]] = []
    opsets: dict[str, int] = {}
    for i, part in enumerate(parts):
        value = _one_value(part.graph.input, "input")
        if value.type != first.type:
            raise NotSupportedError(f"union_onnx: part {i}'s input type differs from part 0's",
                                    code="conversion_failed")
        out = _one_value(part.graph.output, "output")
        dims = out.type.tensor_type.shape.dim
        widths.append(dims[1].dim_value if len(dims) == 2 and dims[1].HasField("dim_value") else None)
        p = onnx.compose.add_prefix(part, f"p{i}_")
        for node in p.graph.node:
            node.input[:] = [input_name if x == f"p{i}_{value.name}" else x for x in node.input]
        g.nodes.extend(p.graph.node)
        g.inits.extend(p.graph.initializer)
        outs.append(p.graph.output[0].name)
        for imp in part.opset_import:
            opsets[imp.domain] = max(opsets.get(imp.domain, 0), imp.version)
    g.op("Concat", outs, out=output_name, axis=1)
    inp = onnx.ValueInfoProto()
    inp.CopyFrom(first)
    inp.name = input_name
    rows = first.type.tensor_type.shape.dim[0]
    batch = rows.dim_value if rows.HasField("dim_value") else (rows.dim_param or BATCH_DIM)
    known = [w for w in widths if w is not None]
    total = sum(known) if len(known) == len(widths) else None
    return rows_independent(_model(g, [inp], [_tensor(output_name, TensorProto.FLOAT, [batch, total])],
                  "modelsql_feature_union", f"union of {len(parts)} featurizers, F={total}", opsets))


# ---------------------------------------------------------------------------------------------
# linear heads

_PROBA_CLASSIFIERS = ("LogisticRegression", "LogisticRegressionCV")
_SCORE_CLASSIFIERS = ("LinearSVC", "RidgeClassifier", "RidgeClassifierCV", "Perceptron",
                      "PassiveAggressiveClassifier", "SGDClassifier")
_REGRESSORS = ("LinearRegression", "Ridge", "RidgeCV", "Lasso", "LassoCV", "ElasticNet", "ElasticNetCV",
               "Lars", "LassoLars", "SGDRegressor", "LinearSVR", "HuberRegressor", "BayesianRidge",
               "ARDRegression", "QuantileRegressor", "TheilSenRegressor", "OrthogonalMatchingPursuit")


def _is_sklearn(est: Any, names: Sequence[str]) -> bool:
    return type(est).__name__ in names and (type(est).__module__ or "").startswith("sklearn.")


def _head_kind(est: Any) -> str:
    """How ``est`` turns scores into outputs: ``softmax`` (LogisticRegression), ``ovr``
    (log_loss SGD: sigmoid, rows normalized), ``huber`` (modified_huber SGD), ``scores`` (no
    predict_proba: decision_function as skl2onnx emits it) or ``regressor``."""
    if _is_sklearn(est, _REGRESSORS):
        return "regressor"
    if _is_sklearn(est, _PROBA_CLASSIFIERS):
        return "softmax"
    if _is_sklearn(est, _SCORE_CLASSIFIERS):
        loss = getattr(est, "loss", None) if type(est).__name__ == "SGDClassifier" else None
        kinds: dict[object, str] = {"log_loss": "ovr", "modified_huber": "huber"}
        return kinds.get(loss, "scores")
    raise NotSupportedError(f"{type(est).__name__} is not a linear model linear_head_onnx converts",
                            code="conversion_failed")


def _weights(est: Any, n_features: Optional[int]) -> tuple[np.ndarray, np.ndarray]:
    """``(W float32[F, K], b float32[K])`` with ``scores = X @ W + b`` as sklearn computes them."""
    from scipy import sparse

    coef = getattr(est, "coef_", None)
    if coef is None:
        raise ProgrammingError(f"the {type(est).__name__} is not fitted: call fit() before converting it",
                               code="not_fitted")
    coef = np.asarray(coef.toarray() if sparse.issparse(coef) else coef, dtype=np.float64)
    coef = coef.reshape(1, -1) if coef.ndim == 1 else coef
    width = coef.shape[1]
    if n_features is not None and int(n_features) != width:
        raise ProgrammingError(f"n_features={n_features} but the {type(est).__name__} was fitted on {width} features",
                               code="feature_mismatch")
    bias = np.broadcast_to(np.asarray(getattr(est, "intercept_", 0.0), dtype=np.float64).reshape(-1), (coef.shape[0],))
    return np.ascontiguousarray(coef.T, dtype=np.float32), np.asarray(bias, dtype=np.float32)


def _single_label(est: Any, width: int) -> bool:
    """Whether ``predict`` gives one label per row (not a multi-label RidgeClassifier's ``[N, k]``)."""
    import warnings

    classes = getattr(est, "classes_", None)
    if classes is None or np.ndim(classes) != 1:
        return False
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "X does not have valid feature names"
        return np.ndim(est.predict(np.zeros((1, width)))) == 1


def _classes(est: Any, k: int, width: int) -> tuple[np.ndarray, int]:
    """``classes_`` as an int64 or string array and its ONNX element type (``k`` score columns)."""
    cls = type(est).__name__
    if not _single_label(est, width):
        raise _refuse(cls, "classes_", getattr(est, "classes_", None),
                      "only single-label classifiers have a label output")
    classes = np.asarray(est.classes_)
    if k != (1 if len(classes) == 2 else len(classes)):
        raise _refuse(cls, "classes_", classes.tolist(), f"coef_ has {k} rows")
    if classes.dtype.kind in "iub":
        return classes.astype(np.int64), TensorProto.INT64
    if classes.dtype.kind == "f" and np.all(classes == np.round(classes)):
        return classes.astype(np.int64), TensorProto.INT64
    if classes.dtype.kind in "UO" and all(isinstance(c, str) for c in classes):
        return classes.astype(object), TensorProto.STRING
    raise _refuse(cls, "classes_", classes.tolist(), "labels must be integers or strings")


def _normalize_rows(g: _Graph, p: str, n_classes: int) -> str:
    """``p / p.sum(1)``, a row summing to 0 uniform (sklearn's ``_predict_proba_lr``)."""
    total = g.op("ReduceSum", [p, g.const("axis", [1], np.int64)], keepdims=1)
    zero = g.op("Equal", [total, g.const("zero", 0.0, np.float32)])
    p = g.op("Where", [zero, g.const("one", 1.0, np.float32), p])
    total = g.op("Where", [zero, g.const("n_classes", float(n_classes), np.float32), total])
    return g.op("Div", [p, total])


def _huber(g: _Graph, scores: str) -> str:
    clipped = g.op("Clip", [scores, g.const("lo", -1.0, np.float32), g.const("hi", 1.0, np.float32)])
    return g.op("Div", [g.op("Add", [clipped, g.const("one", 1.0, np.float32)]), g.const("two", 2.0, np.float32)])


def _binary_outputs(g: _Graph, scores: str, kind: str, proba_name: str) -> str:
    """``[N, 1]`` scores -> probabilities ``[1 - p, p]`` (``[-d, d]`` for ``scores``); returns the
    class index ``d > 0`` as int64 ``[N]`` (LinearClassifierMixin.predict)."""
    if kind == "scores":
        g.op("Concat", [g.op("Neg", [scores]), scores], out=proba_name, axis=1)
    else:
        p = g.op("Sigmoid", [scores]) if kind in ("softmax", "ovr") else _huber(g, scores)
        g.op("Concat", [g.op("Sub", [g.const("one", 1.0, np.float32), p]), p], out=proba_name, axis=1)
    positive = g.op("Greater", [scores, g.const("zero", 0.0, np.float32)])
    index = g.op("Cast", [positive], to=TensorProto.INT64)
    return g.op("Reshape", [index, g.const("flat", [-1], np.int64)])


def _multiclass_outputs(g: _Graph, scores: str, kind: str, proba_name: str, n_classes: int) -> str:
    """``[N, C]`` scores -> probabilities; returns the ArgMax of the scores (not of the
    probabilities, whose float32 rounding can tie) as int64 ``[N]``."""
    if kind == "softmax":
        g.op("Softmax", [scores], out=proba_name, axis=1)
    elif kind == "ovr":
        g.op("Identity", [_normalize_rows(g, g.op("Sigmoid", [scores]), n_classes)], out=proba_name)
    elif kind == "huber":
        g.op("Identity", [_normalize_rows(g, _huber(g, scores), n_classes)], out=proba_name)
    else:
        g.op("Identity", [scores], out=proba_name)
    return g.op("ArgMax", [scores], axis=1, keepdims=0)


def linear_head_onnx(estimator: Any, n_features: Optional[int] = None, input_name: str = "features", *,
                     label_name: str = "label", proba_name: str = "probabilities",
                     output_name: str = "variable") -> onnx.ModelProto:
    """A fitted linear model as ``MatMul + Add`` with its weights as initializers (PRETZEL's
    shareable head; skl2onnx emits ``ai.onnx.ml.LinearClassifier`` whose weights are node
    attributes, which cannot be shared across sessions or memory-mapped).

    Args:
        estimator: a fitted LogisticRegression(CV) (binary: sigmoid; multiclass: softmax, as
            sklearn 1.9 does), LinearSVC, RidgeClassifier(CV), Perceptron,
            PassiveAggressiveClassifier, SGDClassifier (any loss), or a linear regressor
            (LinearRegression, Ridge(CV), Lasso(CV), ElasticNet(CV), Lars, LassoLars,
            SGDRegressor, LinearSVR, HuberRegressor, BayesianRidge, ARDRegression,
            QuantileRegressor, TheilSenRegressor, OrthogonalMatchingPursuit).
        n_features: F, checked against ``coef_``; None takes it from ``coef_``.
        input_name: the input, ``float[N, F]``.
        label_name, proba_name: classifier outputs ``label`` (int64 or string ``[N]``, equal to
            ``predict``) and ``probabilities`` (float ``[N, C]``: ``predict_proba``; for
            classifiers without it the decision_function scores, ``[-d, d]`` when binary, as
            skl2onnx does with ``zipmap=False``).
        output_name: a regressor's output ``variable``, float ``[N, 1]`` (``[N, k]`` for k targets).

    Returns:
        A checked ModelProto (opset 20, like the featurizers, so ``onnx.compose.merge_models``
        chains them); initializers ``coef_*`` float32 ``[F, K]`` (K = 1 for a binary classifier
        or a single target), ``intercept_*`` ``[K]`` and ``classes_*`` (boolean labels become
        int64 0 / 1).

    Raises:
        NotSupportedError: code ``conversion_failed`` for other estimators, multi-label
            classifiers, labels that are neither integers nor strings.
        ProgrammingError: codes ``not_fitted``, ``feature_mismatch``.
    """
    kind = _head_kind(estimator)
    w, b = _weights(estimator, n_features)
    g = _Graph()
    scores = g.op("Add", [g.op("MatMul", [input_name, g.const("coef", w)]), g.const("intercept", b)],
                  out=output_name if kind == "regressor" else None)
    inputs = [_tensor(input_name, TensorProto.FLOAT, [BATCH_DIM, w.shape[0]])]
    doc = f"{type(estimator).__name__} head, F={w.shape[0]}, K={w.shape[1]}"
    if kind == "regressor":
        return _model(g, inputs, [_tensor(output_name, TensorProto.FLOAT, [BATCH_DIM, w.shape[1]])],
                      "modelsql_linear_head", doc)
    classes, elem = _classes(estimator, w.shape[1], w.shape[0])
    index = (_binary_outputs(g, scores, kind, proba_name) if w.shape[1] == 1
             else _multiclass_outputs(g, scores, kind, proba_name, len(classes)))
    g.op("Gather", [g.const("classes", classes), index], out=label_name, axis=0)
    outputs = [_tensor(label_name, elem, [BATCH_DIM]),
               _tensor(proba_name, TensorProto.FLOAT, [BATCH_DIM, len(classes)])]
    return _model(g, inputs, outputs, "modelsql_linear_head", doc)


# ---------------------------------------------------------------------------------------------
# the hook from_sklearn calls


def _steps(est: Any) -> list:
    """A Pipeline's steps without ``None`` / ``'passthrough'``; ``[est]`` for anything else."""
    if type(est).__name__ != "Pipeline" or not hasattr(est, "steps"):
        return [est]
    return [s for _, s in est.steps if s is not None and not (isinstance(s, str) and s == "passthrough")]


def _is_featurizer(est: Any) -> bool:
    if _is_sklearn(est, ("CountVectorizer", "TfidfVectorizer")):
        return True
    if _is_sklearn(est, ("FeatureUnion",)):
        return all(t in (None, "drop") or _is_featurizer(t) for _, t in est.transformer_list)
    return False


def _is_head(est: Any) -> bool:
    if _is_sklearn(est, _REGRESSORS):
        return True
    if not _is_sklearn(est, _PROBA_CLASSIFIERS + _SCORE_CLASSIFIERS):
        return False
    coef = getattr(est, "coef_", None)
    return coef is None or _single_label(est, coef.shape[-1])  # unfitted: convert() says not_fitted


def supports(estimator: Any) -> bool:
    """Whether :func:`convert` handles ``estimator``: a Count/TfidfVectorizer, a FeatureUnion of
    them, a linear head, or a Pipeline of a featurizer followed by at most one linear head."""
    steps = _steps(estimator)
    if len(steps) == 1:
        return _is_featurizer(steps[0]) or _is_head(steps[0])
    return len(steps) == 2 and _is_featurizer(steps[0]) and _is_head(steps[1])


def _featurizer(est: Any, input_name: str, output_name: str) -> onnx.ModelProto:
    if not _is_sklearn(est, ("FeatureUnion",)):
        return text_featurizer_onnx(est, input_name, output_name)
    if est.transformer_weights:
        raise _refuse("FeatureUnion", "transformer_weights", est.transformer_weights, "not converted")
    parts = [_featurizer(t, input_name, "features") for _, t in est.transformer_list if t not in (None, "drop")]
    return union_onnx(parts, input_name, output_name)


def convert(estimator: Any, *, input_name: str = "text", n_features: Optional[int] = None,
            regressor_output: str = "variable") -> Optional[onnx.ModelProto]:
    """modelsql's own conversion of ``estimator``, or None when :func:`supports` says no (the
    caller then falls back to skl2onnx).

    A featurizer gives ``input_name: string[N] -> features: float[N, F]``; a linear head
    ``input_name: float[N, F] ->`` ``label`` + ``probabilities``, or ``regressor_output`` (see
    :func:`linear_head_onnx`); a Pipeline of both, the two merged (``onnx.compose.merge_models``)
    on ``features``: ``string[N] -> label, probabilities`` (or the regressor's output).
    ``n_features`` is checked against a bare head's ``coef_``.

    Raises:
        NotSupportedError, ProgrammingError: as :func:`text_featurizer_onnx` and :func:`linear_head_onnx`.
    """
    if not supports(estimator):
        return None
    steps = _steps(estimator)
    if len(steps) == 1 and _is_head(steps[0]):
        return linear_head_onnx(steps[0], n_features, input_name, output_name=regressor_output)
    features = _featurizer(steps[0], input_name, "features")
    if len(steps) == 1:
        return features
    head = linear_head_onnx(steps[1], None, "features", output_name=regressor_output)
    merged = onnx.compose.merge_models(features, head, io_map=[("features", "features")], prefix2="head_")
    merged.graph.name = "modelsql_pipeline"
    merged.graph.doc_string = merged.doc_string = f"{features.graph.doc_string}; {head.graph.doc_string}"
    merged.producer_name, merged.producer_version = _PRODUCER
    for out in merged.graph.output:
        out.name = out.name[len("head_"):]
    return rows_independent(_rename_head_outputs(merged))


def _rename_head_outputs(model: onnx.ModelProto) -> onnx.ModelProto:
    """merge_models prefixed the head's outputs: give them back their plain names."""
    renames = {f"head_{o.name}": o.name for o in model.graph.output}
    for node in model.graph.node:
        node.output[:] = [renames.get(x, x) for x in node.output]
        node.input[:] = [renames.get(x, x) for x in node.input]
    onnx.checker.check_model(model)
    return model


# ---------------------------------------------------------------------------------------------
# skl2onnx registration (vectorizers inside pipelines modelsql does not split)

_SKL2ONNX_OPTIONS = {"tokenexp": None, "separators": None, "nan": [True, False],
                     "keep_empty_string": [True, False], "locale": None}


def register_skl2onnx() -> None:
    """Make skl2onnx convert every CountVectorizer / TfidfVectorizer with
    :func:`text_featurizer_onnx` (``skl2onnx.update_registered_converter``), so pipelines modelsql
    does not split (a ColumnTransformer mixing text and numeric columns, a vectorizer before a
    tree ensemble ...) get the exact graph too. Idempotent; affects the whole process.

    skl2onnx's options for these classes (``tokenexp``, ``separators``, ``locale``, ``nan``,
    ``keep_empty_string``) are accepted and ignored. The converted model needs a default-domain
    target opset >= 20 (``convert_sklearn(..., target_opset={"": 20, "ai.onnx.ml": 3})``).

    Raises:
        NotSupportedError: code ``missing_dependency`` if skl2onnx is not installed.
    """
    try:
        from skl2onnx import update_registered_converter
        from skl2onnx.shape_calculators.text_vectorizer import calculate_sklearn_text_vectorizer_output_shapes
        from sklearn.feature_extraction.text import CountVectorizer, TfidfVectorizer
    except ImportError as exc:
        raise NotSupportedError(f"register_skl2onnx needs skl2onnx and scikit-learn ({exc})",
                                code="missing_dependency") from None
    for cls, alias in ((CountVectorizer, "SklearnCountVectorizer"), (TfidfVectorizer, "SklearnTfidfVectorizer")):
        update_registered_converter(cls, alias, calculate_sklearn_text_vectorizer_output_shapes,
                                    _skl2onnx_vectorizer, options=dict(_SKL2ONNX_OPTIONS))


def skl2onnx_functions() -> tuple[dict, dict]:
    """``(custom_conversion_functions, custom_shape_calculators)`` for one ``skl2onnx.convert_sklearn`` call: what
    :func:`register_skl2onnx` registers for the whole process, for that call alone (the converted model needs a
    default-domain target opset >= :data:`OPSET`)."""
    from skl2onnx.shape_calculators.text_vectorizer import calculate_sklearn_text_vectorizer_output_shapes
    from sklearn.feature_extraction.text import CountVectorizer, TfidfVectorizer

    classes = (CountVectorizer, TfidfVectorizer)
    return ({c: _skl2onnx_vectorizer for c in classes},
            {c: calculate_sklearn_text_vectorizer_output_shapes for c in classes})


def _skl2onnx_vectorizer(scope: Any, operator: Any, container: Any) -> None:
    """skl2onnx converter: inline :func:`text_featurizer_onnx`'s graph into the container."""
    if container.target_opset < OPSET:
        raise NotSupportedError(f"the exact {type(operator.raw_operator).__name__} graph needs target_opset >= {OPSET} "
                                f"(got {container.target_opset})", code="conversion_failed")
    source = operator.inputs[0]
    column = len(source.type.shape or [None]) == 2
    model = text_featurizer_onnx(operator.raw_operator, "x", "y", column=column)
    names = {"x": source.full_name, "y": operator.outputs[0].full_name}
    rename = lambda n: names.setdefault(n, scope.get_unique_variable_name(n))  # noqa: E731
    for t in model.graph.initializer:
        container.add_initializer(rename(t.name), t.data_type, list(t.dims), numpy_helper.to_array(t).ravel().tolist())
    versions = {imp.domain: imp.version for imp in model.opset_import}
    for node in model.graph.node:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        container.add_node(node.op_type, [rename(x) for x in node.input], [rename(x) for x in node.output],
                           op_domain=node.domain, op_version=versions[node.domain],
                           name=scope.get_unique_operator_name(node.name), **attrs)
