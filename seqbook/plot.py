"""Figure helpers the chapters share, so every chapter's plots look alike."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np


def use_book_style() -> None:
    """Small, clean figures that read well in the rendered book."""
    plt.rcParams.update({
        "figure.figsize": (6, 3.5),
        "figure.dpi": 100,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "axes.grid": True,
        "grid.alpha": 0.3,
        "font.size": 10,
    })


def smooth(values: Sequence[float], window: int = 50) -> np.ndarray:
    """Moving average over ``window`` points (shorter at the start)."""
    values = np.asarray(values, dtype=float)
    if len(values) == 0:
        return values
    cumsum = np.cumsum(np.insert(values, 0, 0.0))
    idx = np.arange(1, len(values) + 1)
    lo = np.maximum(0, idx - window)
    return (cumsum[idx] - cumsum[lo]) / (idx - lo)


def plot_history(history, ax=None, label: str | None = None, baseline: float | None = None,
                 baseline_label: str = "baseline", window: int = 50):
    """Training loss (smoothed), evaluation losses as dots, and an optional baseline line."""
    ax = ax or plt.gca()
    line, = ax.plot(smooth(history.step_loss, window), label=f"{label or 'train'} (smoothed)")
    if history.eval_loss:
        ax.plot(history.eval_step, history.eval_loss, "o--", color=line.get_color(),
                label=f"{label or 'held-out'} (eval)")
    if baseline is not None:
        ax.axhline(baseline, color="gray", ls=":", label=baseline_label)
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.legend()
    return ax


def heatmap(matrix, x_labels=None, y_labels=None, ax=None, cmap: str = "viridis",
            colorbar: bool = True, title: str | None = None, vmin=None, vmax=None):
    """A labelled heatmap, e.g. attention weights (rows: queries, columns: keys)."""
    ax = ax or plt.gca()
    matrix = np.asarray(matrix.detach().cpu() if hasattr(matrix, "detach") else matrix)
    im = ax.imshow(matrix, cmap=cmap, aspect="auto", vmin=vmin, vmax=vmax)
    if x_labels is not None:
        ax.set_xticks(range(len(x_labels)), x_labels, rotation=90, fontsize=8)
    if y_labels is not None:
        ax.set_yticks(range(len(y_labels)), y_labels, fontsize=8)
    ax.grid(False)
    if title:
        ax.set_title(title)
    if colorbar:
        plt.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    return ax


def confusion_matrix(y_true, y_pred, labels: Sequence[str], ax=None, normalize: bool = True):
    """Plot a confusion matrix (rows: true class, columns: predicted class); returns the counts."""
    y_true, y_pred = np.asarray(y_true), np.asarray(y_pred)
    k = len(labels)
    counts = np.zeros((k, k), dtype=int)
    np.add.at(counts, (y_true, y_pred), 1)
    shown = counts / np.maximum(counts.sum(1, keepdims=True), 1) if normalize else counts
    ax = heatmap(shown, labels, labels, ax=ax, cmap="Blues", vmin=0)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    return counts
