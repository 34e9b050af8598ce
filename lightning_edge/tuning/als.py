"""ALS: active-learning based sampling (Fulcrum section 5.3, Algorithm 2, Fig. 15a).

ALS profiles once per workload and answers every problem of that workload by lookup in the
*observed* Pareto front: the neural network only decides what to profile next, its predictions are
never used as answers (section 5.3.1), so ALS never returns a mode it did not profile.

Training (Algorithm 2, section 5.3.2): profile 10 random modes (L3-6); then for 8 rounds: train the
NN (time and power, section 5.2) on everything profiled (L11), predict time and power of every mode
not yet profiled (L12-14), keep the predicted time-power Pareto front (L15), and profile the 5 front
modes whose predicted power is farthest from the observed power of any profiled mode (L16-22, GSy
power diversity). 10 + 8 x 5 = 50 profiles.

Inference (section 5.3.3): the latency range and the arrival-rate range of the problems to answer
are each split in two (low, high) giving 4 quadrants. Start from 25 points (5 random modes for each
of the 5 batch sizes), then visit the quadrants round-robin: prune the predictions that cannot meet
the quadrant conservatively (latency above the quadrant's peak latency even at its highest arrival
rate; inference too slow for its lowest arrival rate), build the predicted Pareto front of latency
(at the quadrant's middle rate) versus power, and profile 5 points chosen for power diversity,
fine-tuning the NN each time. 6 rounds x 4 quadrants x 5 + 25 = 145 points.

Concurrent (section 5.3.4): the same quadrants; after pruning (also: at least one training minibatch
fits a cycle at the lowest rate), the Pareto front is predicted training throughput versus predicted
power (the larger of training and inference), and 10 points per quadrant are picked; 3 rounds, so
25 + 3 x 4 x 10 = 145 points.

As published, fewer points are profiled when a predicted front has fewer new points than the per-round
count. ``fill=True`` (the default, see :class:`ALS`) spends those profiles on the next non-dominated layers
of the predictions and then on the pruned points nearest the quadrant's constraints.
"""

from __future__ import annotations

import copy
from collections.abc import Generator, Sequence

import numpy as np

from lightning_edge.modes import PowerModeSpace
from lightning_edge.tuning.nn import MLP
from lightning_edge.tuning.pareto import pareto_front
from lightning_edge.tuning.search import ExploreSpec, ExploringStrategy, Grid, Point, SearchContext

PAPER_SETTINGS = {
    "train": {"init": 10, "per_round": 5, "rounds": 8},
    "infer": {"init": 25, "per_round": 5, "rounds": 6},
    "concurrent": {"init": 25, "per_round": 10, "rounds": 3},
}
"""Fulcrum's ALS hyper-parameters: ALS50 (training), ALS145 (inference and concurrent)."""

DEFAULT_RANGES = {
    "infer": ((0.05, 1.0), (30.0, 90.0)),
    "concurrent": ((0.5, 2.0), (30.0, 120.0)),
}
"""Latency (s) and arrival-rate (requests/s) ranges of the paper's grids (sections 7.2, 7.3)."""


def quadrants(latency_range_s: tuple[float, float], arrival_range_rps: tuple[float, float]) -> list[tuple]:
    """The 4 quadrants of Fig. 15a: ((lat_lo, lat_hi), (rate_lo, rate_hi)), low latency first."""
    l0, l1 = sorted(map(float, latency_range_s))
    a0, a1 = sorted(map(float, arrival_range_rps))
    lm, am = (l0 + l1) / 2, (a0 + a1) / 2
    return [((l0, lm), (a0, am)), ((l0, lm), (am, a1)), ((lm, l1), (a0, am)), ((lm, l1), (am, a1))]


def pick_diverse(candidates: np.ndarray, pred_power: np.ndarray, observed_power: np.ndarray, k: int,
                 greedy: bool = False) -> np.ndarray:
    """PickMaxK of Algorithm 2 (L16-22): the ``k`` candidates whose predicted power is farthest from
    every observed power. ``greedy=True`` adds each pick to the observed set before the next (GSy)."""
    cand = np.asarray(candidates)
    pp = np.asarray(pred_power, dtype=float)
    obs = np.asarray(observed_power, dtype=float)
    if cand.size == 0 or k <= 0:
        return cand[:0]
    dist = np.abs(pp[:, None] - obs[None, :]).min(axis=1) if obs.size else np.full(pp.size, np.inf)
    if not greedy:
        order = np.lexsort((np.arange(cand.size), -dist))
        return cand[order[:k]]
    chosen: list[int] = []
    dist = dist.copy()
    for _ in range(min(k, cand.size)):
        dist_c = dist.copy()
        dist_c[chosen] = -np.inf
        j = int(np.argmax(dist_c))
        chosen.append(j)
        dist = np.minimum(dist, np.abs(pp - pp[j]))
    return cand[np.asarray(chosen, dtype=np.int64)]


