"""A deterministic generator of product-review-like sentences with star-rating labels.

The text workload of PRETZEL's case study (Lee et al., OSDI 2018): many sentiment pipelines that
share one featurizer (TF-IDF word and char n-grams) and differ in their linear heads. The data is
generated, never downloaded: a small built-in lexicon (topics and their nouns, graded adjectives
and verbs, negations, emphasis) filled into a few templates by ``random.Random(seed)``.

Determinism: only ``Random.random``, ``Random.choice`` and ``Random.randrange`` are used (no
``gauss``, no ``math`` on floats beyond + and *), so the same ``(n, seed, classes, odd)`` gives
the same sentences and labels on every platform and every run of a CPython >= 3.10.
"""

from __future__ import annotations

import random

__all__ = ["reviews"]

# topic -> (nouns, baseline sentiment of reviews on that topic)
_TOPICS: tuple[tuple[tuple[str, ...], float], ...] = (
    (("espresso", "latte", "coffee", "beans", "grinder", "barista", "mug", "roast"), 0.3),
    (("room", "staff", "breakfast", "lobby", "bed", "view", "pool", "suite"), 0.1),
    (("battery", "screen", "camera", "charger", "case", "speaker", "keyboard", "app"), -0.2),
    (("plot", "author", "chapter", "ending", "characters", "cover", "story", "translation"), 0.2),
    (("sole", "laces", "fit", "leather", "heel", "insole", "boots", "sneakers"), 0.0),
    (("installer", "update", "interface", "compiler", "plugin", "docs", "library", "api"), -0.4),
    (("menu", "waiter", "soup", "dessert", "pasta", "salad", "wine", "burger"), 0.1),
    (("delivery", "package", "courier", "refund", "tracking", "box", "seller", "price"), -0.3),
)

_ADJECTIVES: tuple[tuple[str, float], ...] = (
    ("excellent", 2.0), ("great", 1.6), ("wonderful", 1.8), ("superb", 2.0), ("fantastic", 1.9),
    ("good", 1.0), ("nice", 0.8), ("solid", 0.7), ("decent", 0.4), ("fine", 0.3),
    ("okay", 0.0), ("average", -0.1), ("mediocre", -0.6), ("bland", -0.8), ("slow", -0.7),
    ("poor", -1.2), ("bad", -1.2), ("awful", -1.9), ("terrible", -2.0), ("horrible", -2.0),
)
_VERBS: tuple[tuple[str, str, float], ...] = (  # (past, base form, polarity)
    ("loved", "love", 2.0), ("liked", "like", 1.0), ("enjoyed", "enjoy", 1.2), ("recommended", "recommend", 1.5),
    ("bought", "buy", 0.0), ("tried", "try", 0.0), ("returned", "return", -1.5), ("disliked", "dislike", -1.0),
    ("hated", "hate", -2.0), ("regretted buying", "regret buying", -1.7),
)
_ENDINGS = ("for the price", "after a week", "overall", "at first", "in the end", "to be honest", "for me")
_EMPHASIS: tuple[tuple[str, float], ...] = (
    ("very ", 1.4), ("really ", 1.3), ("extremely ", 1.6), ("so ", 1.3), ("quite ", 0.8),
    ("a bit ", 0.5), ("", 1.0), ("", 1.0), ("", 1.0), ("", 1.0),
)
_NEGATIONS = ("not ", "never ", "hardly ")
_DETERMINERS = ("The", "This", "My", "Our", "That")
_COPULAS = ("is", "was", "seems", "looked", "felt")
_PUNCT = (".", ".", ".", "!", "!!", "?", "...", ";")

# used only when odd=True: non-ASCII words, abbreviations, 1-letter words, symbols
_ODD_WORDS = (
    "café", "naïve", "Zürich", "São Paulo", "crème brûlée", "jalapeño", "Ærøskøbing", "déjà vu",
    "C++", "C#", "U.S.", "e-mail", "Wi-Fi", "#1", "10/10", "don't", "I", "a", "x", "—", "“ok”",
    "…", "👍", "東京", "ÉNORME", "ŒUVRE", "well-made", "co-op", "A+", "%", "$20", "3.5mm",
)
_ODD_SPACES = ("\t", "  ", "\n", " \t ", "   ", "\r\n", "\u00a0")
_WHITESPACE_ONLY = (" \t ", "   ", "\t", " \n ", "\t\t")
_FORCED_WITHIN = 16  # the forced empty and whitespace-only rows are among the first 16


def _clause(rng: random.Random, nouns: tuple[str, ...]) -> tuple[str, float]:
    """One clause about a noun of the topic and its polarity (about -3.2 .. 3.2)."""
    noun = rng.choice(nouns)
    adj, pol = rng.choice(_ADJECTIVES)
    emph, gain = rng.choice(_EMPHASIS)
    neg = rng.choice(_NEGATIONS) if rng.random() < 0.2 else ""
    flip = -0.7 if neg else 1.0
    kind = rng.randrange(4)
    if kind == 0:
        return f"{rng.choice(_DETERMINERS)} {noun} {rng.choice(_COPULAS)} {neg}{emph}{adj}", pol * gain * flip
    if kind == 1:
        past, base, vpol = rng.choice(_VERBS)
        if neg:
            return f"I don't {base} the {noun}", vpol * flip
        return f"I {past} the {noun}", vpol
    if kind == 2:
        return f"{emph}{adj} {noun}".capitalize(), pol * gain
    return f"the {noun} was {neg}{emph}{adj} {rng.choice(_ENDINGS)}", pol * gain * flip


