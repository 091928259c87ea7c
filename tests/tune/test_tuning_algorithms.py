"""TUNE's algorithms (modelsql/tuning/algorithms.py, asha.py, hyperband.py, pbt.py) driven in rounds
against a synthetic metric of the trained prefix: no training. They finish, make the same requests
for the same seed and metrics whatever order a round is answered in, follow Li et al.'s Hyperband
arithmetic, prune at ASHA's rungs, branch PBT exploits from the donor's prefix, and reject unknown
options by name."""

from __future__ import annotations

import math
import random
from collections import Counter

import pytest

from modelsql import errors
from modelsql.tuning.algorithms import Request, make_algorithm
from modelsql.tuning.hyperband import plan_brackets
from modelsql.tuning.space import Choice, LogUniform, Space, StepDecay, Uniform

SCHEDULES = Space((
    ("lr", StepDecay(initial=Choice((0.1, 0.05, 0.02)), milestones=Choice(((6, 12), (9, 18), (12, 24))),
                     gamma=Choice((0.1, 0.2)))),
    ("batch_size", 64),
))
"""18 step schedules like the measurements' (lr0 3 x milestones 3 x gamma 2), decays before epoch 27."""

CONTINUOUS = Space((
    ("lr", StepDecay(initial=LogUniform(0.01, 0.2), milestones=(8,), gamma=Uniform(0.05, 0.5))),
    ("momentum", Choice((0.0, 0.5, 0.9))),
))

SAMPLED = ["random", "tpe", "asha", "hyperband", "pbt"]
ALL = ["grid"] + SAMPLED


def loss_curve(sequence) -> list[float]:
    """A deterministic metric after each epoch of a prefix: progress grows with lr, a large lr late
    costs, momentum helps a little (like q3_sim in the measurements)."""
    out, progress = [], 0.0
    for hp in sequence:
        d = dict(hp)
        lr = float(d["lr"])
        progress += lr * (1.0 + float(d.get("momentum", 0.0)))
        out.append(math.exp(-8.0 * progress) + 2.0 * lr)
    return out


def drive(alg, metric=loss_curve, shuffle=None) -> list[list[Request]]:
    """Run ``alg`` to the end: ask, answer every request (in a shuffled order when ``shuffle`` is a
    seed), tell in trial order. Returns the rounds."""
    rounds = []
    while True:
        requests = alg.ask()
        if not requests:
            return rounds
        assert [r.trial for r in requests] == sorted(r.trial for r in requests)
        rounds.append(requests)
        order = list(requests)
        if shuffle is not None:
            random.Random(shuffle).shuffle(order)
        answers = {r.trial: metric(r.sequence) for r in order}
        for r in requests:
            alg.tell(r.trial, answers[r.trial])


def make(name, space=SCHEDULES, seed=0, max_epochs=27, **options):
    defaults = {"asha": {"trials": 30, "max_concurrent_trials": 6}, "random": {"trials": 12},
                "tpe": {"trials": 12}, "pbt": {"trials": 8, "perturbation_interval": 4}}
    opts = {**defaults.get(name, {}), **options}
    return make_algorithm(name, space, max_epochs=max_epochs, seed=seed, study_name="study", options=opts)


@pytest.mark.parametrize("name", ALL)
def test_driver_loop_finishes_with_every_trial_decided(name) -> None:
    alg = make(name)
    rounds = drive(alg)
    assert alg.finished and alg.ask() == []
    assert rounds
    statuses = Counter(alg.status(t) for t in alg.trials())
    assert statuses["running"] == 0 and statuses["failed"] == 0
    assert all(1 <= len(r.sequence) <= 27 for rnd in rounds for r in rnd)
    if name != "pbt":  # a trial's request is its configuration's schedule from epoch 0
        assert all(r.sequence == SCHEDULES.sequence(r.config, len(r.sequence)) for rnd in rounds for r in rnd)


@pytest.mark.parametrize("name", ALL)
def test_same_seed_same_requests_whatever_order_a_round_is_answered_in(name) -> None:
    first = drive(make(name, CONTINUOUS if name != "grid" else SCHEDULES, seed=7))
    again = drive(make(name, CONTINUOUS if name != "grid" else SCHEDULES, seed=7))
    shuffled = drive(make(name, CONTINUOUS if name != "grid" else SCHEDULES, seed=7), shuffle=3)
    assert first == again == shuffled


@pytest.mark.parametrize("name", SAMPLED)
def test_different_seeds_differ(name) -> None:
    assert drive(make(name, CONTINUOUS, seed=1)) != drive(make(name, CONTINUOUS, seed=2))


def test_grid_is_one_round_of_every_configuration() -> None:
    rounds = drive(make("grid", max_epochs=40))
    assert len(rounds) == 1 and len(rounds[0]) == 18
    assert [r.config for r in rounds[0]] == SCHEDULES.grid()
    assert {len(r.sequence) for r in rounds[0]} == {40}


