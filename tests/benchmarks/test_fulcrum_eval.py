"""The scoring of benchmarks/fulcrum_eval.py on hand-made ground truths: excess over the oracle as profiled, and the
same answers valued at noise-free times (where a noise tie costs nothing)."""

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import fulcrum_eval as fe  # noqa: E402

# Four training modes. Modes 1 and 2 are equally fast noise-free (1.0 s); the profile noise made mode 2 1 % faster.
TRAIN_T0 = np.array([2.0, 1.0, 1.0, 0.8])
TRAIN_T = np.array([2.0, 1.0, 0.99, 0.8])
TRAIN_P = np.array([10.0, 20.0, 21.0, 40.0])


def _train_truth() -> fe.Truth:
    return fe.Truth("toy", TRAIN_T, TRAIN_P, None, None, (), train_t0=TRAIN_T0)


def test_a_noise_tie_costs_as_profiled_but_not_in_noise_free_values():
    truth = _train_truth()
    budgets = np.array([15.0, 25.0, 50.0])
    sc = fe.Score()
    # answers: mode 0 at 15 W (the oracle's), mode 1 at 25 W (tied with the oracle's mode 2), mode 1 at 50 W (the
    # oracle's is mode 3, 25 % faster)
    fe.score_train(truth, budgets, np.array([0, 1, 1]), 7, sc)
    assert sc.n_problems == 3 and sc.solved == 3 and sc.violations == 0
    assert sc.excess == pytest.approx([0.0, 100 * (1.0 / 0.99 - 1), 25.0])
    assert sc.excess0 == pytest.approx([0.0, 0.0, 25.0])
    row = sc.row()
    assert row["median"] == pytest.approx(100 * (1.0 / 0.99 - 1))
    assert row["median0"] == pytest.approx(0.0)


def test_an_answer_over_budget_is_a_violation_and_unanswerable_budgets_do_not_count():
    truth = _train_truth()
    sc = fe.Score()
    fe.score_train(truth, np.array([5.0, 20.0]), np.array([-1, 2]), 3, sc)
    assert sc.n_problems == 1  # nothing is within 5 W
    assert sc.violations == 1 and sc.solved == 0


def test_inference_excess_latency_as_profiled_and_noise_free():
    # 2 modes x batch sizes (1, 4); at 10 requests/s bs 4 adds 0.3 s of waiting, so bs 1 is the answer.
    t0 = np.array([[0.10, 0.20], [0.10, 0.25]])
    t = np.array([[0.10, 0.20], [0.095, 0.25]])  # noise made mode 1 5 % faster at bs 1
    p = np.array([[10.0, 12.0], [11.0, 13.0]])
    truth = fe.Truth("toy", None, None, t, p, (1, 4), infer_t0=t0)
    sc = fe.Score()
    grid = (np.array([20.0]), np.array([0.5]), np.array([10.0]))
    rows, bsi = np.array([0]), np.array([0])  # a table that profiled only mode 0 at bs 1
    fe.score_infer(truth, grid, rows, bsi, t[rows, bsi], p[rows, bsi], sc, 1)
    assert sc.solved == 1 and sc.violations == 0
    assert sc.excess == pytest.approx([100 * (0.10 / 0.095 - 1)])
    assert sc.excess0 == pytest.approx([0.0])


def test_pooled_scores_keep_both_measures():
    a, b = fe.Score(), fe.Score()
    fe.score_train(_train_truth(), np.array([25.0]), np.array([1]), 1, a)
    fe.score_train(_train_truth(), np.array([50.0]), np.array([3]), 1, b)
    a.add(b)
    assert len(a.excess) == len(a.excess0) == 2
    assert a.row()["median0"] == pytest.approx(0.0)
