"""TUNE search spaces (modelsql/tuning/space.py): per-epoch values of schedules, validation errors
that name the hyper-parameter, grid order, JSON round trip, change points, and the Optuna mapping."""

from __future__ import annotations

import optuna
import pytest

from modelsql import errors
from modelsql.tuning.space import Choice, IntRange, LogUniform, Piecewise, Space, StepDecay, Uniform

SCHEDULES = Space((
    ("lr", StepDecay(initial=Choice((0.1, 0.05, 0.02)), milestones=Choice(((10, 20), (15, 25), (20, 30))),
                     gamma=Choice((0.1, 0.2)))),
    ("batch_size", 64),
))


def _values(seq, name):
    return [dict(hp)[name] for hp in seq]


def test_step_decay_values_are_the_formula_exactly() -> None:
    space = Space((("lr", StepDecay(initial=0.1, milestones=(2, 4), gamma=0.1)),))
    lr = _values(space.sequence({}, 6), "lr")
    assert lr == [0.1, 0.1, 0.1 * 0.1, 0.1 * 0.1, 0.1 * 0.1 ** 2, 0.1 * 0.1 ** 2]
    assert lr[0] == 0.1 and lr[2] == 0.1 * 0.1 ** 1


def test_warmup_scales_the_first_epochs() -> None:
    space = Space((("lr", StepDecay(initial=0.3, milestones=(5,), gamma=0.5, warmup=3)),))
    lr = _values(space.sequence({}, 7), "lr")
    assert lr == [0.3 * 1 / 3, 0.3 * 2 / 3, 0.3 * 3 / 3, 0.3, 0.3, 0.3 * 0.5, 0.3 * 0.5]


def test_piecewise_values_between_milestones() -> None:
    space = Space((("lr", Piecewise(values=(0.1, Choice((0.01, 0.02)), 0.001), milestones=(2, 4), warmup=1)),
                   ("opt", Piecewise(values=("sgd", "adam"), milestones=(3,)))))
    seq = space.sequence({"lr.values[1]": 0.02}, 5)
    assert _values(seq, "lr") == [0.1, 0.1, 0.02, 0.02, 0.001]
    assert _values(seq, "opt") == ["sgd", "sgd", "sgd", "adam", "adam"]


def test_sequence_holds_every_hyper_parameter_sorted_and_is_reproducible() -> None:
    config = {"lr.initial": 0.05, "lr.milestones": (10, 20), "lr.gamma": 0.2}
    seq = SCHEDULES.sequence(config, 12)
    assert seq[0] == (("batch_size", 64), ("lr", 0.05))
    assert seq == SCHEDULES.sequence(dict(config), 12)
    # lists (a configuration read back from JSON) give the same key
    assert SCHEDULES.sequence({**config, "lr.milestones": [10, 20]}, 12) == seq


def test_shared_prefix_exactly_until_the_schedules_differ() -> None:
    a = SCHEDULES.sequence({"lr.initial": 0.1, "lr.milestones": (10, 20), "lr.gamma": 0.1}, 30)
    b = SCHEDULES.sequence({"lr.initial": 0.1, "lr.milestones": (15, 25), "lr.gamma": 0.1}, 30)
    c = SCHEDULES.sequence({"lr.initial": 0.1, "lr.milestones": (10, 20), "lr.gamma": 0.2}, 30)
    shared = next(i for i, (x, y) in enumerate(zip(a, b)) if x != y)
    assert shared == 10
    assert next(i for i, (x, y) in enumerate(zip(a, c)) if x != y) == 10


def test_sequence_needs_every_sampled_leaf() -> None:
    with pytest.raises(errors.ProgrammingError) as e:
        SCHEDULES.sequence({"lr.initial": 0.1, "lr.gamma": 0.1}, 3)
    assert e.value.code == "missing_hyperparameter" and "lr.milestones" in str(e.value)


