"""Bad input for every public callable of ``seqbook.plot``: a clear error, or a correct edge result.

Cases: 76 rejected (each a ValueError/TypeError raised by seqbook that names the argument) and 14 legal
edge checks. ``use_book_style`` takes no argument.
"""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from seqbook import plot  # noqa: E402
from seqbook.train import History  # noqa: E402
from tests.badinput import BAD_FLAGS, assert_clear_error, table  # noqa: E402

H = History(step_loss=[3.0, 2.0, 1.0], eval_step=[3], eval_loss=[1.5])
M = torch.rand(2, 3)
LABELS = ["a", "b", "c"]

ERRORS, case = table()
case("smooth-window-0", lambda: plot.smooth([1.0, 2.0], 0), "window", ">= 1", "0")
case("smooth-window-negative", lambda: plot.smooth([1.0, 2.0], -3), "window", "-3")
case("smooth-window-float", lambda: plot.smooth([1.0, 2.0], 2.5), "window", "float")
case("smooth-window-bool", lambda: plot.smooth([1.0, 2.0], True), "window", "bool")
case("smooth-window-None", lambda: plot.smooth([1.0, 2.0], None), "window", "NoneType")
case("smooth-values-nan", lambda: plot.smooth([1.0, math.nan, 2.0]), "values", "finite")
case("smooth-values-inf", lambda: plot.smooth([1.0, math.inf]), "values", "finite")
case("smooth-values-2d", lambda: plot.smooth([[1.0, 2.0]]), "values", "1-D", "(1, 2)")
case("smooth-values-scalar", lambda: plot.smooth(3.0), "values", "1-D", "()")
case("smooth-values-str", lambda: plot.smooth("123"), "values", "str")
case("smooth-values-None", lambda: plot.smooth(None), "values", "NoneType")
case("smooth-values-strings", lambda: plot.smooth(["a", "b"]), "values", "real numbers")
case("smooth-values-complex-tensor", lambda: plot.smooth(torch.ones(2, dtype=torch.complex64)), "values",
     "complex")
case("plot_history-None", lambda: plot.plot_history(None), "history", "NoneType")
case("plot_history-list", lambda: plot.plot_history([1.0, 2.0]), "history", "list")
case("plot_history-eval-mismatch", lambda: plot.plot_history(History([1.0], [1, 2], [0.5])), "history",
     "eval_step", "2 and 1")
case("plot_history-nan-loss", lambda: plot.plot_history(History([1.0, math.nan])), "values", "finite")
case("plot_history-window-0", lambda: plot.plot_history(H, window=0), "window", "0")
case("plot_history-baseline-str", lambda: plot.plot_history(H, baseline="1.0"), "baseline", "str")
case("plot_history-baseline-nan", lambda: plot.plot_history(H, baseline=math.nan), "baseline", "nan")
case("plot_history-label-int", lambda: plot.plot_history(H, label=3), "label", "int")
case("heatmap-1d", lambda: plot.heatmap(torch.rand(3)), "matrix", "2-D", "(3,)")
case("heatmap-3d", lambda: plot.heatmap(torch.rand(2, 3, 4)), "matrix", "2-D", "(2, 3, 4)")
case("heatmap-empty", lambda: plot.heatmap(np.zeros((0, 3))), "matrix", "empty", "(0, 3)")
case("heatmap-None", lambda: plot.heatmap(None), "matrix", "NoneType")
case("heatmap-strings", lambda: plot.heatmap([["a", "b"]]), "matrix", "real numbers")
case("heatmap-ragged", lambda: plot.heatmap([[1.0], [1.0, 2.0]]), "matrix", "ragged")
case("heatmap-x_labels-short", lambda: plot.heatmap(M, x_labels=["a"]), "x_labels", "3 labels", "got 1")
case("heatmap-y_labels-long", lambda: plot.heatmap(M, y_labels=LABELS), "y_labels", "2 labels", "got 3")
case("heatmap-x_labels-str", lambda: plot.heatmap(M, x_labels="abc"), "x_labels", "str")
case("heatmap-vmin-str", lambda: plot.heatmap(M, vmin="0"), "vmin", "str")
case("heatmap-vmax-nan", lambda: plot.heatmap(M, vmax=math.nan), "vmax", "nan")
case("heatmap-vmin-above-vmax", lambda: plot.heatmap(M, vmin=1, vmax=0), "vmin", "vmax")
case("confusion_matrix-negative-label", lambda: plot.confusion_matrix([0, -1], [0, 1], LABELS), "y_true",
     "[0, 2]", "-1")
case("confusion_matrix-label-too-large", lambda: plot.confusion_matrix([0, 1], [0, 3], LABELS), "y_pred",
     "[0, 2]", "3")
