"""Figure helpers the chapters share, so every chapter's plots look alike."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch

from .checks import check_axes, check_flag, check_int, check_number, check_optional_str, check_str
from .losses import calibration_bins, expected_calibration_error


def _as_array(name: str, values, ndim: int) -> np.ndarray:
    """``values`` (a sequence, an array or a tensor) as a real NumPy array of rank ``ndim``."""
    if isinstance(values, (str, bytes)) or values is None:
        raise TypeError(f"{name} must be a sequence, array or tensor of numbers, got {type(values).__name__}")
    if isinstance(values, torch.Tensor):
        values = values.detach().cpu()
        if values.is_complex():
            raise TypeError(f"{name} must hold real numbers, got {values.dtype}")
        values = values.float() if values.dtype == torch.bfloat16 else values  # NumPy has no bfloat16
    try:
        array = np.asarray(values)
    except ValueError:  # ragged nesting
        raise ValueError(f"{name} must be a rectangular array of numbers, got ragged rows") from None
    if array.dtype.kind not in "biuf":
        raise TypeError(f"{name} must hold real numbers, got dtype {array.dtype}")
    if array.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {array.shape}")
    return array


MAX_FIGURE_WIDTH = 9.0
"""The widest figure, in inches, the chapters draw. The book's text column shows about 7.6 inches
(760 px) of figure on a laptop, so a figure at most this wide is shown at 0.84 of its size or more and
its 11-point labels stay about 13 px tall, close to the body text."""


def use_book_style() -> None:
    """The one figure style of the book: clean axes, 11-point text, and sharp PNGs.

    Inside IPython (a notebook), figures are stored as PNG at twice their display resolution
    ("retina"): 100 pixels per inch on screen and 200 in the file, with the display size in the
    output's metadata, so both the rendered book and JupyterLab show them at their size in inches
    and sharp on high-density screens. Outside IPython only the rcParams change.
    """
    plt.rcParams.update({
        "figure.figsize": (6, 3.5),
        "figure.dpi": 100,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "axes.grid": True,
        "grid.alpha": 0.3,
        "font.size": 11,
    })
    try:
        from IPython import get_ipython
    except ImportError:  # matplotlib without IPython: nothing to configure
        return
    if get_ipython() is not None:
        from matplotlib_inline.backend_inline import set_matplotlib_formats

        set_matplotlib_formats("retina")


def smooth(values: Sequence[float], window: int = 50) -> np.ndarray:
    """Moving average over ``window`` points (shorter at the start).

    ``values`` is 1-D and finite (a NaN would spread to every later point); an empty ``values``
    gives an empty array. ``window`` is an int >= 1 (1: no smoothing).
    """
    values = _as_array("values", values, 1).astype(float)
    window = check_int("window", window, 1)
    if not np.isfinite(values).all():
        raise ValueError("values must be finite, got a NaN or infinite entry")
    if len(values) == 0:
        return values
    cumsum = np.cumsum(np.insert(values, 0, 0.0))
    idx = np.arange(1, len(values) + 1)
    lo = np.maximum(0, idx - window)
    return (cumsum[idx] - cumsum[lo]) / (idx - lo)


def plot_history(history, ax=None, label: str | None = None, baseline: float | None = None,
                 baseline_label: str = "baseline", window: int = 50):
    """Training loss (smoothed), evaluation losses as dots, and an optional baseline line.

    ``history`` is a :class:`seqbook.train.History` (or has its ``step_loss``, ``eval_step`` and
    ``eval_loss`` lists).
    """
    if not all(hasattr(history, k) for k in ("step_loss", "eval_step", "eval_loss")):
        raise TypeError(f"history must be a seqbook.train.History, got {type(history).__name__}")
    if len(history.eval_step) != len(history.eval_loss):
        raise ValueError(f"history must have as many eval_step as eval_loss entries, got "
                         f"{len(history.eval_step)} and {len(history.eval_loss)}")
    check_optional_str("label", label)
    if baseline is not None:
        baseline = check_number("baseline", baseline)
    check_str("baseline_label", baseline_label)
    check_axes("ax", ax)
    smoothed = smooth(history.step_loss, window)
    ax = ax or plt.gca()
    line, = ax.plot(smoothed, label=f"{label or 'train'} (smoothed)")
    if history.eval_loss:
        ax.plot(history.eval_step, history.eval_loss, "o--", color=line.get_color(),
                label=f"{label or 'held-out'} (eval)")
    if baseline is not None:
        ax.axhline(baseline, color="gray", ls=":", label=baseline_label)
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.legend()
    return ax


def _colour_limits(vmin, vmax) -> tuple[float | None, float | None]:
    """``vmin`` and ``vmax``, each None or a real number, with ``vmin <= vmax`` when both are given."""
    vmin = None if vmin is None else check_number("vmin", vmin)
    vmax = None if vmax is None else check_number("vmax", vmax)
    if vmin is not None and vmax is not None and vmin > vmax:
        raise ValueError(f"vmin must be <= vmax, got vmin={vmin}, vmax={vmax}")
    return vmin, vmax


def _as_colormap(cmap):
    """``cmap`` (a matplotlib colormap or the name of one) as a Colormap."""
    if isinstance(cmap, str):
        if cmap not in plt.colormaps():
            raise ValueError(f"cmap must name a matplotlib colormap such as 'viridis', got {cmap!r}")
        return plt.get_cmap(cmap)
    if not isinstance(cmap, plt.matplotlib.colors.Colormap):
        raise TypeError(f"cmap must be a colormap name or a matplotlib Colormap, got {type(cmap).__name__}")
    return cmap


def heatmap(matrix, x_labels=None, y_labels=None, ax=None, cmap: str = "viridis",
            colorbar: bool = True, title: str | None = None, vmin=None, vmax=None):
    """A labelled heatmap, e.g. attention weights (rows: queries, columns: keys).

    ``matrix`` is 2-D (rows, columns): a tensor, an array or nested lists of real numbers (bool
    too). NaN entries are legal and drawn blank. ``x_labels`` needs one label per column,
    ``y_labels`` one per row.
    """
    matrix = _as_array("matrix", matrix, 2)
    if matrix.size == 0:
        raise ValueError(f"matrix must not be empty, got shape {matrix.shape}")
    for name, labels, n in (("x_labels", x_labels, matrix.shape[1]), ("y_labels", y_labels, matrix.shape[0])):
        if labels is None:
            continue
        if isinstance(labels, (str, bytes)) or not hasattr(labels, "__len__"):
            raise TypeError(f"{name} must be a sequence of labels, got {type(labels).__name__}")
        if len(labels) != n:
            what = "column" if name == "x_labels" else "row"
            raise ValueError(f"{name} must have {n} labels (one per {what}), got {len(labels)}")
    vmin, vmax = _colour_limits(vmin, vmax)
    _as_colormap(cmap)
    colorbar = check_flag("colorbar", colorbar)
    check_optional_str("title", title)
    check_axes("ax", ax)
    ax = ax or plt.gca()
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


def coloured_text(text: str, values, width: int = 64, ax=None, cmap: str = "RdBu_r",
                  vmin: float = -1.0, vmax: float = 1.0, title: str | None = None):
    """Text drawn character by character, each on a background coloured by one value.

    The picture Karpathy, Johnson and Fei-Fei (2015) drew of what one hidden unit tracks: ``values[i]``
    (say, unit k of the state after reading ``text[i]``) colours character ``text[i]``. The text
    wraps every ``width`` characters; a space is drawn as a middle dot, so that the word boundaries
    stay visible, a line break as U+21B5 (↵), and a lone surrogate (half of a UTF-16 pair, which no
    font can draw) as U+FFFD, as tiktoken reads it. Values outside ``[vmin, vmax]`` take the colour
    of the nearer end; NaN is drawn blank; an infinite value is refused. Each character is written
    in black, or in white on a dark background.

    Shape:
        ``values``: (len(text),), real numbers (a tensor, an array or a list).

    Returns:
        ``ax``; its image ``ax.images[0]`` can take a colour bar.
    """
    check_str("text", text)
    if not text:
        raise ValueError("text must hold at least one character, got ''")
    values = _as_array("values", values, 1)
    if len(values) != len(text):
        raise ValueError(f"values must hold one number per character of text: {len(text)}, got {len(values)}")
    if np.isinf(values).any():
        where = int(np.isinf(values).argmax())
        raise ValueError(f"values must be finite or NaN, got {values[where]} at index {where}")
    width = check_int("width", width, 1)
    vmin, vmax = _colour_limits(vmin, vmax)
    colours = _as_colormap(cmap)
    check_optional_str("title", title)
    check_axes("ax", ax)
    ax = ax or plt.gca()
    rows = -(-len(text) // width)
    grid = np.full(rows * width, np.nan)
    grid[: len(text)] = values
    grid = grid.reshape(rows, width)
    image = ax.imshow(grid, cmap=colours, vmin=vmin, vmax=vmax, aspect="auto", interpolation="nearest")
    for i, char in enumerate(text):
        row, col = divmod(i, width)
        value = grid[row, col]
        red, green, blue, _ = image.cmap(image.norm(value)) if np.isfinite(value) else (1, 1, 1, 1)
        dark = 0.299 * red + 0.587 * green + 0.114 * blue < 0.5
        if char == " ":
            char = "\u00b7"
        elif char == "\n":
            char = "\u21b5"
        elif 0xD800 <= ord(char) <= 0xDFFF:
            char = "\ufffd"
        ax.text(col, row, char, ha="center", va="center",
                family="monospace", color="white" if dark else "black")
    ax.set_xticks([])
    ax.set_yticks([])
    ax.grid(False)
    if title:
        ax.set_title(title)
    return ax


#: where label_points tries each label, in points from its dot, in this order
LABEL_OFFSETS = ((3, 2), (3, -12), (-3, 2), (-3, -12), (0, 6), (0, -18), (3, 11), (-3, 11))


def label_points(ax, xy, texts: Sequence[str], colors: Sequence[str] | None = None,
                 fontsize: float = 10):
    """Write ``texts[i]`` beside the dot at ``xy[i]`` of a scatter plot, where it hides least.

    Each label, in turn, goes to the first of :data:`LABEL_OFFSETS` where it covers the least
    area of the dots (6 points square) and of the labels placed before it. Call it once the
    figure's layout is final (after ``fig.canvas.draw()``): the areas are measured on the canvas.

    Shape:
        ``xy``: (N, 2) data coordinates; ``texts`` and ``colors`` (optional): N strings each.

    Returns:
        The N text annotations.
    """
    from matplotlib.axes import Axes
    from matplotlib.transforms import Bbox

    if not isinstance(ax, Axes):
        raise TypeError(f"ax must be a matplotlib Axes, got {type(ax).__name__}")
    xy = _as_array("xy", xy, 2)
    if xy.shape[1] != 2:
        raise ValueError(f"xy must have shape (N, 2), got {xy.shape}")
    if isinstance(texts, str) or len(texts) != len(xy):
        raise ValueError(f"texts must be a sequence of {len(xy)} strings, one per point")
    for name, seq in (("texts", texts), ("colors", colors or [])):
        if isinstance(seq, str) or not all(isinstance(t, str) for t in seq):
            raise TypeError(f"{name} must be a sequence of strings")
    if colors is not None and len(colors) != len(xy):
        raise ValueError(f"colors must hold {len(xy)} colours, one per point, got {len(colors)}")
    check_number("fontsize", fontsize, 0, low_open=True)
    placed = [Bbox.from_bounds(x - 3, y - 3, 6, 6) for x, y in ax.transData.transform(xy)]
    labels = []
    for i, (text, point) in enumerate(zip(texts, xy, strict=True)):
        candidates = [ax.annotate(text, point, xytext=(dx, dy), textcoords="offset points",
                                  fontsize=fontsize, color=colors[i] if colors else None,
                                  ha="left" if dx > 0 else "right" if dx < 0 else "center")
                      for dx, dy in LABEL_OFFSETS]
        boxes = [candidate.get_window_extent() for candidate in candidates]
        covered = [sum(o.width * o.height for b in placed if (o := Bbox.intersection(box, b)))
                   for box in boxes]
        best = covered.index(min(covered))
        for candidate in candidates[:best] + candidates[best + 1:]:
            candidate.remove()
        placed.append(boxes[best])
        labels.append(candidates[best])
    return labels


def confusion_matrix(y_true, y_pred, labels: Sequence[str], ax=None, normalize: bool = True):
    """Plot a confusion matrix (rows: true class, columns: predicted class); returns the counts.

    ``y_true`` and ``y_pred`` are 1-D integer class ids in [0, len(labels)), of the same length
    (empty is legal: all counts are zero).
    """
    if isinstance(labels, (str, bytes)) or not hasattr(labels, "__len__"):
        raise TypeError(f"labels must be a sequence of class names, got {type(labels).__name__}")
    k = len(labels)
    if k == 0:
        raise ValueError("labels must name at least one class, got none")
    y_true, y_pred = _as_array("y_true", y_true, 1), _as_array("y_pred", y_pred, 1)
    y_true = y_true.astype(int) if y_true.size == 0 else y_true  # np.asarray([]) is float64
    y_pred = y_pred.astype(int) if y_pred.size == 0 else y_pred
    for name, y in (("y_true", y_true), ("y_pred", y_pred)):
        if y.dtype.kind not in "iu":
            raise TypeError(f"{name} must hold integer class ids, got dtype {y.dtype}")
        if y.size and (y.min() < 0 or y.max() >= k):
            bad = y.min() if y.min() < 0 else y.max()
            raise ValueError(f"{name} must hold class ids in [0, {k - 1}], found {bad}")
    if len(y_true) != len(y_pred):
        raise ValueError(f"y_true and y_pred must have the same length, got {len(y_true)} and {len(y_pred)}")
    normalize = check_flag("normalize", normalize)
    check_axes("ax", ax)
    counts = np.zeros((k, k), dtype=int)
    np.add.at(counts, (y_true, y_pred), 1)
    shown = counts / np.maximum(counts.sum(1, keepdims=True), 1) if normalize else counts
    ax = heatmap(shown, labels, labels, ax=ax, cmap="Blues", vmin=0)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    return counts


# ---------------------------------------------------------------------------------------------
# Calibration (chapter 9).
# ---------------------------------------------------------------------------------------------


def reliability_diagram(probs: torch.Tensor, target: torch.Tensor, n_bins: int = 15, ax=None,
                        title: str | None = None):
    """Plot accuracy against confidence per bin, with the diagonal of perfect calibration.

    Bars below the diagonal are over-confident bins, bars above it under-confident ones; the
    legend gives the ECE. Returns the matplotlib axes. Arguments as in
    :func:`seqbook.losses.calibration_bins`;
    ``title`` is a str or None.
    """
    check_optional_str("title", title)
    check_axes("ax", ax)
    bins = calibration_bins(probs, target, n_bins)
    ece = expected_calibration_error(probs, target, n_bins)
    conf, acc, count = (t.cpu().numpy() for t in bins)
    ax = ax or plt.gca()
    width = 1.0 / n_bins
    centers = (np.arange(n_bins) + 0.5) * width
    filled = count > 0
    ax.bar(centers[filled], acc[filled], width=width * 0.95, color="tab:blue", alpha=0.8,
           label=f"accuracy (ECE = {ece:.3f})")
    low = np.minimum(acc, conf)[filled]  # the gap bar spans accuracy..confidence, whichever is higher
    ax.bar(centers[filled], np.abs(conf - acc)[filled], bottom=low, width=width * 0.95, color="none",
           edgecolor="tab:red", hatch="///", lw=0.8, label="gap to mean confidence")
    ax.plot([0, 1], [0, 1], "k--", lw=1, label="perfect calibration")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel("confidence (max probability)")
    ax.set_ylabel("accuracy in bin")
    ax.legend(loc="upper left", fontsize=8)
    if title:
        ax.set_title(title)
    return ax