def test_dimensions_have_flattened_names_in_written_order() -> None:
    space = Space((("bs", Choice((32, 64))), ("lr", StepDecay(initial=LogUniform(1e-3, 1.0), warmup=IntRange(0, 3))),
                   ("dropout", 0.1)))
    assert list(space.dimensions()) == ["bs", "lr.initial", "lr.warmup"]
    assert list(space.leaves()) == ["bs", "lr.initial", "lr.milestones", "lr.gamma", "lr.warmup", "dropout"]


@pytest.mark.parametrize("hp, leaf", [
    (Choice(()), "x"),
    (Uniform(1.0, 1.0), "x"),
    (IntRange(5, 2), "x"),
    (LogUniform(0.0, 1.0), "x"),
    (StepDecay(initial=0.1, milestones=(20, 10)), "x.milestones"),
    (StepDecay(initial=0.1, milestones=(10, 40)), "x.milestones"),
    (StepDecay(initial=0.1, milestones=(0, 10)), "x.milestones"),
    (StepDecay(initial=0.1, milestones=(1.5,)), "x.milestones"),
    (StepDecay(initial=0.1, milestones=Choice(((10,), (12, 11)))), "x.milestones"),
    (StepDecay(initial=0.1, milestones=Uniform(1, 5)), "x.milestones"),
    (StepDecay(initial="fast"), "x.initial"),
    (StepDecay(initial=0.1, gamma=Choice(("a", "b"))), "x.gamma"),
    (StepDecay(initial=0.1, warmup=-1), "x.warmup"),
    (StepDecay(initial=0.1, warmup=IntRange(-2, 3)), "x.warmup"),
    (StepDecay(initial=0.1, warmup=2.5), "x.warmup"),
    (Piecewise(values=(0.1, 0.01), milestones=(5, 10)), "x"),
    (Piecewise(values=(0.1, 0.01), milestones=(50,)), "x.milestones"),
    (None, "x"),
])
def test_validate_names_the_hyper_parameter(hp, leaf) -> None:
    with pytest.raises(errors.ProgrammingError) as e:
        Space((("x", hp),)).validate(30)
    assert e.value.code == "invalid_search_space"
    assert f"'{leaf}'" in str(e.value)


def test_validate_rejects_duplicate_names_and_accepts_good_spaces() -> None:
    with pytest.raises(errors.ProgrammingError) as e:
        Space((("lr", 0.1), ("lr", 0.2))).validate(10)
    assert e.value.code == "invalid_search_space" and "'lr'" in str(e.value)
    with pytest.raises(errors.ProgrammingError):
        Space((("lr", StepDecay(initial=0.1)), ("lr.initial", 0.2))).validate(10)
    SCHEDULES.validate(40)
    Space((("lr", StepDecay(initial=Uniform(0.01, 0.1), milestones=IntRange(5, 30), gamma=LogUniform(0.01, 0.5),
                            warmup=Choice((0, 2)))),)).validate(31)


def test_grid_is_the_cartesian_product_last_leaf_fastest() -> None:
    grid = SCHEDULES.grid()
    assert len(grid) == 18
    assert grid[0] == {"lr.initial": 0.1, "lr.milestones": (10, 20), "lr.gamma": 0.1, "lr.warmup": 0,
                       "batch_size": 64}
    assert [g["lr.gamma"] for g in grid[:4]] == [0.1, 0.2, 0.1, 0.2]
    assert [g["lr.milestones"] for g in grid[:4]] == [(10, 20), (10, 20), (15, 25), (15, 25)]
    assert grid[-1]["lr.initial"] == 0.02
    assert len({tuple(sorted(g.items())) for g in grid}) == 18


def test_grid_needs_choices() -> None:
    space = Space((("bs", Choice((1, 2))), ("lr", StepDecay(initial=0.1, gamma=Uniform(0.1, 0.5)))))
    with pytest.raises(errors.ProgrammingError) as e:
        space.grid()
    assert e.value.code == "grid_needs_choices" and "'lr.gamma'" in str(e.value) and "UNIFORM" in str(e.value)