case("confusion_matrix-float-labels", lambda: plot.confusion_matrix([0.0, 1.0], [0, 1], LABELS), "y_true",
     "integer", "float64")
case("confusion_matrix-length-mismatch", lambda: plot.confusion_matrix([0, 1], [0], LABELS), "y_true",
     "y_pred", "2 and 1")
case("confusion_matrix-2d", lambda: plot.confusion_matrix([[0, 1]], [[0, 1]], LABELS), "y_true", "1-D")
case("confusion_matrix-no-labels", lambda: plot.confusion_matrix([0], [0], []), "labels", "at least one")
case("confusion_matrix-labels-str", lambda: plot.confusion_matrix([0], [0], "abc"), "labels", "str")

case("coloured_text-text-None", lambda: plot.coloured_text(None, [1.0]), "text", "str", "NoneType")
case("coloured_text-text-list", lambda: plot.coloured_text(["a"], [1.0]), "text", "str", "list")
case("coloured_text-text-empty", lambda: plot.coloured_text("", []), "text", "at least one", "''")
case("coloured_text-values-short", lambda: plot.coloured_text("abc", [1.0, 2.0]), "values", "one number per",
     "3", "got 2")
case("coloured_text-values-2d", lambda: plot.coloured_text("ab", torch.rand(1, 2)), "values", "1-D", "(1, 2)")
case("coloured_text-values-strings", lambda: plot.coloured_text("ab", ["a", "b"]), "values", "real numbers")
case("coloured_text-values-None", lambda: plot.coloured_text("ab", None), "values", "NoneType")
case("coloured_text-values-inf", lambda: plot.coloured_text("ab", [1.0, -math.inf]), "values", "finite",
     "-inf", "index 1")
case("coloured_text-width-0", lambda: plot.coloured_text("ab", [1.0, 2.0], width=0), "width", ">= 1", "0")
case("coloured_text-width-float", lambda: plot.coloured_text("ab", [1.0, 2.0], width=2.5), "width", "float")
case("coloured_text-vmin-above-vmax", lambda: plot.coloured_text("ab", [1.0, 2.0], vmin=1, vmax=0), "vmin",
     "vmax")
case("coloured_text-vmax-nan", lambda: plot.coloured_text("ab", [1.0, 2.0], vmax=math.nan), "vmax", "nan")
case("coloured_text-cmap-unknown", lambda: plot.coloured_text("ab", [1.0, 2.0], cmap="redblue"), "cmap",
     "'redblue'")
case("coloured_text-title-int", lambda: plot.coloured_text("ab", [1.0, 2.0], title=1), "title", "int")
case("coloured_text-ax-str", lambda: plot.coloured_text("ab", [1.0, 2.0], ax="top"), "ax", "str")


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")

# every flag through check_flag, and the other arguments typed before matplotlib reads them
for kind, value, word in BAD_FLAGS:
    case(f"heatmap-colorbar-{kind}", lambda v=value: plot.heatmap(M, colorbar=v), "colorbar", word)
    case(f"confusion_matrix-normalize-{kind}",
         lambda v=value: plot.confusion_matrix([0], [0], LABELS, normalize=v), "normalize", word)
case("heatmap-cmap-unknown", lambda: plot.heatmap(M, cmap="rainbowz"), "cmap", "'rainbowz'")
case("heatmap-cmap-int", lambda: plot.heatmap(M, cmap=3), "cmap", "int")
case("heatmap-title-int", lambda: plot.heatmap(M, title=5), "title", "int")
case("heatmap-ax-str", lambda: plot.heatmap(M, ax="left"), "ax", "str")
case("confusion_matrix-ax-list", lambda: plot.confusion_matrix([0], [0], LABELS, ax=[]), "ax", "list")
case("plot_history-ax-int", lambda: plot.plot_history(H, ax=1), "ax", "int")
case("plot_history-baseline_label-int", lambda: plot.plot_history(H, baseline=1.0, baseline_label=2),
     "baseline_label", "int")



def _label(xy=((0.0, 0.0), (1.0, 1.0)), texts=("a", "b"), **kwargs):
    fig, ax = plt.subplots()
    return plot.label_points(ax if "ax" not in kwargs else kwargs.pop("ax"), xy, texts, **kwargs)


case("label_points-ax-None", lambda: _label(ax=None), "ax", "Axes", "NoneType")
case("label_points-xy-1d", lambda: _label(xy=[0.0, 1.0]), "xy", "2-D", "(2,)")
case("label_points-xy-3-columns", lambda: _label(xy=np.zeros((2, 3))), "xy", "(N, 2)", "(2, 3)")
case("label_points-texts-short", lambda: _label(texts=["a"]), "texts", "2 strings")
case("label_points-texts-str", lambda: _label(texts="ab"), "texts", "2 strings")
case("label_points-texts-ints", lambda: _label(texts=[1, 2]), "texts", "strings")
case("label_points-colors-short", lambda: _label(colors=["C0"]), "colors", "2 colours", "1")
case("label_points-fontsize-0", lambda: _label(fontsize=0), "fontsize", "0")