def fill_layers(cand: np.ndarray, taken: np.ndarray, cost: np.ndarray, power: np.ndarray, ref_power: np.ndarray,
                k: int, greedy: bool) -> np.ndarray:
    """Up to ``k`` more picks among ``cand`` (positions) once the predicted front ``taken`` is used up: the next
    non-dominated layer of (cost, power) first, by the same power diversity against ``ref_power`` and the
    powers of the layers already offered, then the layer after, and so on."""
    out: list[np.ndarray] = []
    rest = np.setdiff1d(cand, taken)
    ref = np.concatenate([np.asarray(ref_power, dtype=float), power[taken]])
    n = 0
    while n < k and rest.size:
        layer = rest[pareto_front(cost[rest], power[rest])]
        more = pick_diverse(layer, power[layer], ref, k - n, greedy)
        out.append(more)
        n += more.size
        ref = np.concatenate([ref, power[layer]])
        rest = np.setdiff1d(rest, layer)
    return np.concatenate(out) if out else np.asarray(cand)[:0]


def quadrant_miss(kind: str, values: np.ndarray, bs: np.ndarray, quad: tuple) -> np.ndarray:
    """How far each point is from passing the quadrant's conservative pruning (see :func:`quadrant_view`):
    the largest of latency at the highest rate over the peak latency, inference time over the cycle at
    the lowest rate and (concurrent) inference plus one training minibatch over that cycle. <= 1 passes."""
    (_, l1), (a0, a1) = quad
    v = np.asarray(values, dtype=float)
    t_in = np.maximum(v[:, 0 if kind == "infer" else 2], 1e-9)
    cycle = bs / a0
    miss = np.maximum(((bs - 1) / a1 + t_in) / l1, t_in / cycle)
    if kind != "infer":
        miss = np.maximum(miss, (t_in + np.maximum(v[:, 0], 1e-9)) / cycle)
    return miss