def _sentence(rng: random.Random, odd: bool) -> tuple[str, float]:
    """A review of 1-3 clauses about one topic, and its raw sentiment score."""
    topic = rng.randrange(len(_TOPICS))
    nouns, bias = _TOPICS[topic]
    parts, score = [], bias
    for _ in range(1 + rng.randrange(3)):
        text, pol = _clause(rng, nouns)
        parts.append(text + rng.choice(_PUNCT))
        score += pol / len(parts)
    text = " ".join(parts)
    if odd and rng.random() < 0.35:
        text = _oddify(rng, text)
    return text, score


def _oddify(rng: random.Random, text: str) -> str:
    """Sprinkle one oddity: a non-ASCII word or symbol, odd whitespace, or odd casing."""
    kind = rng.randrange(5)
    words = text.split(" ")
    if kind <= 1:
        words.insert(rng.randrange(len(words) + 1), rng.choice(_ODD_WORDS))
    elif kind == 2:
        i = rng.randrange(len(words))
        return " ".join(words[:i]) + rng.choice(_ODD_SPACES) + " ".join(words[i:])
    elif kind == 3:
        i = rng.randrange(len(words))
        words[i] = words[i].upper()
    else:
        return rng.choice(_ODD_SPACES) + text + rng.choice(("", " ", "\t", "\n"))
    return " ".join(words)


def _label(rng: random.Random, score: float, classes: int, noise: float) -> int:
    """The star rating 0..classes-1 of a score (about -2.5 .. 2.5), replaced by a random one with
    probability ``noise``."""
    if rng.random() < noise:
        return rng.randrange(classes)
    jitter = (rng.random() - 0.5) * 0.6
    bucket = int((score + jitter + 2.5) * classes / 5.0)
    return min(classes - 1, max(0, bucket))


def reviews(n: int, seed: int = 0, *, classes: int = 5, odd: bool = True,
            noise: float = 0.08) -> tuple[list[str], list[int]]:
    """``n`` deterministic product-review-like sentences and their star-rating labels.

    Each sentence talks about one of 8 topics (coffee, hotels, phones, books, shoes, software,
    restaurants, shipping) in 1-3 clauses built from graded adjectives and verbs, negations and
    emphasis. Its label is the sentiment score (plus the topic's baseline and a little jitter)
    cut into ``classes`` equal-width ratings; with probability ``noise`` the label is uniform.

    With ``odd=True`` about a third of the rows carry one oddity that text featurizers get wrong
    (:mod:`modelsql.converters.text` lists them): non-ASCII words ("café", "naïve",
    "Zürich", "東京", an emoji), "C++", "U.S.", "don't", 1-letter words, upper-case words, tabs,
    newlines, runs of spaces, a no-break space, leading or trailing whitespace; and two of the first
    16 rows (picked by the seed) are the empty string and a whitespace-only string. With
    ``odd=False`` every row is ASCII words separated by single spaces.

    Args:
        n: number of rows (>= 0).
        seed: the ``random.Random`` seed; the same arguments always give the same rows.
        classes: number of labels (>= 2); labels are ``0 .. classes - 1``, higher = more positive.
        odd: whether to include the odd rows described above.
        noise: probability that a label is replaced by a uniformly random one.

    Returns:
        ``(texts, labels)``: two lists of length ``n`` (``str`` and ``int``); a prefix of a longer
        call: ``reviews(n, s)[0][:k] == reviews(k, s)[0]``.

    Raises:
        ValueError: ``n < 0``, ``classes < 2`` or ``noise`` outside [0, 1].

    Speed: about 0.6 s per 100,000 rows on one core.
    """
    if n < 0 or classes < 2 or not 0.0 <= noise <= 1.0:
        raise ValueError(f"reviews() needs n >= 0, classes >= 2 and 0 <= noise <= 1 (got {n}, {classes}, {noise})")
    rng = random.Random(seed)
    # rows forced empty / whitespace only: chosen by the seed alone, so reviews(n)[:k] == reviews(k)
    empty, blank = random.Random(f"reviews-odd-rows-{seed}").sample(range(_FORCED_WITHIN), 2) if odd else (-1, -1)
    texts: list[str] = []
    labels: list[int] = []
    for i in range(n):
        text, score = _sentence(rng, odd)
        label = _label(rng, score, classes, noise)
        if i == empty:
            text = ""
        elif i == blank:
            text = _WHITESPACE_ONLY[seed % len(_WHITESPACE_ONLY)]
        texts.append(text)
        labels.append(label)
    return texts, labels