def test_label_points_keeps_one_label_per_point_off_the_dots():
    fig, ax = plt.subplots()
    xy = np.array([[0.0, 0.0], [0.0, 0.05], [1.0, 1.0]])
    ax.scatter(xy[:, 0], xy[:, 1])
    fig.canvas.draw()
    labels = plot.label_points(ax, xy, ["one", "two", "three"], ["C0", "C1", "C2"])
    assert [t.get_text() for t in ax.texts] == ["one", "two", "three"]  # the others removed
    assert [t.get_text() for t in labels] == ["one", "two", "three"]
    boxes = [t.get_window_extent() for t in labels]
    assert not boxes[0].overlaps(boxes[1])  # two close points: their labels do not overlap


@pytest.mark.parametrize(("fn", "words"), ERRORS)
def test_bad_input_is_refused_clearly(fn, words):
    assert_clear_error(fn, *words)


def test_legal_edge_inputs():
    plot.use_book_style()
    assert plot.smooth([]).shape == (0,)
    assert plot.smooth([1.0, 3.0], window=1).tolist() == [1.0, 3.0]
    assert plot.smooth(torch.tensor([1.0, 3.0], dtype=torch.bfloat16), np.int64(2)).tolist() == [1.0, 2.0]
    assert plot.smooth([1, 3], window=100).tolist() == [1.0, 2.0]  # a window longer than the data
    assert plot.plot_history(History(step_loss=[1.0]), baseline=np.float64(0.5)) is not None
    assert plot.heatmap(torch.tensor([[math.nan, 1.0]]), colorbar=False) is not None  # NaN is drawn blank
    assert plot.heatmap(torch.rand(2, 2, requires_grad=True), x_labels=("a", "b")) is not None
    counts = plot.confusion_matrix(torch.tensor([0, 2, 2]), np.array([0, 1, 2], dtype=np.int32), LABELS)
    assert counts.tolist() == [[1, 0, 0], [0, 0, 0], [0, 1, 1]]
    assert plot.confusion_matrix([], [], LABELS, normalize=False).sum() == 0
    assert plot.confusion_matrix([0], [0], LABELS, normalize=np.bool_(True), ax=plt.gca())[0, 0] == 1
    cmap = plt.get_cmap("magma")
    assert plot.heatmap(M, cmap=cmap, colorbar=np.bool_(False), title=None) is not None
    # one character (NaN drawn blank), NumPy integers, a tensor that needs grad, a Colormap
    assert plot.coloured_text("a", [math.nan]) is not None
    assert plot.coloured_text("ab", np.array([1, 2]), width=np.int64(1), vmin=None, vmax=None) is not None
    assert plot.coloured_text("ab", torch.rand(2, requires_grad=True), cmap=cmap, ax=plt.gca()) is not None


def test_coloured_text_draws_each_character_on_its_value():
    fig, ax = plt.subplots()
    plot.coloured_text("ab cde", [-1.0, 1.0, 0.0, 0.5, math.nan, 2.0], width=4, ax=ax, title="unit 7")
    image = ax.images[0].get_array()
    # two rows of 4: the text wraps after 4 characters and the last row is padded with blanks
    assert image.shape == (2, 4)
    assert image[0].tolist() == [-1.0, 1.0, 0.0, 0.5]
    assert image[1, 0] is np.ma.masked or math.isnan(image[1, 0])
    assert image[1, 1] == 2.0 and image.mask[1, 2:].all()
    texts = [(t.get_text(), t.get_position()) for t in ax.texts]
    # a space is drawn as a middle dot, each character at (column, row)
    assert texts == [("a", (0, 0)), ("b", (1, 0)), ("\u00b7", (2, 0)), ("c", (3, 0)),
                     ("d", (0, 1)), ("e", (1, 1))]
    # a line break is drawn as one visible glyph in its cell
    ax2 = plt.subplots()[1]
    drawn = plot.coloured_text("a\nb", [0.0, 0.0, 0.0], ax=ax2).texts
    assert [t.get_text() for t in drawn] == ["a", "\u21b5", "b"]
    # white on the dark ends of RdBu_r (-1 and +1, and 2 beyond the range), black in the pale middle
    colours = [t.get_color() for t in ax.texts]
    assert colours == ["white", "white", "black", "black", "black", "white"]
    assert ax.get_title() == "unit 7" and not ax.get_xticks().size