def test_change_points() -> None:
    assert SCHEDULES.change_points(40) == {10, 15, 20, 25, 30}
    assert SCHEDULES.change_points(21) == {10, 15, 20}
    space = Space((("lr", StepDecay(initial=0.1, milestones=IntRange(6, 8), warmup=Choice((0, 3)))),
                   ("wd", Piecewise(values=(1e-4, 0.0), milestones=(12,)))))
    assert space.change_points(20) == {1, 2, 3, 6, 7, 8, 12}
    assert Space((("bs", Choice((1, 2))),)).change_points(10) == frozenset()


def test_json_round_trip() -> None:
    space = Space((
        ("lr", StepDecay(initial=Choice((0.1, 0.05)), milestones=Choice(((10, 20), (15,))), gamma=LogUniform(0.01, 0.5),
                         warmup=IntRange(0, 3))),
        ("wd", Piecewise(values=(1e-4, Uniform(0.0, 1e-3)), milestones=(7,), warmup=0)),
        ("hidden", Choice(((64, 64), (128,)))), ("opt", "sgd"), ("nesterov", True), ("eps", 1e-8), ("epochs", 3),
        ("betas", (0.9, 0.999)),
    ))
    back = Space.from_json(space.to_json())
    assert back == space
    assert type(dict(back.params)["epochs"]) is int and type(dict(back.params)["nesterov"]) is bool
    with pytest.raises(errors.DataError) as e:
        Space.from_json('{"params": [["x", {"what": 1}]]}')
    assert e.value.code == "corrupt_search_space"


def test_describe_is_sql_like() -> None:
    space = Space((("lr", StepDecay(initial=Choice((0.1, 0.05)), milestones=(10, 20), gamma=0.1)),
                   ("opt", Choice(("sgd", "adam"))), ("wd", LogUniform(1e-05, 0.01)), ("layers", IntRange(1, 4)),
                   ("s", Piecewise(values=(1.0, 0.5), milestones=(5,), warmup=2))))
    assert space.describe().splitlines() == [
        "lr = STEP_DECAY(initial => CHOICE(0.1, 0.05), milestones => (10, 20), gamma => 0.1)",
        "opt = CHOICE('sgd', 'adam')",
        "wd = LOGUNIFORM(1e-05, 0.01)",
        "layers = INTEGER(1, 4)",
        "s = PIECEWISE(values => (1.0, 0.5), milestones => (5), warmup => 2)",
    ]


def test_optuna_distributions_and_config_round_trip() -> None:
    space = Space((("lr", StepDecay(initial=LogUniform(1e-3, 1.0), milestones=Choice(((10, 20), (15,))),
                                    gamma=Choice((0.1, 0.2)))), ("layers", IntRange(1, 4)), ("opt", "sgd")))
    dists = space.optuna_distributions()
    assert list(dists) == ["lr.initial", "lr.milestones", "lr.gamma", "layers"]
    assert isinstance(dists["lr.initial"], optuna.distributions.FloatDistribution) and dists["lr.initial"].log
    assert dists["lr.milestones"].choices == (0, 1)  # tuples go by index
    assert dists["lr.gamma"].choices == (0.1, 0.2)
    assert isinstance(dists["layers"], optuna.distributions.IntDistribution)
    params = {"lr.initial": 0.01, "lr.milestones": 1, "lr.gamma": 0.2, "layers": 3}
    config = space.config_from_params(params)
    assert config == {"lr.initial": 0.01, "lr.milestones": (15,), "lr.gamma": 0.2, "lr.warmup": 0, "layers": 3,
                      "opt": "sgd"}
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for _ in range(5):
        trial = study.ask(dists)
        config = space.config_from_params(trial.params)
        assert config["lr.milestones"] in ((10, 20), (15,))
        assert len(space.sequence(config, 25)) == 25
