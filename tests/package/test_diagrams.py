"""The model diagrams of ``seqbook.diagrams``: each draws, carries the book's symbols, keeps its text
legible and apart, and is closed again.

Geometry is checked on the drawn figure: no two labels overlap, no label crosses a line or a box
it does not belong to, every label fits its box and the figure, every font is >= 10 pt, every
colour comes from the one palette, and no figure carries a title (the captions do that).
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.colors as mcolors  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
from matplotlib.patches import Circle, FancyArrowPatch, FancyBboxPatch  # noqa: E402
from matplotlib.path import Path  # noqa: E402
from matplotlib.transforms import Bbox  # noqa: E402

from seqbook import diagrams  # noqa: E402
from seqbook.plot import use_book_style  # noqa: E402

# Function -> labels that must appear among its texts (the book's symbols, as drawn).
EXPECTED = {
    "draw_elman_rnn": [r"$x_t$", r"$h_t$", r"$y_t$", r"$h_0$", r"$x_1$", r"$h_3$", r"$y_3$", r"$W_{ih}$",
                       r"$W_{hh}$", r"$W_y$"],
    "draw_gru_cell": [r"$h_{t-1}$", r"$h_t$", r"$x_t$", r"$z_t$", r"$r_t$", r"$n_t$", r"$1 - z_t$",
                      r"$W_{hn} h_{t-1}$", r"$W_{in} x_t$", r"$\sigma$", "tanh", "⊙", "+", "1−"],
    "draw_lstm_cell": [r"$c_{t-1}$", r"$c_t$", r"$h_{t-1}$", r"$h_t$", r"$x_t$", r"$f_t$", r"$i_t$",
                       r"$g_t$", r"$o_t$", r"$\sigma$", "tanh", "⊙", "+"],
    "draw_bahdanau": [r"$x_1$", r"$x_{T_x}$", r"$\overrightarrow{h}_1$", r"$\overleftarrow{h}_{T_x}$",
                      r"$\alpha_{i1}$", r"$\alpha_{i{T_x}}$", r"$c_i$", r"$s_{i-1}$", r"$s_i$", r"$y_{i-1}$",
                      r"$p(y_i \mid y_{<i}, x)$", r"$W_o$", r"$E$", "GRU", "Σ",
                      r"$e_{ij} = v_a^\top \tanh(W_a s_{i-1} + U_a h_j + b_a)$",
                      r"$\alpha_{ij} = \mathrm{softmax}_j(e_{ij})$"],
    "draw_scaled_dot_product_attention": [r"$QK^\top$", r"$\div\sqrt{d_k}$", "mask", "softmax",
                                          r"$(\ldots, L, d_k)$", r"$(\ldots, S, d_k)$", r"$(\ldots, S, d_v)$",
                                          r"scores $(\ldots, L, S)$", "output", "weights",
                                          r"$(\ldots, L, d_v)$"],
    "draw_multi_head_attention": [r"$W^Q$", r"$W^K$", r"$W^V$", "scaled dot-product attention",
                                  r"$\mathrm{Concat}(\mathrm{head}_1, \ldots, \mathrm{head}_h)\, W^O$",
                                  r"$(B, h, L, d_k)$", r"$(B, h, S, d_k)$", r"$(B, L, d_\mathrm{model})$",
                                  r"$d_k = d_\mathrm{model}/h$", "output"],
    "draw_transformer": ["LayerNorm", "self-attention", "padding mask", "masked self-attention",
                         "causal mask", "cross-attention", "feed-forward", "positional", "source ids",
                         "target ids, shifted right", r"$\times \sqrt{d_\mathrm{model}}$", r"$N\times$",
                         "memory", "logits", "+"],
    "draw_gpt": ["token embedding", "position", "causal", "feed-forward", "(GELU)",
                 r"$n_\mathrm{layer}\times$", r"$\mathtt{ln\_f}$", r"$\mathtt{lm\_head}$", "logits", "tied",
                 r"$(B, T, n_\mathrm{embd})$", r"$(B, T, \mathrm{vocab\_size})$"],
    "draw_hopfield_layers": [r"$\mathtt{Hopfield}(R, Y)$", r"$\mathtt{HopfieldPooling}(Y)$",
                             r"$\mathtt{HopfieldLayer}(R)$", "$W_Q$", "$W_K$", "$W_V$", "$Q$", "$K$", "$V$",
                             "$Z$", r"softmax$(\beta\, Q K^\top)$", "learned $Q$", "learned $K$",
                             "$(B, L, d_r)$", "$(B, S, d_y)$"],
    "draw_vsa_residual_block": [r"$\mathbf{x}$", r"$\mathbf{y}$", r"$\mathrm{FC}_1$", r"$\mathrm{FC}_2$",
                                r"$n \to 2n$", r"$2n \to n$", "bind", r"\mathrm{angle}",
                                r"e^{i\pi\mathbf{x}}"],
    "draw_vsa_attention_blocks": [r"$\mathbf{x}$", r"$\mathrm{FC}_q$", r"$\mathrm{FC}_k$", r"$\mathrm{FC}_v$",
                                  r"$\mathbf{P}$ (learned)", "VSA\nattention", "bind", r"$\mathbf{a}$",
                                  r"$\mathbf{h}$", r"$\mathrm{FC}_1, \mathrm{FC}_2$",
                                  "(a) self-attention block", "(b) cross-attention block",
                                  r"\mathtt{num\_queries}"],
    "draw_mamba_block": ["$u$", "output", "$x$", "$z$", "in_proj", "conv1d", "SiLU",
                         "selective SSM\n" r"$h_t = \bar{A}_t h_{t-1} + \bar{B}_t x_t$" "\n"
                         r"$y_t = C_t^\top h_t + D_e\, x_t$", "x_proj, dt_proj",
                         r"$\Delta_t, B_t, C_t$", "⊙", "out_proj", "(batch, $T$, $d$)"],
    "draw_tensor_parallel_mlp": ["rank 0", "rank 1", "$X$", "$f$", "$W_1^{(0)}$", "$W_2^{(1)}$", "GELU",
                                 "all-reduce", "$Y_0$", "$Y_1$", "$Y$", r"$d_\mathrm{ff}/2$"],
    "draw_ring_all_reduce": ["start", "reduce-scatter, $s = 0$", "reduce-scatter, $s = 1$",
                             "all-gather, $s = 0$", "all-gather, $s = 1$", "process 0", "process 2",
                             "chunk 0", "chunk 2", "$a$", "$a{+}b$", "$a{+}b{+}c$", "the ring"],
}
DRAW = sorted(EXPECTED)


def test_every_public_diagram_is_tested():
    assert DRAW == sorted(n for n in diagrams.__all__ if n.startswith("draw_"))


def _texts(fig):
    return [t for ax in fig.axes for t in ax.texts if t.get_text() and t.get_visible()] + list(fig.texts)


def _extent(artist, renderer, shrink: float = 0.0) -> Bbox:
    """Window extent in pixels, shrunk by ``shrink`` pixels on every side (antialiasing slack)."""
    b = artist.get_window_extent(renderer)
    return Bbox.from_extents(b.x0 + shrink, b.y0 + shrink, b.x1 - shrink, b.y1 - shrink)


def _boxes(fig):
    """Filled boxes and circles (frames without fill are not obstacles)."""
    return [p for ax in fig.axes for p in ax.patches
            if isinstance(p, (FancyBboxPatch, Circle)) and p.get_facecolor()[3] > 0]


def _owner(text, boxes, renderer):
    """The topmost box whose area holds the anchor of ``text``, if any."""
    x, y = text.get_transform().transform(text.get_position())
    under = [p for p in boxes if p.get_window_extent(renderer).contains(x, y)]
    return max(under, key=lambda p: p.get_zorder(), default=None)


@pytest.fixture(params=DRAW)
def drawn(request):
    """(name, figure, renderer), drawn under the book's style as in the chapters; the figure is closed
    after the test, and the test checks it is."""
    with plt.rc_context():
        use_book_style()
        fig = getattr(diagrams, request.param)()
        fig.canvas.draw()
    yield request.param, fig, fig.canvas.get_renderer()
    plt.close(fig)
    assert fig.number not in plt.get_fignums()


def test_returns_a_figure_of_book_width(drawn):
    name, fig, _ = drawn
    assert isinstance(fig, matplotlib.figure.Figure)
    assert fig.number in plt.get_fignums()                     # pyplot shows it in a notebook
    width, height = fig.get_size_inches()
    assert 6.5 <= width <= 9.0, (name, width)
    assert 1.5 <= height <= 6.5, (name, height)


def test_expected_labels(drawn):
    name, fig, _ = drawn
    texts = [t.get_text() for t in _texts(fig)]
    for label in EXPECTED[name]:
        assert any(label in t for t in texts), (name, label, texts)


def test_no_title_and_legible_fonts(drawn):
    name, fig, _ = drawn
    assert fig._suptitle is None
    for ax in fig.axes:
        assert ax.get_title() == "" and not ax.axison
    sizes = [t.get_fontsize() for t in _texts(fig)]
    assert sizes and min(sizes) >= 10, (name, min(sizes))


def test_labels_do_not_overlap_and_fit(drawn):
    name, fig, renderer = drawn
    figure_box = fig.bbox
    texts = _texts(fig)
    extents = [_extent(t, renderer, shrink=1.0) for t in texts]
    for t, e in zip(texts, extents, strict=True):
        assert figure_box.containsx(e.x0) and figure_box.containsx(e.x1), (name, t.get_text(), "x")
        assert figure_box.containsy(e.y0) and figure_box.containsy(e.y1), (name, t.get_text(), "y")
    for i in range(len(texts)):
        for j in range(i + 1, len(texts)):
            assert not extents[i].overlaps(extents[j]), (name, texts[i].get_text(), texts[j].get_text())


def test_labels_fit_their_box_and_avoid_the_others(drawn):
    name, fig, renderer = drawn
    boxes = _boxes(fig)
    for t in _texts(fig):
        e = _extent(t, renderer, shrink=1.0)
        owner = _owner(t, boxes, renderer)
        if owner is not None:
            o = owner.get_window_extent(renderer)
            assert o.x0 <= e.x0 and e.x1 <= o.x1 and o.y0 <= e.y0 and e.y1 <= o.y1, (name, t.get_text())
        for p in boxes:
            if p is not owner and not _stacked_under(p, owner):
                assert not e.overlaps(p.get_window_extent(renderer)), (name, t.get_text(), "box")


def _stacked_under(patch, owner) -> bool:
    """A shadow copy drawn behind ``owner`` (the stacked heads of multi-head attention)."""
    return (owner is not None and isinstance(patch, FancyBboxPatch) and isinstance(owner, FancyBboxPatch)
            and patch.get_zorder() < owner.get_zorder() and patch.get_width() == owner.get_width()
            and patch.get_height() == owner.get_height())


def test_labels_do_not_sit_on_lines(drawn):
    name, fig, renderer = drawn
    arrows = [p for ax in fig.axes for p in ax.patches if isinstance(p, FancyArrowPatch)]
    assert arrows, name
    boxes = _boxes(fig)
    for t in _texts(fig):
        if _owner(t, boxes, renderer) is not None:
            continue                                            # a box's own text: arrows end at its edge
        e = _extent(t, renderer, shrink=1.5)
        for a in arrows:
            path = a.get_transform().transform_path(a.get_path())   # data -> pixels
            for points in path.to_polygons(closed_only=False):
                assert not Path(points).intersects_bbox(e, filled=False), (name, t.get_text())


def test_colours_come_from_the_palette(drawn):
    name, fig, _ = drawn
    allowed = {mcolors.to_hex(c) for c in diagrams.PALETTE.values()}
    for p in _boxes(fig):
        assert mcolors.to_hex(p.get_facecolor()) in allowed, (name, mcolors.to_hex(p.get_facecolor()))


@pytest.mark.parametrize("call, match", [
    (lambda: diagrams.draw_elman_rnn(steps=5), "steps"),
    (lambda: diagrams.draw_bahdanau(source_length=5), "source_length"),
])
def test_bad_sizes_are_refused(call, match):
    before = set(plt.get_fignums())
    with pytest.raises(ValueError, match=match):
        call()
    assert set(plt.get_fignums()) == before                     # no half-drawn figure left open


@pytest.mark.parametrize("steps", [2, 4])
def test_elman_steps(steps):
    fig = diagrams.draw_elman_rnn(steps=steps)
    texts = [t.get_text() for t in _texts(fig)]
    width = fig.get_size_inches()[0]
    plt.close(fig)
    assert f"$h_{steps}$" in texts and f"$h_{steps + 1}$" not in texts
    assert 6.5 <= width <= 9.0


def test_bahdanau_short_source():
    fig = diagrams.draw_bahdanau(source_length=3)
    texts = [t.get_text() for t in _texts(fig)]
    width = fig.get_size_inches()[0]
    plt.close(fig)
    assert "$x_{T_x}$" in texts and "$x_3$" not in texts and "$x_2$" in texts
    assert 6.5 <= width <= 9.0


def test_ring_all_reduce_diagram_follows_the_rule():
    """After the reduce-scatter process i holds the whole sum of chunk i + 1 and nothing else whole;
    after the all-gather every copy is the whole sum (the chapter's eq-dist-ring steps)."""
    fig = diagrams.draw_ring_all_reduce()
    texts = [t.get_text() for t in _texts(fig)]
    plt.close(fig)
    cells = [t for t in texts if t.startswith("$") and ("a" in t or "b" in t or "c" in t)
             and "sends" not in t]
    panels = [cells[k * 9:(k + 1) * 9] for k in range(5)]  # 3 x 3 per panel, row by row
    whole = "$a{+}b{+}c$"
    assert panels[0] == ["$a$"] * 3 + ["$b$"] * 3 + ["$c$"] * 3
    assert [(k // 3, k % 3) for k, t in enumerate(panels[2]) if t == whole] == [(0, 1), (1, 2), (2, 0)]
    assert panels[4] == [whole] * 9