def quadrant_view(kind: str, values: np.ndarray, bs: np.ndarray, quad: tuple) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One quadrant's view of (predicted or observed) points: (kept, cost to minimise, power).

    ``values`` columns: inference ``[t_in, p_in]``; concurrent ``[t_tr, p_tr, t_in, p_in]``. Pruning is
    conservative (section 5.3.3): a point is dropped only if its latency exceeds the quadrant's peak
    latency even at the quadrant's highest rate, or it cannot keep up with the quadrant's lowest rate
    (concurrent: or not one training minibatch fits a cycle at that rate). The cost is the latency at the
    quadrant's middle rate (inference) or minus the training throughput there (concurrent), computed
    without the floor of whole minibatches so that the front also ranks modes within one throughput step.
    """
    (l0, l1), (a0, a1) = quad
    am = (a0 + a1) / 2
    v = np.asarray(values, dtype=float)
    keep = quadrant_miss(kind, v, bs, quad) <= 1.0
    if kind == "infer":
        t_in, p_in = np.maximum(v[:, 0], 1e-9), v[:, 1]
        return keep, (bs - 1) / am + t_in, p_in
    t_tr, p_tr = np.maximum(v[:, 0], 1e-9), v[:, 1]
    t_in, p_in = np.maximum(v[:, 2], 1e-9), v[:, 3]
    theta = np.maximum(bs / am - t_in, 0.0) / t_tr * am / bs
    return keep, -theta, np.maximum(p_tr, p_in)


class ALS(ExploringStrategy):
    """Fulcrum's ALS. ``ALS().explore(space, workload, kind=...)`` -> :class:`ProfileTable`;
    ``ALS().solve(problem, space, workload)`` explores for that one problem and looks it up.

    ``init_profiles`` / ``per_round`` / ``rounds`` default to the paper's (see :data:`PAPER_SETTINGS`);
    ``epochs`` trains the first NN, ``finetune_epochs`` each later round (warm start).

    Defaults differ from the letter of the paper where that made ALS markedly better on the twin
    (docs/tuning.md, "ALS: what we changed"); :meth:`as_published` restores the letter:

    - ``greedy=True``: picks one point at a time, each farthest from the observed powers *and the
      points already picked* (GSy's greedy sampling, "we then greedily sample", 5.3.2), instead of the
      top-K of a fixed distance (PickMaxK of Algorithm 2), which can pick K neighbours in one gap;
    - ``diversity="front"``: distances to the powers of the *observed Pareto front* (of the quadrant),
      not of every profile: a dominated profile does not "cover" its power level;
    - ``features="reciprocal"``: the NN also sees 1/x of every input, so that a time ~ 1/frequency
      and a power ~ frequency are near-linear and extrapolate from 10 points;
    - ``lr=3e-3`` instead of 1e-3 (the NN fits in the few epochs of fine-tuning);
    - ``anchor_maxn=True`` (training): MAXN is one of the initial random profiles. A random sample of 10
      of 441 modes rarely holds a mode near the top corner, so the network extrapolated there and the
      high budgets' answers were 15-30 % slow; MAXN is the board's default, which the user runs today.
    - ``anchor_minn=True`` (training): so is the least-power mode (every knob at its lowest). It is within every
      budget that any mode is within, so ALS answers every training problem the oracle answers; without it
      the random start left the lowest budgets of some seeds unanswered (5-14 % of ResNet-18's budgets).
    - ``fill=True``: when a round's predicted front has fewer new points than the per-round count, the rest
      of the round's picks come from the next non-dominated layers of the predictions and then (inference,
      concurrent) from the pruned points that miss the quadrant's constraints by the least. The network
      over-predicts by design (under-predictions cost 4x), so those are the points most likely to be feasible.
      As published, the profiles were left unspent: ALS145 used 99-138 of its 145 on some concurrent pairs.

    ``prior``: a :class:`~lightning_edge.tuning.prior.Prior` (default ``None``). Training only: the initial
    profiles are modes of the *predicted* time-power front, spread in predicted power (the same greedy power
    diversity), instead of random modes; the rounds then go on as above. ``with_prior(prior)`` is a copy.
    """

    @classmethod
    def as_published(cls, **kw) -> ALS:
        """ALS with the paper's letter: PickMaxK, diversity against every profile, raw inputs, lr 0.001, a purely
        random start, and a round's picks capped by its predicted front."""
        return cls(**{"greedy": False, "diversity": "all", "features": "raw", "lr": 1e-3,
                      "anchor_maxn": False, "anchor_minn": False, "fill": False, **kw})

    name = "ALS"
    strategy_name = "als"

    def __init__(self, *, init_profiles: int | None = None, per_round: int | None = None, rounds: int | None = None,
                 epochs: int = 1000, finetune_epochs: int = 200, hidden: Sequence[int] = (256, 128, 64),
                 lr: float = 3e-3, under_penalty: float = 4.0, batch_size: int = 32, greedy: bool = True,
                 features: str = "reciprocal", diversity: str = "front", anchor_maxn: bool = True,
                 anchor_minn: bool = True, fill: bool = True, prior=None) -> None:
        if features not in ("raw", "reciprocal"):
            raise ValueError(f"features must be 'raw' or 'reciprocal', got {features!r}")
        if diversity not in ("all", "front"):
            raise ValueError(f"diversity must be 'all' or 'front', got {diversity!r}")
        self.diversity = diversity
        self.features = features
        self.init_profiles, self.per_round, self.rounds = init_profiles, per_round, rounds
        self.epochs, self.finetune_epochs = int(epochs), int(finetune_epochs)
        self.hidden, self.lr, self.under_penalty = tuple(hidden), float(lr), float(under_penalty)
        self.batch_size = int(batch_size)
        self.greedy = bool(greedy)
        self.anchor_maxn = bool(anchor_maxn)
        self.anchor_minn = bool(anchor_minn)
        self.fill = bool(fill)
        self.prior = prior
        self.last_info: dict = {}

    def with_prior(self, prior, then_search: bool | None = None) -> ALS:
        """A copy of this ALS whose initial training profiles come from ``prior``'s predicted front (ALS profiles
        its whole budget anyway: ``then_search`` changes nothing)."""
        out = copy.copy(self)
        out.prior = prior
        out.last_info = {}
        return out

    def __repr__(self) -> str:
        return f"ALS(init={self.init_profiles}, per_round={self.per_round}, rounds={self.rounds})"

    def settings(self, kind: str) -> dict[str, int]:
        s = dict(PAPER_SETTINGS[kind])
        for key, val in (("init", self.init_profiles), ("per_round", self.per_round), ("rounds", self.rounds)):
            if val is not None:
                s[key] = int(val)
        return s

    def budget_for(self, spec: ExploreSpec, space: PowerModeSpace) -> int:
        s, n_bs = self.settings(spec.kind), len(spec.batch_sizes)
        if spec.kind == "train":
            total, init, rounds = space.size, s["init"], s["rounds"]
        else:  # every mode at every batch size; the rounds visit the 4 quadrants
            total, init, rounds = space.size * n_bs, max(1, s["init"] // n_bs) * n_bs, s["rounds"] * 4
        return min(total, init + rounds * s["per_round"])

    def _feats(self, X: np.ndarray) -> np.ndarray:
        """NN inputs: the knobs (and batch size), plus their reciprocals with ``features="reciprocal"``."""
        X = np.asarray(X, dtype=float)
        if self.features == "raw":
            return X
        return np.concatenate([X, 1.0 / np.maximum(X, 1e-9)], axis=1)

    def _net(self, n_in: int, n_models: int, seed: int | None) -> MLP:
        return MLP(n_in, n_models, self.hidden, seed=seed, lr=self.lr, under_penalty=self.under_penalty,
                   batch_size=self.batch_size)

    # ------------------------------------------------------------------------------ search
    def explore_search(self, ctx: SearchContext, spec: ExploreSpec, space: PowerModeSpace) -> Generator:
        grid = Grid.of(space)
        rng = np.random.default_rng(spec.seed)
        s = self.settings(spec.kind)
        self.last_info = info = {"rounds": [], "kind": spec.kind}
        ctx.info = info  # type: ignore[attr-defined]
        X_modes = space.to_numpy()
        N = len(X_modes)
        if spec.kind == "train":
            yield from self._train(ctx, grid, X_modes, rng, s, spec, info)
        else:
            yield from self._quadrant_search(ctx, grid, X_modes, N, rng, s, spec, info)

    def _train(self, ctx, grid, X, rng, s, spec, info) -> Generator:
        N = len(X)
        init = rng.choice(N, size=min(s["init"], N), replace=False)
        prior = self.prior
        if prior is not None and len(prior) == N:  # the predicted front, spread in predicted power
            front = prior.front()
            picks = pick_diverse(front, prior.power_w[front], np.empty(0), min(s["init"], front.size), greedy=True)
            rest = [int(i) for i in init if int(i) not in set(picks.tolist())]
            init = np.asarray([int(i) for i in picks] + rest[: max(0, init.size - picks.size)], dtype=np.int64)
            info["prior"] = {"front": int(front.size), "picked": [int(i) for i in picks]}
        top = grid.flat(grid.top())
        anchors = ([top] if self.anchor_maxn else []) + ([grid.flat(grid.bottom())] if self.anchor_minn else [])
        free = [j for j in range(init.size) if int(init[j]) not in anchors]
        for a in anchors:  # replace random picks from the end; the first ones stay as drawn
            if a not in init and free:
                init[free.pop()] = a
        yield from ctx.profile_many(spec.points(grid, init))  # L3-10
        prof = [int(i) for i in init]
        F = self._feats(X)
        net = self._net(F.shape[1], 2, int(rng.integers(2**31)))
        net.set_input_scaler(F)
        for r in range(s["rounds"]):
            if ctx.left < 1:
                break
            obs = np.array(ctx.rows(spec.points(grid, prof)))
            net.fit(F[prof], obs, epochs=self.epochs if r == 0 else self.finetune_epochs)  # L11
            test = np.setdiff1d(np.arange(N), np.asarray(prof))  # L24
            if test.size == 0:
                break
            pred = net.predict(F[test])  # L12-14
            front = pareto_front(pred[:, 0], pred[:, 1])  # L15
            k = int(min(s["per_round"], ctx.left))
            ref = obs[:, 1] if self.diversity == "all" else obs[pareto_front(obs[:, 0], obs[:, 1]), 1]
            picks = pick_diverse(test[front], pred[front, 1], ref, k, self.greedy)  # L16-22
            if self.fill and picks.size < k:
                more = fill_layers(np.arange(test.size), front, pred[:, 0], pred[:, 1], ref, k - picks.size, self.greedy)
                picks = np.concatenate([picks, test[more]])
            info["rounds"].append({"round": r + 1, "front": int(front.size), "picked": [int(i) for i in picks]})
            if picks.size == 0:
                break
            yield from ctx.profile_many(spec.points(grid, picks))
            prof.extend(int(i) for i in picks)  # L23

    def _quadrant_search(self, ctx, grid, X_modes, N, rng, s, spec, info) -> Generator:
        kind = spec.kind
        bss = np.asarray(spec.batch_sizes, dtype=float)
        B = bss.size
        lat_rng, rate_rng = DEFAULT_RANGES[kind]
        quads = quadrants(spec.latency_range_s or lat_rng, spec.arrival_range_rps or rate_rng)
        # every (mode, bs) point: row f * B + j ; features [knobs..., bs]
        feats = self._feats(np.concatenate([np.repeat(X_modes, B, axis=0), np.tile(bss, N)[:, None]], axis=1))
        bs_of = np.tile(bss, N)
        per_bs = max(1, s["init"] // B)
        init_rows = []
        for j in range(B):
            modes = rng.choice(N, size=min(per_bs, N), replace=False)
            init_rows.extend(int(f) * B + j for f in modes)
        point_of = lambda row: Point(kind, grid.mode(grid.unflat(row // B)), int(bss[row % B]))  # noqa: E731
        yield from ctx.profile_many([point_of(r) for r in init_rows])
        prof = list(dict.fromkeys(init_rows))
        n_targets = 2 if kind == "infer" else 4
        net = self._net(feats.shape[1], n_targets, int(rng.integers(2**31)))
        net.set_input_scaler(feats)
        first = True
        for r in range(s["rounds"]):
            for q, quad in enumerate(quads):
                if ctx.left < 1:
                    return
                obs = np.asarray(ctx.rows(point_of(p) for p in prof), dtype=float)
                net.fit(feats[prof], obs, epochs=self.epochs if first else self.finetune_epochs)
                first = False
                test = np.setdiff1d(np.arange(N * B), np.asarray(prof))
                if test.size == 0:
                    return
                pred = net.predict(feats[test])
                keep, cost_a, power = quadrant_view(kind, pred, bs_of[test], quad)
                if self.diversity == "all":
                    obs_power = obs[:, 1] if kind == "infer" else np.maximum(obs[:, 1], obs[:, 3])
                else:  # distances to the observed front of this quadrant (falls back to every profile)
                    ok, oc, op = quadrant_view(kind, obs, bs_of[np.asarray(prof)], quad)
                    sel = np.nonzero(ok)[0]
                    obs_power = op[sel[pareto_front(oc[sel], op[sel])]] if sel.size else op
                cand = np.nonzero(keep)[0]
                front = cand[pareto_front(cost_a[cand], power[cand])] if cand.size else cand
                k = int(min(s["per_round"], ctx.left))
                picks = pick_diverse(test[front], power[front], obs_power, k, self.greedy)
                if self.fill and picks.size < k:
                    picks = np.concatenate([picks, test[self._fill(kind, pred, bs_of[test], quad, cand, front, cost_a,
                                                                   power, obs_power, k - picks.size)]])
                info["rounds"].append({"round": r + 1, "quadrant": q, "kept": int(cand.size),
                                       "front": int(front.size), "picked": [int(i) for i in picks]})
                if picks.size:
                    yield from ctx.profile_many([point_of(int(p)) for p in picks])
                    prof.extend(int(p) for p in picks)

    def _fill(self, kind, pred, bs, quad, cand, front, cost, power, ref_power, k) -> np.ndarray:
        """Positions of up to ``k`` more picks in a quadrant round whose predicted front ran out (``fill=True``):
        the next non-dominated layers of the kept points ``cand``, then the pruned points nearest passing."""
        picks = fill_layers(cand, front, cost, power, ref_power, k, self.greedy)
        if picks.size < k:
            miss = quadrant_miss(kind, pred, bs, quad)
            miss[cand] = np.inf
            order = np.argsort(miss, kind="stable")
            picks = np.concatenate([picks, order[np.isfinite(miss[order])][: k - picks.size]])
        return picks

