"""The small neural network of Fulcrum's NN baseline and ALS (section 5.2), in numpy.

Published architecture: dense layers of 256, 128, 64 and 1 neurons, ReLU then linear, Adam with a
learning rate of 0.001, inputs standardised (StandardScaler), a MAPE loss that penalises
under-predictions 4x (an under-predicted power violates the budget), 1000 epochs, an 80:20
train/validation split keeping the best weights. One network per target (time, power).

Implementation notes:
- ``MLP`` trains several independent networks at once (one per target) with batched matmuls, which
  is what makes ALS fast on a CPU (a few hundred epochs on <= 250 points take a fraction of a second).
- Inputs are standardised with the mean and deviation of the *whole candidate grid* (known in
  advance), so that warm-started fine-tuning across ALS rounds sees the same input scale.
- Targets are divided by their mean over the first training set; MAPE is invariant to that scale,
  and it keeps the output layer near 1 so that Adam's fixed step reaches the targets in few epochs.
- Full-batch training (the data sets are tiny); deterministic for a seed.
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import os
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from numpy.typing import ArrayLike


def _openblas() -> Any:
    """numpy's bundled OpenBLAS (the library already loaded), or ``None``."""
    libdir = os.path.join(os.path.dirname(os.path.dirname(np.__file__)), "numpy.libs")
    for path in glob.glob(os.path.join(libdir, "*openblas*.so*")):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for get, set_ in (("scipy_openblas_get_num_threads64_", "scipy_openblas_set_num_threads64_"),
                          ("openblas_get_num_threads", "openblas_set_num_threads")):
            if hasattr(lib, get) and hasattr(lib, set_):
                return getattr(lib, get), getattr(lib, set_)
    return None


_BLAS = _openblas()


@contextlib.contextmanager
def single_threaded_blas() -> Iterator[None]:
    """Run BLAS on one thread: the matrices here are tiny, and on a busy CPU OpenBLAS's worker threads
    spin and make a training epoch up to 10x slower. Best effort (a no-op without numpy's OpenBLAS)."""
    if _BLAS is None:
        yield
        return
    get, set_ = _BLAS
    try:
        old = int(get())
    except Exception:  # pragma: no cover - exotic builds
        yield
        return
    set_(ctypes.c_int(1)) if set_.argtypes is None else set_(1)
    try:
        yield
    finally:
        set_(ctypes.c_int(old))