def test_random_and_tpe_rounds_are_max_concurrent_trials() -> None:
    for name in ("random", "tpe"):
        rounds = drive(make(name, trials=10, max_concurrent_trials=4))
        assert [len(rnd) for rnd in rounds] == [4, 4, 2]
        assert {len(r.sequence) for rnd in rounds for r in rnd} == {27}


def test_hyperband_brackets_follow_li_et_al() -> None:
    plan = plan_brackets(27, 3)
    assert [b.sizes for b in plan] == [(27, 9, 3, 1), (12, 4, 1), (6, 2), (4,)]
    assert [b.budgets for b in plan] == [(1, 3, 9, 27), (3, 9, 27), (9, 27), (27,)]
    # Li et al. 2018, Table 1 (R = 81, eta = 3)
    assert [b.sizes for b in plan_brackets(81, 3)] == [(81, 27, 9, 3, 1), (34, 11, 3, 1), (15, 5, 1), (8, 2), (5,)]


def test_hyperband_rounds_advance_every_bracket_one_rung() -> None:
    alg = make("hyperband")
    rounds = drive(alg)
    assert [len(rnd) for rnd in rounds] == [27 + 12 + 6 + 4, 9 + 4 + 2, 3 + 1, 1]
    assert Counter(len(r.sequence) for r in rounds[0]) == {1: 27, 3: 12, 9: 6, 27: 4}
    assert Counter(len(r.sequence) for r in rounds[1]) == {3: 9, 9: 4, 27: 2}
    # trial numbers go bracket by bracket
    assert [r.trial for r in rounds[0] if len(r.sequence) == 1] == list(range(27))
    # synchronous: the survivors of bracket 0's first rung are exactly its best nine (ties by trial)
    scores = sorted((loss_curve(r.sequence)[-1], r.trial) for r in rounds[0][:27])
    assert [r.trial for r in rounds[1][:9]] == sorted(t for _, t in scores[:9])
    statuses = Counter(alg.status(t) for t in alg.trials())
    assert statuses == {"pruned": 49 - 8, "completed": 1 + 1 + 2 + 4}


def test_hyperband_mode_max_keeps_the_highest_and_brackets_option_limits() -> None:
    alg = make_algorithm("hyperband", SCHEDULES, max_epochs=27, mode="max", seed=0, study_name="s",
                         options={"brackets": 1})
    rounds = drive(alg)
    assert [len(rnd) for rnd in rounds] == [27, 9, 3, 1]
    scores = sorted((-loss_curve(r.sequence)[-1], r.trial) for r in rounds[0])
    assert [r.trial for r in rounds[1]] == sorted(t for _, t in scores[:9])


def test_nan_is_the_worst_metric() -> None:
    def nan_when_lr0_is_002(seq):
        return [math.nan if dict(hp)["lr"] == 0.02 else v for hp, v in zip(seq, loss_curve(seq))]

    alg = make("hyperband", brackets=1)
    rounds = drive(alg, nan_when_lr0_is_002)
    low = [r.trial for r in rounds[0] if r.config["lr.initial"] == 0.02]
    assert low and all(alg.status(t) == "pruned" for t in low)
    assert not any(r.trial in low for r in rounds[1])


def test_asha_prunes_at_rungs_1_3_9() -> None:
    alg = make("asha", trials=40, max_concurrent_trials=8)
    rounds = drive(alg)
    last = {}
    for rnd in rounds:
        for r in rnd:
            last[r.trial] = len(r.sequence)
    assert {len(r.sequence) for rnd in rounds for r in rnd} <= {1, 3, 9, 27}
    pruned_at = Counter(last[t] for t in last if alg.status(t) == "pruned")
    assert set(pruned_at) == {1, 3, 9}
    assert all(last[t] == 27 for t in last if alg.status(t) == "completed")
    assert len(last) == 40 and all(len(rnd) <= 8 for rnd in rounds)


def test_asha_grace_period_and_max_t_options() -> None:
    alg = make("asha", CONTINUOUS, grace_period=2, reduction_factor=2, max_t=10, trials=12)
    lengths = {len(r.sequence) for rnd in drive(alg) for r in rnd}
    assert lengths <= {2, 4, 8, 10} and 10 in lengths


def test_pbt_exploits_branch_from_the_donors_prefix() -> None:
    alg = make("pbt", CONTINUOUS, trials=8, perturbation_interval=4, max_epochs=20, seed=3)
    rounds = drive(alg)
    assert [len(rnd) for rnd in rounds] == [8] * 5
    assert all(len(r.sequence) == 4 * (i + 1) for i, rnd in enumerate(rounds) for r in rnd)
    exploits = 0
    for before, rnd in zip(rounds, rounds[1:]):
        previous = {r.trial: r for r in before}
        for r in rnd:
            t = len(before[0].sequence)
            if r.donor is None:
                assert r.branch_epoch is None
                assert r.sequence[:t] == previous[r.trial].sequence
                assert r.config == previous[r.trial].config
            else:
                exploits += 1
                assert r.branch_epoch == t and r.donor != r.trial
                assert r.sequence[:t] == previous[r.donor].sequence
                assert r.sequence[t:] == CONTINUOUS.sequence(r.config, len(r.sequence))[t:]
        assert sum(r.donor is not None for r in rnd) == 2  # ceil(8 * 0.25) bottom members
    assert exploits == 8
    assert {alg.status(t) for t in alg.trials()} == {"stopped"}


def test_failed_trials_are_never_requested_again() -> None:
    for name in ("random", "asha", "hyperband", "pbt", "grid"):
        alg = make(name)
        requests = alg.ask()
        failed = requests[0].trial
        alg.tell_failed(failed, "RuntimeError: boom")
        for r in requests[1:]:
            alg.tell(r.trial, loss_curve(r.sequence))
        later = drive(alg)
        assert alg.status(failed) == "failed"
        assert all(r.trial != failed for rnd in later for r in rnd)


def test_round_protocol_errors() -> None:
    alg = make("random", trials=4)
    requests = alg.ask()
    with pytest.raises(errors.InterfaceError) as e:
        alg.ask()
    assert e.value.code == "round_not_answered"
    with pytest.raises(errors.InterfaceError) as e:
        alg.tell(requests[1].trial, loss_curve(requests[1].sequence))
    assert e.value.code == "tell_out_of_order"
    with pytest.raises(errors.InterfaceError) as e:
        alg.tell(requests[0].trial, [0.5])
    assert e.value.code == "metrics_length"
    with pytest.raises(errors.InterfaceError) as e:
        alg.tell(99, [0.5])
    assert e.value.code == "unexpected_tell"
    with pytest.raises(errors.ProgrammingError) as e:
        alg.status(99)
    assert e.value.code == "trial_not_found"


def test_unknown_and_invalid_options() -> None:
    with pytest.raises(errors.ProgrammingError) as e:
        make("asha", grace=2)
    assert e.value.code == "unknown_option" and "'grace'" in str(e.value) and "grace_period" in str(e.value)
    with pytest.raises(errors.ProgrammingError) as e:
        make("grid", trials=3)
    assert e.value.code == "unknown_option" and "'trials'" in str(e.value)
    with pytest.raises(errors.ProgrammingError) as e:
        make("hyperband", seed_offset=1)
    assert e.value.code == "unknown_option"
    for name, bad in [("asha", {"reduction_factor": 1}), ("asha", {"sampler": "cmaes"}), ("random", {"trials": 0}),
                      ("pbt", {"quantile_fraction": 0.9}), ("hyperband", {"brackets": 9}),
                      ("tpe", {"max_concurrent_trials": "four"}), ("pbt", {"resample_probability": 2})]:
        with pytest.raises(errors.ProgrammingError) as e:
            make(name, **bad)
        assert e.value.code == "invalid_option" and next(iter(bad)) in str(e.value)
    with pytest.raises(errors.ProgrammingError) as e:
        make_algorithm("bohb", SCHEDULES, max_epochs=9, study_name="s", options={})
    assert e.value.code == "unknown_algorithm"
    with pytest.raises(errors.ProgrammingError) as e:
        make_algorithm("grid", SCHEDULES, max_epochs=9, mode="down", study_name="s", options={})
    assert e.value.code == "invalid_option"
    # names are case-insensitive; the space is validated against max_t
    assert make_algorithm("HyperBand", SCHEDULES, max_epochs=40, study_name="s", options={"MAX_T": 27})
    with pytest.raises(errors.ProgrammingError) as e:
        make("asha", max_t=12)
    assert e.value.code == "invalid_search_space" and "lr.milestones" in str(e.value)


@pytest.mark.parametrize("name", ["random", "tpe"])
def test_samplers_repeat_configurations_of_a_small_discrete_space(name) -> None:
    alg = make(name, trials=30, max_concurrent_trials=6)
    configs = [tuple(sorted(r.config.items())) for rnd in drive(alg) for r in rnd]
    assert len(configs) == 30 and len(set(configs)) < 30


def _trie_nodes(rounds) -> int:
    return len({r.sequence[:i] for rnd in rounds for r in rnd for i in range(1, len(r.sequence) + 1)})


def test_asha_over_the_18_schedules_shares_prefixes() -> None:
    rounds = drive(make("asha", trials=60, max_concurrent_trials=8, max_epochs=40))
    trained = {}
    for rnd in rounds:
        for r in rnd:
            trained[r.trial] = len(r.sequence)
    total = sum(trained.values())  # trial-based: each trial trains its own epochs once (pause/resume)
    distinct = _trie_nodes(rounds)  # stage tree: each distinct prefix trained once
    assert distinct < total / 2, (distinct, total)