class MLP:
    """``n_models`` independent regressors ``R^n_in -> R`` with the same architecture.

    Parameters live in one flat float32 buffer (so one Adam update covers every layer of every model);
    ``fit`` uses minibatches of ``batch_size`` rows like Keras' default (an "epoch" is one pass).
    """

    def __init__(self, n_in: int, n_models: int = 2, hidden: Sequence[int] = (256, 128, 64), *, seed: int | None = 0,
                 lr: float = 1e-3, under_penalty: float = 4.0, batch_size: int = 32) -> None:
        self.n_in, self.n_models = int(n_in), int(n_models)
        self.sizes = [self.n_in, *[int(h) for h in hidden], 1]
        self.lr = float(lr)
        self.under_penalty = float(under_penalty)
        self.batch_size = int(batch_size)
        self.rng = np.random.default_rng(seed)
        shapes = [(self.n_models, n_in, n_out) for n_in, n_out in zip(self.sizes[:-1], self.sizes[1:])]
        bshapes = [(self.n_models, 1, s[2]) for s in shapes]
        total = sum(int(np.prod(s)) for s in shapes + bshapes)
        self._flat = np.zeros(total, dtype=np.float32)
        self._grad = np.zeros(total, dtype=np.float32)
        self._m = np.zeros(total, dtype=np.float32)
        self._v = np.zeros(total, dtype=np.float32)
        self.W, self.b, self._gW, self._gb = [], [], [], []
        off = 0
        for s in shapes + bshapes:
            n = int(np.prod(s))
            view, gview = self._flat[off:off + n].reshape(s), self._grad[off:off + n].reshape(s)
            (self.W if len(self.W) < len(shapes) else self.b).append(view)
            (self._gW if len(self._gW) < len(shapes) else self._gb).append(gview)
            off += n
        for k, s in enumerate(shapes):  # He initialisation
            self.W[k][...] = self.rng.normal(0.0, np.sqrt(2.0 / s[1]), size=s).astype(np.float32)
        self._t = 0
        self.x_mean: np.ndarray | None = None
        self.x_std: np.ndarray | None = None
        self.y_scale: np.ndarray | None = None

    # ------------------------------------------------------------------------------ scaling
    def set_input_scaler(self, X_all: ArrayLike) -> None:
        X = np.asarray(X_all, dtype=float)
        self.x_mean = X.mean(axis=0)
        std = X.std(axis=0)
        self.x_std = np.where(std > 0, std, 1.0)

    def _scale_x(self, X: np.ndarray) -> np.ndarray:
        if self.x_mean is None:
            self.set_input_scaler(X)
        return ((X - self.x_mean) / self.x_std).astype(np.float32)

    # ------------------------------------------------------------------------------ network
    def _forward(self, Xs: np.ndarray) -> list[np.ndarray]:
        h = np.broadcast_to(Xs, (self.n_models, *Xs.shape))
        acts = [h]
        L = len(self.W)
        for k in range(L):
            z = h @ self.W[k]
            z += self.b[k]
            h = np.maximum(z, 0.0, out=z) if k < L - 1 else z
            acts.append(h)
        return acts  # last: (M, n, 1)

    def _loss_grad(self, yhat: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Asymmetric MAPE per model, and its gradient wrt ``yhat`` (both (M, n))."""
        err = (yhat - y) / y
        w = np.where(err < 0, self.under_penalty, 1.0).astype(np.float32)
        loss = (w * np.abs(err)).mean(axis=1)
        grad = w * np.sign(err) / y / y.shape[1]
        return loss, grad

    def _step(self, Xb: np.ndarray, Yb: np.ndarray) -> np.ndarray:
        acts = self._forward(Xb)
        loss, g = self._loss_grad(acts[-1][..., 0], Yb)
        delta = g[..., None].astype(np.float32)
        for k in range(len(self.W) - 1, -1, -1):
            np.matmul(acts[k].transpose(0, 2, 1), delta, out=self._gW[k])
            self._gb[k][...] = delta.sum(axis=1, keepdims=True)
            if k:
                delta = (delta @ self.W[k].transpose(0, 2, 1)) * (acts[k] > 0)
        self._t += 1
        b1, b2, eps = 0.9, 0.999, 1e-8
        gr = self._grad
        self._m *= b1
        self._m += (1 - b1) * gr
        self._v *= b2
        self._v += (1 - b2) * gr * gr
        step = self.lr * np.sqrt(1 - b2 ** self._t) / (1 - b1 ** self._t)
        self._flat -= step * self._m / (np.sqrt(self._v) + eps)
        return loss

    def fit(self, X: ArrayLike, Y: ArrayLike, *, epochs: int = 1000, val_frac: float = 0.2, min_val: int = 2) -> np.ndarray:
        """Train on ``X`` (n, n_in) and ``Y`` (n, n_models), warm-starting from the current weights.

        Keeps the weights with the best validation loss (80:20 split when there are enough points).
        Returns the last training loss per model.
        """
        with single_threaded_blas():
            return self._fit(X, Y, epochs=epochs, val_frac=val_frac, min_val=min_val)

    def _fit(self, X: ArrayLike, Y: ArrayLike, *, epochs: int, val_frac: float, min_val: int) -> np.ndarray:
        X = np.asarray(X, dtype=float)
        Y = np.asarray(Y, dtype=float).reshape(len(X), self.n_models)
        if self.y_scale is None:
            self.y_scale = np.maximum(np.abs(Y).mean(axis=0), 1e-12)
        Xs = self._scale_x(X)
        Ys = (Y / self.y_scale).T.astype(np.float32)  # (M, n)
        n = len(X)
        n_val = int(round(n * val_frac)) if n * val_frac >= min_val else 0
        perm = self.rng.permutation(n)
        val, tr = perm[:n_val], perm[n_val:]
        Xt, Yt = Xs[tr], Ys[:, tr]
        Xv, Yv = Xs[val], Ys[:, val]
        best_loss = np.full(self.n_models, np.inf)
        best = self._flat.copy()
        masks = self._model_masks()
        nt = len(tr)
        bs = max(1, min(self.batch_size, nt))
        loss = np.zeros(self.n_models)
        for _ in range(int(epochs)):
            if nt > bs:
                order = self.rng.permutation(nt)
                for s in range(0, nt, bs):
                    sel = order[s:s + bs]
                    loss = self._step(Xt[sel], Yt[:, sel])
            else:
                loss = self._step(Xt, Yt)
            if n_val:
                vl, _ = self._loss_grad(self._forward(Xv)[-1][..., 0], Yv)
                better = np.nonzero(vl < best_loss)[0]
                for m in better:
                    best[masks[m]] = self._flat[masks[m]]
                    best_loss[m] = vl[m]
        if n_val:
            self._flat[...] = best
        return loss

    def _model_masks(self) -> list[np.ndarray]:
        """Flat indices of each model's parameters."""
        idx = np.arange(self._flat.size)
        out: list[list[np.ndarray]] = [[] for _ in range(self.n_models)]
        off = 0
        for arr in self.W + self.b:
            n = arr.size
            block = idx[off:off + n].reshape(arr.shape)
            for m in range(self.n_models):
                out[m].append(block[m].ravel())
            off += n
        return [np.concatenate(o) for o in out]

    def predict(self, X: ArrayLike) -> np.ndarray:
        """Predictions (n, n_models) in the units of the targets."""
        X = np.asarray(X, dtype=float)
        with single_threaded_blas():
            out = self._forward(self._scale_x(X))[-1][..., 0].T.astype(float)
        return out * (self.y_scale if self.y_scale is not None else 1.0)


def mape(pred: ArrayLike, true: ArrayLike) -> float:
    """Mean absolute percentage error (%), as Fulcrum reports for its NN."""
    p, t = np.asarray(pred, dtype=float), np.asarray(true, dtype=float)
    return float(np.mean(np.abs(p - t) / np.abs(t)) * 100.0)
