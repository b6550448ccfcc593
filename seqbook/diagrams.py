"""Diagrams of the book's models, drawn from code so that they re-render with the book.

One public function per diagram; each returns a matplotlib Figure (managed by pyplot, so a notebook
shows it and ``plt.close(fig)`` frees it). The figures use the book's symbols and the names of the
``seqbook`` code they depict; the captions in the chapters say what to look at and cite the
equations, so no equation number is written into a drawing (it would go stale).

Drawing conventions, the same in every figure:

* one palette, :data:`PALETTE`: inputs green, states blue, outputs red, learned linear maps grey,
  gates and activations yellow/orange, attention lavender, normalisation teal, learned parameters
  that are not weight matrices (a learned query, inducing points) gold;
* circles are element-wise operations (``+``, ``⊙``, ``1−``), a dot marks where a line branches;
* coordinates are inches: every figure has one axes that fills it, with data units of one inch,
  so a font size in points means the same at every figure's natural size (text is >= 10 pt).

The module needs nothing but matplotlib.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import matplotlib.pyplot as plt
from matplotlib.figure import Figure
from matplotlib.patches import Circle, FancyArrowPatch, FancyBboxPatch
from matplotlib.path import Path

__all__ = [
    "PALETTE",
    "draw_elman_rnn",
    "draw_gru_cell",
    "draw_lstm_cell",
    "draw_bahdanau",
    "draw_scaled_dot_product_attention",
    "draw_multi_head_attention",
    "draw_transformer",
    "draw_gpt",
    "draw_hopfield_layers",
    "draw_vsa_residual_block",
    "draw_vsa_attention_blocks",
    "draw_mamba_block",
    "draw_tensor_parallel_mlp",
    "draw_ring_all_reduce",
]

#: The colours of every diagram (inputs, states and outputs as in chapter 2's figure of the
#: four wirings of a recurrent cell).
PALETTE = {
    "input": "#cde8c7",      # data entering the model (tokens, x_t)
    "state": "#c9dcf2",      # hidden states, annotations, the residual stream's blocks
    "output": "#f6d0c7",     # what the model returns
    "linear": "#e4e4e4",     # learned linear maps (W, U, projections)
    "gate": "#fbe6a2",       # sigmoid gates
    "act": "#f8cfa3",        # tanh and other activations, feed-forward networks
    "attention": "#ddd3f1",  # attention, softmax, similarity
    "norm": "#cdeae4",       # LayerNorm
    "param": "#f3dc8a",      # learned vectors used as data: a learned query, inducing points
    "op": "#ffffff",         # element-wise operations (circles)
    "edge": "#4d4d4d",       # outlines
    "line": "#333333",       # arrows
    "note": "#555555",       # annotations (shapes, masks)
}

FONT = 11    # labels inside boxes
SMALL = 10   # annotations: shapes, masks, arrow labels (never smaller)


# ---------------------------------------------------------------------------------------------
# Shared helpers: a canvas in inches, boxes, operation circles, arrows, text.
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Node:
    """A drawn box or circle: centre (x, y), width w, height h (inches). Edge points for arrows."""

    x: float
    y: float
    w: float
    h: float

    @property
    def left(self) -> tuple[float, float]:
        return (self.x - self.w / 2, self.y)

    @property
    def right(self) -> tuple[float, float]:
        return (self.x + self.w / 2, self.y)

    @property
    def top(self) -> tuple[float, float]:
        return (self.x, self.y + self.h / 2)

    @property
    def bottom(self) -> tuple[float, float]:
        return (self.x, self.y - self.h / 2)

    def at(self, side: str, offset: float) -> tuple[float, float]:
        """A point on ``side`` ("left", "right", "top", "bottom") moved by ``offset`` along it."""
        px, py = getattr(self, side)
        return (px + offset, py) if side in ("top", "bottom") else (px, py + offset)


def _canvas(width: float, height: float) -> tuple[Figure, plt.Axes]:
    """A figure of ``width`` x ``height`` inches with one axes whose data units are inches."""
    fig = plt.figure(figsize=(width, height))
    ax = fig.add_axes((0, 0, 1, 1))
    ax.set_xlim(0, width)
    ax.set_ylim(0, height)
    ax.set_aspect("equal")
    ax.axis("off")
    return fig, ax


def _box(ax, x: float, y: float, text: str, color: str, w: float = 0.8, h: float = 0.42,
         size: int = FONT, dashed: bool = False, stack: int = 0) -> _Node:
    """A rounded box centred at (x, y) with ``text`` in it; ``stack`` shadow copies behind it
    (drawn up and to the right) stand for parallel copies, e.g. attention heads."""
    for k in range(stack, -1, -1):
        dx = dy = 0.07 * k
        ax.add_patch(FancyBboxPatch((x - w / 2 + dx, y - h / 2 + dy), w, h,
                                    boxstyle="round,pad=0,rounding_size=0.06", fc=color,
                                    ec=PALETTE["edge"], lw=1.0, ls="--" if dashed else "-",
                                    zorder=2 - 0.01 * k))
    if text:
        ax.text(x, y, text, ha="center", va="center", fontsize=size, zorder=3, linespacing=1.3)
    return _Node(x, y, w, h)


def _op(ax, x: float, y: float, symbol: str, r: float = 0.15, size: int = 12) -> _Node:
    """An element-wise operation: a circle with ``symbol`` ("+", "⊙", "1−", ...)."""
    ax.add_patch(Circle((x, y), r, fc=PALETTE["op"], ec=PALETTE["edge"], lw=1.0, zorder=2))
    ax.text(x, y, symbol, ha="center", va="center", fontsize=size, zorder=3)
    return _Node(x, y, 2 * r, 2 * r)


def _arrow(ax, *points: tuple[float, float], head: bool = True, dashed: bool = False,
           color: str | None = None) -> None:
    """A line through ``points`` (right angles are the caller's business), with an arrowhead at
    the last point unless ``head`` is False."""
    path = Path(list(points), [Path.MOVETO] + [Path.LINETO] * (len(points) - 1))
    ax.add_patch(FancyArrowPatch(path=path, arrowstyle="-|>" if head else "-", mutation_scale=11,
                                 lw=1.1, color=color or PALETTE["line"], ls="--" if dashed else "-",
                                 shrinkA=0, shrinkB=0, joinstyle="miter", zorder=1))


def _dot(ax, x: float, y: float) -> None:
    """A junction: the line branches here."""
    ax.add_patch(Circle((x, y), 0.035, fc=PALETTE["line"], ec="none", zorder=2))


def _text(ax, x: float, y: float, text: str, size: int = SMALL, ha: str = "center", va: str = "center",
          color: str | None = None) -> None:
    """An annotation (a symbol on a line, a shape, a mask)."""
    ax.text(x, y, text, ha=ha, va=va, fontsize=size, color=color or "black", zorder=3, linespacing=1.3)


# ---------------------------------------------------------------------------------------------
# Chapter 2: the Elman network.
# ---------------------------------------------------------------------------------------------


def draw_elman_rnn(steps: int = 3) -> Figure:
    r"""The Elman RNN of eqs. (2.1)-(2.2), folded (left) and unrolled over time (right).

    Left, the network as one cell with a loop: the input :math:`x_t` enters through :math:`W_{ih}`,
    the state :math:`h_t` feeds itself through :math:`W_{hh}` and is read out through :math:`W_y` as
    :math:`y_t`. Right, the same network unrolled over ``steps`` time steps from :math:`h_0`, with
    the same three matrices at every step (biases and non-linearities are left out of the picture).
    ``steps`` is 2, 3 or 4.
    """
    if steps not in (2, 3, 4):
        raise ValueError(f"steps must be 2, 3 or 4, got {steps!r}")
    dx = 1.3 if steps < 4 else 1.2       # column spacing; the figure stays within 9 inches
    fig, ax = _canvas(max(6.6, 3.85 + dx * steps), 3.0)
    yx, yh, yy = 0.4, 1.45, 2.5          # rows: input, state, output
    bw = 0.62

    # Folded: one cell with a loop.
    x_in = _box(ax, 0.75, yx, r"$x_t$", PALETTE["input"], w=bw)
    h = _box(ax, 0.75, yh, r"$h_t$", PALETTE["state"], w=bw)
    y_out = _box(ax, 0.75, yy, r"$y_t$", PALETTE["output"], w=bw)
    _arrow(ax, x_in.top, h.bottom)
    _arrow(ax, h.top, y_out.bottom)
    _text(ax, 0.55, (yx + yh) / 2, r"$W_{ih}$", ha="right")
    _text(ax, 0.55, (yh + yy) / 2, r"$W_y$", ha="right")
    loop_x, loop_y = 1.42, yh + 0.5
    _arrow(ax, h.at("right", -0.08), (loop_x, yh - 0.08), (loop_x, loop_y), (h.x + 0.2, loop_y),
           h.at("top", 0.2))
    _text(ax, loop_x + 0.1, yh + 0.22, r"$W_{hh}$", ha="left")
    _text(ax, 2.25, yh, "=", size=18)

    # Unrolled over time.
    h_prev = _box(ax, 3.0, yh, r"$h_0$", PALETTE["state"], w=bw)
    for t in range(1, steps + 1):
        cx = 3.0 + dx * t
        x_in = _box(ax, cx, yx, rf"$x_{t}$", PALETTE["input"], w=bw)
        h = _box(ax, cx, yh, rf"$h_{t}$", PALETTE["state"], w=bw)
        y_out = _box(ax, cx, yy, rf"$y_{t}$", PALETTE["output"], w=bw)
        _arrow(ax, x_in.top, h.bottom)
        _arrow(ax, h.top, y_out.bottom)
        _arrow(ax, h_prev.right, h.left)
        _text(ax, cx - 0.2, (yx + yh) / 2, r"$W_{ih}$", ha="right")
        _text(ax, cx - 0.2, (yh + yy) / 2, r"$W_y$", ha="right")
        _text(ax, cx - dx / 2, yh + 0.2, r"$W_{hh}$")
        h_prev = h
    _arrow(ax, h_prev.right, (h_prev.right[0] + 0.4, yh), dashed=True)
    return fig


# ---------------------------------------------------------------------------------------------
# Chapter 3: the GRU and the LSTM cell.
# ---------------------------------------------------------------------------------------------


def _carried_state(ax, y: float, x_mul: float, x_add: float, old: str, new: str):
    """The line a gated cell carries its state along: ``old -> ⊙ -> + -> new``; returns the ⊙ and +."""
    _text(ax, 0.4, y, old, size=FONT)
    mul = _op(ax, x_mul, y, "⊙")
    add = _op(ax, x_add, y, "+")
    _arrow(ax, (0.75, y), mul.left)
    _arrow(ax, mul.right, add.left)
    _arrow(ax, add.right, (7.05, y))
    _text(ax, 7.3, y, new, size=FONT)
    return mul, add


def draw_gru_cell() -> Figure:
    r"""One step of the GRU, eqs. (3.1)-(3.4), as ``seqbook.rnn.GRUCell.step`` computes it.

    The old state :math:`h_{t-1}` runs along the top. The update gate :math:`z_t` and the reset
    gate :math:`r_t` are sigmoids of the input :math:`x_t` and :math:`h_{t-1}` (the line along
    the bottom carries both). The reset gate multiplies :math:`W_{hn} h_{t-1}` (after the matrix, as
    in PyTorch), the tanh turns it plus :math:`W_{in} x_t` into the candidate :math:`n_t`, and the new
    state mixes :math:`z_t \odot h_{t-1}` with :math:`(1 - z_t) \odot n_t`. Biases are left out.
    """
    fig, ax = _canvas(7.6, 4.0)
    y_top, y_mix, y_gate, y_lin, y_bus = 3.55, 2.6, 1.6, 0.95, 0.4
    x_bus, x_z, x_r, x_rh, x_n = 0.9, 1.9, 3.0, 4.25, 6.0

    # The old state along the top, and down into the bus that feeds the gates.
    m_keep, add = _carried_state(ax, y_top, x_z, x_n, r"$h_{t-1}$", r"$h_t$")
    _dot(ax, x_bus, y_top)
    _arrow(ax, (x_bus, y_top), (x_bus, y_bus), (x_n, y_bus), head=False)
    _text(ax, 1.3, 0.1, r"$x_t$", size=FONT)
    _arrow(ax, (1.3, 0.24), (1.3, y_bus))

    # Gates, the reset-gated recurrent term and the candidate.
    gate_z = _box(ax, x_z, y_gate, r"$\sigma$", PALETTE["gate"], w=0.6)
    gate_r = _box(ax, x_r, y_gate, r"$\sigma$", PALETTE["gate"], w=0.6)
    w_hn = _box(ax, x_rh, y_lin, r"$W_{hn} h_{t-1}$", PALETTE["linear"], w=1.1, h=0.4)
    w_in = _box(ax, x_n, y_lin, r"$W_{in} x_t$", PALETTE["linear"], w=0.95, h=0.4)
    cand = _box(ax, x_n, y_gate, "tanh", PALETTE["act"], w=0.7)
    m_reset = _op(ax, x_rh, y_gate, "⊙")
    for node in (gate_z, gate_r, w_hn, w_in):
        _dot(ax, node.x, y_bus)
        _arrow(ax, (node.x, y_bus), node.bottom)
    _arrow(ax, gate_r.right, m_reset.left)
    _text(ax, (gate_r.right[0] + m_reset.left[0]) / 2, y_gate + 0.2, r"$r_t$")
    _arrow(ax, w_hn.top, m_reset.bottom)
    _arrow(ax, m_reset.right, cand.left)
    _arrow(ax, w_in.top, cand.bottom)

    # The mix: z_t keeps the old state, 1 - z_t writes the candidate.
    m_write = _op(ax, x_n, y_mix, "⊙")
    one_minus = _op(ax, 3.6, y_mix, "1−", r=0.17, size=10)
    _arrow(ax, gate_z.top, m_keep.bottom)
    _text(ax, x_z - 0.12, (y_gate + y_mix) / 2 - 0.1, r"$z_t$", ha="right")
    _dot(ax, x_z, y_mix)
    _arrow(ax, (x_z, y_mix), one_minus.left)
    _arrow(ax, one_minus.right, m_write.left)
    _text(ax, 4.8, y_mix + 0.2, r"$1 - z_t$")
    _arrow(ax, cand.top, m_write.bottom)
    _text(ax, x_n + 0.12, (y_gate + y_mix) / 2 + 0.02, r"$n_t$", ha="left")
    _arrow(ax, m_write.top, add.bottom)
    return fig


def draw_lstm_cell() -> Figure:
    r"""One step of the LSTM, eq. (3.6), as ``seqbook.rnn.LSTMCell.step`` computes it.

    The memory cell :math:`c_{t-1}` runs along the top: the forget gate :math:`f_t` scales it and
    the input gate :math:`i_t` adds the candidate :math:`g_t`. The output gate :math:`o_t` shows
    :math:`\tanh(c_t)` as the new state :math:`h_t`. All four are computed from :math:`x_t` and
    :math:`h_{t-1}` (the line along the bottom), in PyTorch's order (i, f, g, o) of the stacked
    weights. Biases are left out.
    """
    fig, ax = _canvas(7.6, 3.6)
    y_top, y_mix, y_gate, y_bus = 3.2, 2.3, 1.35, 0.4
    x_f, x_i, x_g, x_o, x_c = 1.9, 3.1, 4.3, 5.5, 6.4

    # The memory cell along the top.
    m_forget, add = _carried_state(ax, y_top, x_f, x_g, r"$c_{t-1}$", r"$c_t$")

    # The inputs: h_{t-1} from the left, x_t from below, one bus to the four gates.
    _text(ax, 0.4, y_bus, r"$h_{t-1}$", size=FONT)
    _arrow(ax, (0.75, y_bus), (x_o, y_bus), head=False)
    _text(ax, 1.3, 0.1, r"$x_t$", size=FONT)
    _arrow(ax, (1.3, 0.24), (1.3, y_bus))
    gates = {}
    for name, x, label, color in (("f", x_f, r"$\sigma$", "gate"), ("i", x_i, r"$\sigma$", "gate"),
                                  ("g", x_g, "tanh", "act"), ("o", x_o, r"$\sigma$", "gate")):
        gates[name] = _box(ax, x, y_gate, label, PALETTE[color], w=0.7 if name == "g" else 0.6)
        if name != "o":
            _dot(ax, x, y_bus)
        _arrow(ax, (x, y_bus), gates[name].bottom)

    # Forget, write, show.
    _arrow(ax, gates["f"].top, m_forget.bottom)
    _text(ax, x_f - 0.12, (y_gate + y_top) / 2, r"$f_t$", ha="right")
    m_write = _op(ax, x_g, y_mix, "⊙")
    _arrow(ax, gates["i"].top, (x_i, y_mix), m_write.left)
    _text(ax, x_i - 0.12, (y_gate + y_mix) / 2 + 0.05, r"$i_t$", ha="right")
    _arrow(ax, gates["g"].top, m_write.bottom)
    _text(ax, x_g + 0.12, (y_gate + y_mix) / 2 + 0.05, r"$g_t$", ha="left")
    _arrow(ax, m_write.top, add.bottom)
    squash = _box(ax, x_c, y_mix, "tanh", PALETTE["act"], w=0.7)
    m_show = _op(ax, x_c, y_gate, "⊙")
    _dot(ax, x_c, y_top)
    _arrow(ax, (x_c, y_top), squash.top)
    _arrow(ax, squash.bottom, m_show.top)
    _arrow(ax, gates["o"].right, m_show.left)
    _text(ax, (gates["o"].right[0] + m_show.left[0]) / 2, y_gate + 0.2, r"$o_t$")
    _arrow(ax, m_show.right, (7.05, y_gate))
    _text(ax, 7.3, y_gate, r"$h_t$", size=FONT)
    return fig


# ---------------------------------------------------------------------------------------------
# Chapter 4: the encoder-decoder with additive attention.
# ---------------------------------------------------------------------------------------------


def draw_bahdanau(source_length: int = 4) -> Figure:
    r"""The encoder-decoder of Bahdanau et al. at decoder step i, eqs. (4.4)-(4.9), as in
    ``seqbook.seq2seq.Seq2Seq(attention=True)``.

    Bottom left, the bidirectional GRU encoder over ``source_length`` characters: each annotation
    :math:`h_j` joins the forward state (upper arrows, left to right) and the backward state (lower
    arrows, right to left). The weights :math:`\alpha_{ij}` come from the additive scores
    :math:`e_{ij}` of the previous decoder state :math:`s_{i-1}` against every :math:`h_j`, and the
    context :math:`c_i` is their weighted sum. Right, one decoder step: the GRU reads
    :math:`[E y_{i-1}; c_i]` and :math:`s_{i-1}`, and the read-out sees :math:`s_i`, :math:`c_i` and
    :math:`E y_{i-1}`. ``source_length`` is 3 or 4.
    """
    if source_length not in (3, 4):
        raise ValueError(f"source_length must be 3 or 4, got {source_length!r}")
    dx = 1.0
    x_enc = [0.65 + dx * j for j in range(source_length)]
    x_dec = x_enc[-1] + 1.95
    width = x_dec + 3.1
    fig, ax = _canvas(width, 3.9)
    y_src, y_ann, y_sum = 0.35, 1.4, 3.45
    off = 0.18                                   # forward half above, backward half below

    # Encoder: characters, annotations with forward (upper) and backward (lower) recurrences.
    names = [str(j) for j in range(1, source_length)] + ["{T_x}"]
    annotations = []
    for name, x in zip(names, x_enc, strict=True):
        src = _box(ax, x, y_src, rf"$x_{name}$", PALETTE["input"], w=0.62, h=0.38)
        ann = _box(ax, x, y_ann, "", PALETTE["state"], w=0.62, h=0.78)
        ax.plot([x - 0.31, x + 0.31], [y_ann, y_ann], color=PALETTE["edge"], lw=0.6, zorder=2.5)
        _text(ax, x, y_ann + off, rf"$\overrightarrow{{h}}_{name}$", size=FONT)
        _text(ax, x, y_ann - off, rf"$\overleftarrow{{h}}_{name}$", size=FONT)
        _arrow(ax, src.top, ann.bottom)
        if annotations:
            prev = annotations[-1]
            _arrow(ax, prev.at("right", off), ann.at("left", off))
            _arrow(ax, ann.at("left", -off), prev.at("right", -off))
        annotations.append(ann)

    # Attention: the weights alpha_ij on the lines into the weighted sum.
    sigma = _op(ax, (x_enc[0] + x_enc[-1]) / 2, y_sum, "Σ", r=0.2, size=13)
    for name, ann in zip(names, annotations, strict=True):
        (x0, y0), (x1, y1) = ann.top, sigma.bottom
        _arrow(ax, (x0, y0), (x1 + 0.05 * (x0 - x1), y1 - 0.02))
        frac = 0.3
        lx, ly = x0 + frac * (x1 - x0), y0 + frac * (y1 - y0)
        side = -1 if x0 <= x1 else 1
        _text(ax, lx + side * 0.12, ly, rf"$\alpha_{{i{name}}}$", ha="right" if side < 0 else "left")

    # Decoder step i.
    s_prev = _box(ax, x_dec, y_ann, r"$s_{i-1}$", PALETTE["state"], w=0.75, h=0.5)
    s_new = _box(ax, x_dec + 1.9, y_ann, r"$s_i$", PALETTE["state"], w=0.75, h=0.5)
    y_in = _box(ax, s_new.x, y_src, r"$y_{i-1}$", PALETTE["input"], w=0.75, h=0.38)
    out = _box(ax, s_new.x, y_sum, r"$p(y_i \mid y_{<i}, x)$", PALETTE["output"], w=1.5, h=0.46)
    _arrow(ax, s_prev.right, s_new.left)
    _text(ax, (s_prev.right[0] + s_new.left[0]) / 2, y_ann + 0.18, "GRU")
    _arrow(ax, y_in.top, s_new.bottom)
    _text(ax, s_new.x + 0.1, (y_src + y_ann) / 2 - 0.05, r"$E$", ha="left")
    _arrow(ax, s_new.at("top", 0.12), out.at("bottom", 0.12))
    _text(ax, s_new.x + 0.22, (y_ann + y_sum) / 2 + 0.15, r"$W_o$", ha="left")
    x_skip = out.right[0] + 0.2
    _arrow(ax, y_in.right, (x_skip, y_src), (x_skip, y_sum), out.right)
    # The context c_i: into the read-out, and into the GRU step.
    _arrow(ax, sigma.right, out.left)
    _text(ax, sigma.right[0] + 0.35, y_sum + 0.18, r"$c_i$", size=FONT)
    x_c = out.left[0] - 0.2
    _dot(ax, x_c, y_sum)
    _arrow(ax, (x_c, y_sum), (x_c, 2.05), (s_new.x - 0.2, 2.05), s_new.at("top", -0.2))
    # The scores: s_{i-1} asks, every h_j answers (dashed: they make the weights).
    score = _box(ax, x_dec - 0.4, 2.6,
                 r"$e_{ij} = v_a^\top \tanh(W_a s_{i-1} + U_a h_j + b_a)$" "\n"
                 r"$\alpha_{ij} = \mathrm{softmax}_j(e_{ij})$",
                 PALETTE["attention"], w=2.6, h=0.68, size=SMALL)
    _arrow(ax, s_prev.top, (s_prev.x, score.bottom[1]), dashed=True)
    # every annotation enters the score (drawn from the last one): the keys
    x_key = score.left[0] + 0.3
    _arrow(ax, annotations[-1].at("right", 0.25), (x_key, annotations[-1].at("right", 0.25)[1]),
           (x_key, score.bottom[1]), dashed=True)
    _text(ax, x_key + 0.08, (y_ann + score.bottom[1]) / 2 + 0.1, r"$h_j$", ha="left")
    # the weights go out to the lines they label: end on the line from h_{T_x} into the sum
    (x0, y0), (x1, y1) = annotations[-1].top, sigma.bottom
    x_line = x0 + (score.y - y0) / (y1 - y0) * (x1 - x0)
    _arrow(ax, score.left, (x_line + 0.08, score.y), dashed=True)
    return fig


# ---------------------------------------------------------------------------------------------
# Chapter 5: scaled dot-product attention and multi-head attention.
# ---------------------------------------------------------------------------------------------


def draw_scaled_dot_product_attention() -> Figure:
    r"""Scaled dot-product attention, eq. (5.2), as ``seqbook.attention.scaled_dot_product_attention``.

    The queries :math:`Q` and keys :math:`K` meet in :math:`QK^\top`, the scores are divided by
    :math:`\sqrt{d_k}`, an optional boolean mask (True = may attend) blocks some pairs, and a softmax
    over the :math:`S` keys of each row gives the weights, which average the values :math:`V`. The
    function returns the output and the weights. Shapes as in its docstring: ``...`` are batch
    dimensions (``(B, h)`` inside multi-head attention).
    """
    fig, ax = _canvas(8.5, 2.8)
    y_q, y_k, y_v, y_c = 2.0, 1.2, 0.38, 1.6
    inputs = {name: _box(ax, 0.65, y, f"${name}$\n{shape}", PALETTE["input"], w=1.1, h=0.62, size=SMALL)
              for name, y, shape in (("Q", y_q, r"$(\ldots, L, d_k)$"), ("K", y_k, r"$(\ldots, S, d_k)$"),
                                     ("V", y_v, r"$(\ldots, S, d_v)$"))}
    chain = [_box(ax, 2.05 + 1.15 * i, y_c, text, PALETTE["attention"], w=0.92, h=0.5, dashed=(i == 2))
             for i, text in enumerate((r"$QK^\top$", r"$\div\sqrt{d_k}$", "mask", "softmax"))]
    _arrow(ax, inputs["Q"].right, chain[0].at("left", 0.12))
    _arrow(ax, inputs["K"].right, chain[0].at("left", -0.12))
    for a, b in zip(chain[:-1], chain[1:], strict=True):
        _arrow(ax, a.right, b.left)
    _text(ax, (chain[0].x + chain[2].x) / 2, y_c + 0.5, r"scores $(\ldots, L, S)$")
    _text(ax, chain[2].x, y_c - 0.45, "optional", color=PALETTE["note"])
    mix = _box(ax, chain[-1].x + 1.35, y_c, r"$\cdot\, V$", PALETTE["attention"], w=0.7, h=0.5)
    _arrow(ax, chain[-1].right, mix.left)
    _arrow(ax, inputs["V"].right, (mix.x, y_v), mix.bottom)
    out = _box(ax, 7.85, y_c, "output\n" r"$(\ldots, L, d_v)$", PALETTE["output"], w=1.15, h=0.62, size=SMALL)
    _arrow(ax, mix.right, out.left)
    weights = _box(ax, 7.85, 2.4, "weights\n" r"$(\ldots, L, S)$", PALETTE["output"], w=1.15, h=0.62,
                   size=SMALL)
    x_branch = (chain[-1].right[0] + mix.left[0]) / 2
    _dot(ax, x_branch, y_c)
    _arrow(ax, (x_branch, y_c), (x_branch, weights.y), weights.left)
    return fig


def draw_multi_head_attention() -> Figure:
    r"""Multi-head attention, eqs. (5.10)-(5.11), as ``seqbook.attention.MultiHeadAttention.forward``.

    Bottom to top: the queries, keys and values are projected by :math:`W^Q, W^K, W^V` (each one
    :math:`d_\text{model} \times d_\text{model}` layer holding the :math:`h` matrices :math:`W_i^Q`
    side by side), split into :math:`h` heads of :math:`d_k = d_\text{model}/h` dimensions, attended
    in one batched call of scaled dot-product attention, concatenated and mixed by :math:`W^O`. The
    column on the right gives the tensor shapes at each stage.
    """
    fig, ax = _canvas(7.0, 4.6)
    x_cols = {"V": 0.8, "K": 1.95, "Q": 3.1}
    y_in, y_lin, y_att, y_cat, y_out = 0.35, 1.2, 2.45, 3.45, 4.25
    x_mid, x_note = 1.95, 4.1
    proj = {}
    for name, x in x_cols.items():
        src = _box(ax, x, y_in, f"${name}$", PALETTE["input"], w=0.55, h=0.4)
        proj[name] = _box(ax, x, y_lin, f"$W^{name}$", PALETTE["linear"], w=0.65, h=0.42)
        _arrow(ax, src.top, proj[name].bottom)
    att = _box(ax, x_mid, y_att, "scaled dot-product attention\n$h$ heads in one call",
               PALETTE["attention"], w=3.2, h=0.72, stack=2)
    for node in proj.values():
        _arrow(ax, node.top, (node.x, att.bottom[1]))
    cat = _box(ax, x_mid, y_cat, r"$\mathrm{Concat}(\mathrm{head}_1, \ldots, \mathrm{head}_h)\, W^O$",
               PALETTE["linear"], w=3.2, h=0.46)
    _arrow(ax, (x_mid, att.top[1] + 0.14), cat.bottom)
    out = _box(ax, x_mid, y_out, "output", PALETTE["output"], w=1.0, h=0.4)
    _arrow(ax, cat.top, out.bottom)

    notes = ((y_in, r"$Q$: $(B, L, d_\mathrm{model})$" "\n" r"$K, V$: $(B, S, d_\mathrm{model})$"),
             ((y_lin + y_att) / 2 - 0.08, r"split into $h$ heads, $d_k = d_\mathrm{model}/h$:" "\n"
              r"$Q$: $(B, h, L, d_k)$" "\n" r"$K, V$: $(B, h, S, d_k)$"),
             ((y_att + y_cat) / 2 + 0.07, r"heads: $(B, h, L, d_k)$"),
             (y_out, r"$(B, L, d_\mathrm{model})$"))
    for y, text in notes:
        _text(ax, x_note, y, text, ha="left", color=PALETTE["note"])
    return fig


# ---------------------------------------------------------------------------------------------
# Chapter 6: the pre-LN transformer and the GPT block.
# ---------------------------------------------------------------------------------------------

def _pre_ln_sublayers(ax, x_main: float, y: float, sublayers, side: int = 1) -> tuple[float, list[_Node]]:
    """Pre-LN sublayers on a vertical residual stream at ``x_main``, from height ``y`` up, eq. (6.6):
    each branches off the stream, passes LayerNorm and the sublayer, and is added back (``+``).
    ``sublayers`` is a list of (text, colour); ``side`` +1 draws the branches to the right, -1 to
    the left. Returns the height where the stream leaves the last ``+``, and the sublayer boxes."""
    boxes = []
    for text, color in sublayers:
        _dot(ax, x_main, y)
        norm = _box(ax, x_main + side * 0.72, y, "LayerNorm", PALETTE["norm"], w=0.86, h=0.36, size=SMALL)
        sub = _box(ax, x_main + side * 2.15, y, text, color, w=1.62, h=0.5, size=SMALL)
        _arrow(ax, (x_main, y), norm.left if side > 0 else norm.right)
        _arrow(ax, norm.right if side > 0 else norm.left, sub.left if side > 0 else sub.right)
        add = _op(ax, x_main, y + 0.5, "+", r=0.12)
        _arrow(ax, sub.top, (sub.x, add.y), add.right if side > 0 else add.left)
        _arrow(ax, (x_main, y), add.bottom)
        boxes.append(sub)
        y = add.top[1]
        _arrow(ax, (x_main, y), (x_main, y + 0.18), head=False)
        y += 0.18
    return y, boxes


def _repeat_frame(ax, x0: float, x1: float, y0: float, y1: float, label: str, label_x: float) -> None:
    """A dashed frame around a repeated stack of layers, with its count (``N×``) beside it."""
    ax.add_patch(FancyBboxPatch((x0, y0), x1 - x0, y1 - y0, boxstyle="round,pad=0,rounding_size=0.1",
                                fc="none", ec=PALETTE["note"], lw=0.9, ls=(0, (4, 3)), zorder=0.5))
    _text(ax, label_x, (y0 + y1) / 2, label, size=FONT)


def _embed_inputs(ax, x: float, ids_text: str, embed_text: str, extra_text: str, side: int) -> float:
    """Token ids -> embedding -> + (positional code from the ``side``); returns the height above +."""
    ids = _box(ax, x, 0.3, ids_text, PALETTE["input"], w=2.1, h=0.4, size=SMALL)
    emb = _box(ax, x, 0.95, embed_text, PALETTE["linear"], w=2.1, h=0.42, size=SMALL)
    add = _op(ax, x, 1.6, "+", r=0.12)
    extra = _box(ax, x + side * 1.25, add.y, extra_text, PALETTE["linear"], w=1.2, h=0.42, size=SMALL)
    _arrow(ax, ids.top, emb.bottom)
    _arrow(ax, emb.top, add.bottom)
    _arrow(ax, extra.left if side > 0 else extra.right, add.right if side > 0 else add.left)
    _arrow(ax, add.top, (x, add.top[1] + 0.55), head=False)
    return add.top[1] + 0.55


def draw_transformer() -> Figure:
    r"""The encoder-decoder transformer in pre-LN form, as ``seqbook.transformer.Seq2SeqTransformer``.

    Left, the encoder: source ids, embedding times :math:`\sqrt{d_\text{model}}`, plus the
    sinusoidal code of eqs. (6.1)-(6.2), then :math:`N` ``EncoderLayer`` s, each two pre-LN
    sublayers (eq. (6.6)): self-attention under the source padding mask, and the feed-forward
    network. A final LayerNorm gives the memory. Right, the decoder: the target shifted right,
    then :math:`N` ``DecoderLayer`` s with causal self-attention, cross-attention (queries from
    the decoder, keys and values from the memory) and the feed-forward network, a final LayerNorm
    and the linear layer to the logits. The vertical lines are the residual streams; they are
    never normalised until the final LayerNorm. Dropout is left out.
    """
    width, height = 8.8, 6.25
    fig, ax = _canvas(width, height)
    x_enc, x_dec = 1.15, width - 1.15
    ffn = ("feed-forward\nnetwork", PALETTE["act"])

    # Encoder.
    y0 = _embed_inputs(ax, x_enc, "source ids $(B, S)$", r"embedding $\times \sqrt{d_\mathrm{model}}$",
                       "positional\nencoding", side=1)
    y_enc, _ = _pre_ln_sublayers(ax, x_enc, y0, [("self-attention\n(padding mask)", PALETTE["attention"]),
                                                 ffn], side=1)
    _repeat_frame(ax, x_enc - 0.35, x_enc + 3.05, y0 - 0.32, y_enc - 0.05, r"$N\times$", x_enc - 0.7)
    enc_norm = _box(ax, x_enc, y_enc + 0.45, "LayerNorm", PALETTE["norm"], w=1.1, h=0.38, size=SMALL)
    _arrow(ax, (x_enc, y_enc), enc_norm.bottom)

    # Decoder.
    y0 = _embed_inputs(ax, x_dec, "target ids, shifted right", r"embedding $\times \sqrt{d_\mathrm{model}}$",
                       "positional\nencoding", side=-1)
    y_dec, (_, cross, _) = _pre_ln_sublayers(
        ax, x_dec, y0, [("masked self-attention\n(causal mask)", PALETTE["attention"]),
                        ("cross-attention\n($K, V$ = memory)", PALETTE["attention"]), ffn], side=-1)
    _repeat_frame(ax, x_dec - 3.05, x_dec + 0.35, y0 - 0.32, y_dec - 0.05, r"$N\times$", x_dec + 0.7)
    dec_norm = _box(ax, x_dec, y_dec + 0.45, "LayerNorm", PALETTE["norm"], w=1.1, h=0.38, size=SMALL)
    _arrow(ax, (x_dec, y_dec), dec_norm.bottom)
    logits = _box(ax, x_dec, dec_norm.y + 0.65, r"linear $\to$ logits", PALETTE["output"], w=1.6, h=0.4,
                  size=SMALL)
    _arrow(ax, dec_norm.top, logits.bottom)

    # The memory: from the encoder's final LayerNorm into every decoder layer's cross-attention.
    x_gap = (x_enc + 3.05 + x_dec - 3.05) / 2
    y_mem = enc_norm.top[1] + 0.3
    _arrow(ax, enc_norm.top, (x_enc, y_mem), (x_gap, y_mem), (x_gap, cross.y), cross.left)
    _text(ax, (x_enc + x_gap) / 2, y_mem + 0.18, r"memory $(B, S, d_\mathrm{model})$")
    return fig


def draw_gpt() -> Figure:
    r"""The decoder-only language model, as ``seqbook.gpt.GPT`` (names of ``GPTConfig``).

    Token ids, token embedding plus learned position embedding, then ``n_layer`` blocks, each a
    ``GPTBlock``, the pre-LN encoder layer with causal self-attention: the attention and a GELU
    feed-forward network, each added back to the residual stream (eq. (6.6)). A final LayerNorm
    (``ln_f``) and the output layer ``lm_head``, whose weight is the token embedding's (dashed:
    ``tie_weights``), give the logits. Shapes on the right; dropout is left out.
    """
    fig, ax = _canvas(7.8, 4.85)
    x = 2.0
    y0 = _embed_inputs(ax, x, "token ids $(B, T)$", "token embedding", "position\nembedding", side=1)
    y_top, _ = _pre_ln_sublayers(ax, x, y0, [("causal\nself-attention", PALETTE["attention"]),
                                             ("feed-forward\n(GELU)", PALETTE["act"])], side=1)
    _repeat_frame(ax, x - 0.35, x + 3.05, y0 - 0.32, y_top - 0.05, r"$n_\mathrm{layer}\times$", x - 0.85)
    y_out = y_top + 0.45
    norm = _box(ax, x, y_out, r"LayerNorm $\mathtt{ln\_f}$", PALETTE["norm"], w=1.5, h=0.38, size=SMALL)
    _arrow(ax, (x, y_top), norm.bottom)
    head = _box(ax, x + 2.0, y_out, r"$\mathtt{lm\_head}$", PALETTE["linear"], w=1.1, h=0.38, size=SMALL)
    logits = _box(ax, x + 3.55, y_out, "logits", PALETTE["output"], w=0.9, h=0.38, size=SMALL)
    _arrow(ax, norm.right, head.left)
    _arrow(ax, head.right, logits.left)
    # Tied weights: the output layer reuses the token embedding.
    x_tie, y_tie = x - 1.55, y_out + 0.45
    _arrow(ax, (x - 1.05, 0.95), (x_tie, 0.95), (x_tie, y_tie), (head.x, y_tie), head.top, dashed=True,
           head=False)
    _text(ax, x_tie - 0.08, (y0 + y_top) / 2, "tied", ha="right", color=PALETTE["note"])

    for y, text in ((0.3, r"$(B, T)$, $T \leq$ block_size"), (y0 - 0.55, r"$(B, T, n_\mathrm{embd})$")):
        _text(ax, x + 3.35, y, text, ha="left", color=PALETTE["note"])
    _text(ax, logits.right[0] + 0.12, y_out, r"$(B, T, \mathrm{vocab\_size})$", ha="left",
          color=PALETTE["note"])
    return fig


# ---------------------------------------------------------------------------------------------
# Chapter 7: Hopfield layers.
# ---------------------------------------------------------------------------------------------


def _hopfield_panel(ax, px: float, name: str, learned: str | None) -> None:
    """One Hopfield layer at horizontal offset ``px``: Q from R (or learned), K from Y (or learned),
    V = K W_V, Z = softmax(beta Q K^T) V. ``learned`` is None, "Q" or "K"."""
    x_r, x_y, x_mid = px + 0.62, px + 2.3, px + 1.05
    y_in, y_lin, y_score, y_mix, y_out = 0.38, 1.2, 1.95, 2.65, 3.35
    _text(ax, px + 1.45, 3.95, name, size=FONT)
    if learned == "Q":
        q = _box(ax, x_r, y_lin, "learned $Q$", PALETTE["param"], w=1.05, h=0.42, size=SMALL)
    else:
        r = _box(ax, x_r, y_in, "$R$\n$(B, L, d_r)$", PALETTE["input"], w=1.05, h=0.55, size=SMALL)
        q = _box(ax, x_r, y_lin, "$W_Q$", PALETTE["linear"], w=0.6, h=0.42)
        _arrow(ax, r.top, q.bottom)
    if learned == "K":
        k = _box(ax, x_y, y_lin, "learned $K$", PALETTE["param"], w=1.05, h=0.42, size=SMALL)
    else:
        y = _box(ax, x_y, y_in, "$Y$\n$(B, S, d_y)$", PALETTE["input"], w=1.05, h=0.55, size=SMALL)
        k = _box(ax, x_y, y_lin, "$W_K$", PALETTE["linear"], w=0.6, h=0.42)
        _arrow(ax, y.top, k.bottom)
    score = _box(ax, x_mid, y_score, r"softmax$(\beta\, Q K^\top)$", PALETTE["attention"], w=1.5, h=0.42,
                 size=SMALL)
    _arrow(ax, q.top, (q.x, score.bottom[1]))
    _text(ax, q.x - 0.1, (q.top[1] + score.bottom[1]) / 2, "$Q$", ha="right")
    _dot(ax, x_y, y_score)
    _arrow(ax, k.top, (x_y, y_score), score.right)
    _text(ax, x_y + 0.1, (k.top[1] + y_score) / 2, "$K$", ha="left")
    w_v = _box(ax, x_y, y_mix, "$W_V$", PALETTE["linear"], w=0.6, h=0.42)
    _arrow(ax, (x_y, y_score), w_v.bottom)
    mix = _box(ax, x_mid, y_mix, r"$\cdot\, V$", PALETTE["attention"], w=0.7, h=0.42)
    _arrow(ax, score.at("top", 0.0), (score.x, mix.bottom[1]))
    _arrow(ax, w_v.left, mix.right)
    _text(ax, (w_v.left[0] + mix.right[0]) / 2, y_mix + 0.17, "$V$")
    out = _box(ax, x_mid, y_out, "$Z$", PALETTE["output"], w=0.6, h=0.4)
    _arrow(ax, mix.top, out.bottom)


def draw_hopfield_layers() -> Figure:
    r"""The three Hopfield layers of ``seqbook.hopfield``, eqs. (7.10)-(7.11), side by side.

    ``Hopfield(R, Y)``: the state patterns :math:`R` give the queries :math:`Q = R W_Q`, the stored
    patterns :math:`Y` the keys :math:`K = Y W_K`, and the values are tied to the keys,
    :math:`V = K W_V`; the output is :math:`Z = \mathrm{softmax}(\beta Q K^\top) V`.
    ``HopfieldPooling(Y)`` replaces the queries by a learned one (gold), ``HopfieldLayer(R)`` the
    keys by learned stored patterns. Everything else is the same computation.
    """
    fig, ax = _canvas(9.0, 4.2)
    for px, name, learned in ((0.0, r"$\mathtt{Hopfield}(R, Y)$", None),
                              (3.0, r"$\mathtt{HopfieldPooling}(Y)$", "Q"),
                              (6.0, r"$\mathtt{HopfieldLayer}(R)$", "K")):
        _hopfield_panel(ax, px, name, learned)
    for x in (3.0, 6.0):
        ax.plot([x, x], [0.2, 4.0], color=PALETTE["note"], lw=0.6, ls=":", zorder=0)
    return fig


# ---------------------------------------------------------------------------------------------
# Chapter 8: residual and attention blocks of vector symbols (FHRR).
# ---------------------------------------------------------------------------------------------

_PHASOR_LAYER = r"$\mathrm{angle}(e^{i\pi\mathbf{x}}\,\mathbf{W}_p + \mathbf{b})\,/\,\pi$"


def draw_vsa_residual_block() -> Figure:
    r"""The FHRR residual block, eqs. (8.8)-(8.9), as ``seqbook.vsa.ResidualBlock``.

    The input symbol :math:`\mathbf{x}` (angles in [-1, 1]) passes two generalized-bundling layers
    (``PhasorLinear``, :math:`n \to 2n \to n`), and the result is *bound* to :math:`\mathbf{x}`: the
    skip connection is binding, not addition, so the output stays a symbol.
    """
    fig, ax = _canvas(7.0, 2.1)
    y = 0.85
    x_in = _box(ax, 0.45, y, r"$\mathbf{x}$", PALETTE["input"], w=0.55)
    fc1 = _box(ax, 2.0, y, r"$\mathrm{FC}_1$: $n \to 2n$", PALETTE["linear"], w=1.35)
    fc2 = _box(ax, 3.85, y, r"$\mathrm{FC}_2$: $2n \to n$", PALETTE["linear"], w=1.35)
    bind = _box(ax, 5.45, y, "bind", PALETTE["op"], w=0.7)
    out = _box(ax, 6.55, y, r"$\mathbf{y}$", PALETTE["output"], w=0.55)
    _arrow(ax, x_in.right, fc1.left)
    _arrow(ax, fc1.right, fc2.left)
    _arrow(ax, fc2.right, bind.left)
    _arrow(ax, bind.right, out.left)
    x_split = (x_in.right[0] + fc1.left[0]) / 2
    _dot(ax, x_split, y)
    _arrow(ax, (x_split, y), (x_split, 1.75), (bind.x, 1.75), bind.top)
    _text(ax, (x_split + bind.x) / 2, 1.92, r"$\mathbf{y} = \mathrm{bind}(\mathbf{x}, "
          r"\mathrm{FC}_2(\mathrm{FC}_1(\mathbf{x})))$")
    _text(ax, (fc1.x + fc2.x) / 2, 0.25, "each layer: " + _PHASOR_LAYER, color=PALETTE["note"])
    return fig


def _vsa_attention_row(ax, y: float, cross: bool, label: str) -> None:
    """One symbolic attention block on the row at height ``y``: self-attention (queries from the
    input) or cross-attention (queries are the inducing points P)."""
    dy = 0.6
    x_in = _box(ax, 0.5, y, r"$\mathbf{x}$" "\n" r"$(B, T, n)$", PALETTE["input"], w=0.9, h=0.55, size=SMALL)
    _text(ax, 0.05, y - 1.0, label, ha="left", size=FONT)
    x_fc, x_split = 1.9, 1.2
    projections = []
    for k, name in enumerate(("q", "k", "v")):
        yk = y + dy * (1 - k)
        if cross and name == "q":
            node = _box(ax, x_fc, yk, r"$\mathbf{P}$ (learned)", PALETTE["param"], w=1.05, h=0.4, size=SMALL)
        else:
            node = _box(ax, x_fc, yk, rf"$\mathrm{{FC}}_{name}$", PALETTE["linear"], w=0.75, h=0.4)
            if yk != y:
                _dot(ax, x_split, y)
            _arrow(ax, x_in.right if yk == y else (x_split, y), (x_split, yk), node.left)
        projections.append(node)
    att = _box(ax, 3.45, y, "VSA\nattention", PALETTE["attention"], w=1.15, h=1.62)
    for node, name in zip(projections, ("Q", "K", "V"), strict=True):
        _arrow(ax, node.right, (att.left[0], node.y))
        _text(ax, (node.right[0] + att.left[0]) / 2 + 0.05, node.y + 0.14, rf"$\mathbf{{{name}}}$")
    bind1 = _box(ax, 4.75, y, "bind", PALETTE["op"], w=0.65)
    _arrow(ax, att.right, bind1.left)
    _text(ax, (att.right[0] + bind1.left[0]) / 2, y + 0.15, r"$\mathbf{a}$")
    skip_from = projections[0] if cross else x_in
    y_skip = y + 1.0
    _arrow(ax, skip_from.top, (skip_from.x, y_skip), (bind1.x, y_skip), bind1.top)
    mlp = _box(ax, 6.1, y, r"$\mathrm{FC}_1, \mathrm{FC}_2$", PALETTE["linear"], w=1.1)
    bind2 = _box(ax, 7.35, y, "bind", PALETTE["op"], w=0.65)
    x_h = (bind1.right[0] + mlp.left[0]) / 2
    _arrow(ax, bind1.right, mlp.left)
    _text(ax, x_h - 0.1, y + 0.15, r"$\mathbf{h}$")
    _dot(ax, x_h + 0.08, y)
    _arrow(ax, (x_h + 0.08, y), (x_h + 0.08, y + 0.7), (bind2.x, y + 0.7), bind2.top)
    _arrow(ax, mlp.right, bind2.left)
    shape = r"$(B, \ast, n)$" if cross else r"$(B, T, n)$"
    out = _box(ax, 8.35, y, r"$\mathbf{y}$" "\n" + shape, PALETTE["output"], w=0.9, h=0.55, size=SMALL)
    _arrow(ax, bind2.right, out.left)
    if cross:
        _text(ax, 8.85, y - 0.5, r"$\ast = \mathtt{num\_queries}$", ha="right", color=PALETTE["note"])


def draw_vsa_attention_blocks() -> Figure:
    r"""The symbolic self- and cross-attention blocks, eqs. (8.11)-(8.12), as
    ``seqbook.vsa.SelfAttentionBlock`` (a) and ``seqbook.vsa.CrossAttentionBlock`` (b).

    (a) Three phasor layers map the input symbols to queries, keys and values; VSA attention
    (similarity scores weigh the value phasors, no softmax) gives :math:`\mathbf{a}`, which is
    bound to the input (first skip); a two-layer phasor MLP follows, bound again (second skip).
    (b) The same, but the queries are ``num_queries`` trainable inducing points :math:`\mathbf{P}`,
    and the first skip binds onto them, so the output has ``num_queries`` symbols whatever :math:`T`.
    """
    fig, ax = _canvas(8.9, 4.85)
    _vsa_attention_row(ax, 3.5, cross=False, label="(a) self-attention block")
    _vsa_attention_row(ax, 1.2, cross=True, label="(b) cross-attention block")
    return fig


# ---------------------------------------------------------------------------------------------
# Chapter 10: Mamba's block, a gated selective state-space model.
# ---------------------------------------------------------------------------------------------


def draw_mamba_block() -> Figure:
    r"""The mixer of a Mamba layer, as ``seqbook.ssm.MambaBlock.forward`` computes it.

    ``in_proj`` widens the input :math:`u` into two branches. Along the top, :math:`x` passes a
    causal depthwise convolution over time and a SiLU, and then the selective SSM, whose step
    :math:`\Delta_t` and matrices :math:`B_t, C_t` are computed from :math:`x_t` itself
    (``x_proj``, ``dt_proj``): the state :math:`h_t` of fixed size is the only thing carried from
    one token to the next. Along the bottom, :math:`z` passes a SiLU and gates the SSM's output
    element-wise; ``out_proj`` maps the product back to the width of :math:`u`.
    """
    fig, ax = _canvas(9.0, 3.5)
    y_top, y_mid, y_bot = 2.35, 1.4, 0.5
    y_c = (y_top + y_bot) / 2
    u = _box(ax, 0.5, y_c, "$u$", PALETTE["input"], w=0.5)
    _text(ax, 0.5, y_c - 0.45, "(batch, $T$, $d$)", color=PALETTE["note"])
    in_proj = _box(ax, 1.45, y_c, "in_proj", PALETTE["linear"], w=0.85)
    _arrow(ax, u.right, in_proj.left)
    x_split = 2.1
    _arrow(ax, in_proj.right, (x_split, y_c), head=False)
    _dot(ax, x_split, y_c)

    # The x branch: causal convolution, SiLU, the selective SSM.
    conv = _box(ax, 2.95, y_top, "conv1d\n(causal)", PALETTE["linear"], w=1.0, h=0.55, size=SMALL)
    _arrow(ax, (x_split, y_c), (x_split, y_top), conv.left)
    _text(ax, x_split + 0.15, y_top + 0.2, "$x$")
    silu_x = _box(ax, 4.0, y_top, "SiLU", PALETTE["act"], w=0.6, size=SMALL)
    _arrow(ax, conv.right, silu_x.left)
    ssm = _box(ax, 6.0, y_top, "selective SSM\n" r"$h_t = \bar{A}_t h_{t-1} + \bar{B}_t x_t$"
               "\n" r"$y_t = C_t^\top h_t + D_e\, x_t$", PALETTE["state"], w=2.1, h=0.8, size=SMALL)
    _arrow(ax, silu_x.right, ssm.left)
    x_branch = 4.55
    _dot(ax, x_branch, y_top)
    proj = _box(ax, 6.0, y_mid, "x_proj, dt_proj", PALETTE["linear"], w=1.4, h=0.4, size=SMALL)
    _arrow(ax, (x_branch, y_top), (x_branch, y_mid), proj.left)
    _arrow(ax, proj.top, ssm.bottom)
    _text(ax, 6.12, (proj.top[1] + ssm.bottom[1]) / 2, r"$\Delta_t, B_t, C_t$", ha="left")

    # The z branch: a SiLU gate on the SSM's output.
    silu_z = _box(ax, 4.0, y_bot, "SiLU", PALETTE["gate"], w=0.6, size=SMALL)
    _arrow(ax, (x_split, y_c), (x_split, y_bot), silu_z.left)
    _text(ax, x_split + 0.15, y_bot + 0.2, "$z$")
    gate = _op(ax, 7.45, y_top, "⊙")
    _arrow(ax, ssm.right, gate.left)
    _arrow(ax, silu_z.right, (gate.x, y_bot), gate.bottom)

    # Back to the model's width.
    out_proj = _box(ax, 8.35, y_top, "out_proj", PALETTE["linear"], w=0.9, size=SMALL)
    _arrow(ax, gate.right, out_proj.left)
    out = _box(ax, 8.35, y_top + 0.78, "output", PALETTE["output"], w=0.75, h=0.38, size=SMALL)
    _arrow(ax, out_proj.top, out.bottom)
    _text(ax, 7.95, y_top + 0.78, "(batch, $T$, $d$)", ha="right", color=PALETTE["note"])
    _text(ax, 6.0, 0.15, r"inside: $E = \mathtt{expand} \cdot d$ channels, $N$ states each",
          color=PALETTE["note"])
    return fig


# ---------------------------------------------------------------------------------------------
# Appendix on several devices: the MLP of a block split over two ranks.
# ---------------------------------------------------------------------------------------------

def draw_tensor_parallel_mlp() -> Figure:
    r"""The feed-forward network of a block on two ranks, as
    ``seqbook.tensor_parallel.TensorParallelFeedForward.forward`` computes it (biases left out).

    Each row is one rank. Rank :math:`r` holds its columns :math:`W_1^{(r)}` of :math:`W_1` and the
    matching rows :math:`W_2^{(r)}` of :math:`W_2`: half of the hidden units each. Both ranks read
    the same :math:`X` (through :math:`f`, the identity in the forward pass), apply GELU to their own
    hidden units, and multiply by their rows of :math:`W_2`, which gives each a partial sum
    :math:`Y_r` of the whole output; :math:`g`, an all-reduce, adds the partial sums and leaves
    :math:`Y` on both ranks.
    """
    fig, ax = _canvas(8.0, 2.9)
    rows = {0: 2.1, 1: 0.8}
    x_in, x_f, x_w1, x_act, x_w2, x_g, x_out = 0.55, 1.35, 2.3, 3.45, 4.6, 6.25, 7.4
    g = _box(ax, x_g, (rows[0] + rows[1]) / 2, "$g$:\nall-reduce\n(sum)", PALETTE["op"], w=1.05,
             h=rows[0] - rows[1] + 0.5, size=SMALL)
    for r, y in rows.items():
        _text(ax, x_in, y + 0.43, f"rank {r}", color=PALETTE["note"])
        x = _box(ax, x_in, y, "$X$", PALETTE["input"], w=0.5, h=0.38)
        f = _op(ax, x_f, y, "$f$", r=0.17)
        _arrow(ax, x.right, f.left)
        w1 = _box(ax, x_w1, y, f"$W_1^{{({r})}}$", PALETTE["linear"], w=0.75)
        _arrow(ax, f.right, w1.left)
        act = _box(ax, x_act, y, "GELU", PALETTE["act"], w=0.75, size=SMALL)
        _arrow(ax, w1.right, act.left)
        w2 = _box(ax, x_w2, y, f"$W_2^{{({r})}}$", PALETTE["linear"], w=0.75)
        _arrow(ax, act.right, w2.left)
        _arrow(ax, w2.right, (g.left[0], y))
        _text(ax, (w2.right[0] + g.left[0]) / 2, y + 0.2, f"$Y_{r}$")
        out = _box(ax, x_out, y, "$Y$", PALETTE["output"], w=0.5, h=0.38)
        _arrow(ax, (g.right[0], y), out.left)
    _text(ax, (x_w1 + x_w2) / 2, 0.2, r"each rank: $d_\mathrm{ff}/2$ hidden units", color=PALETTE["note"])
    return fig


def draw_ring_all_reduce() -> Figure:
    r"""The ring all-reduce of three processes' buffers, each cut into three chunks, step by step,
    by the rule of chapter 12's ``ring_all_reduce``.

    Process 0 holds the numbers :math:`a`, process 1 :math:`b`, process 2 :math:`c`; a cell is one
    process's copy of one chunk and shows which processes' numbers it has summed so far (green: its
    own only, blue: a partial sum, red: the whole sum). In reduce-scatter step :math:`s` (from 0)
    process :math:`i` sends its chunk :math:`i - s \bmod N` to process :math:`i + 1`,
    which adds it to its own; after :math:`N - 1` steps process :math:`i` holds the whole sum of
    chunk :math:`i + 1`. In the all-gather the finished chunks go round the ring once more, each
    process passing on the chunk it finished or received last (in step :math:`s`, chunk
    :math:`i + 1 - s \bmod N`), which replaces the receiver's copy.
    """
    n = 3
    names = "abc"
    have = [[{names[i]} for _ in range(n)] for i in range(n)]  # have[process][chunk]
    states = [("start", [[set(c) for c in row] for row in have])]
    for s in range(n - 1):  # reduce-scatter
        sent = [(i, (i - s) % n, set(have[i][(i - s) % n])) for i in range(n)]
        for i, chunk, part in sent:
            have[(i + 1) % n][chunk] |= part
        states.append((f"reduce-scatter, $s = {s}$", [[set(c) for c in row] for row in have]))
    for s in range(n - 1):  # all-gather
        sent = [(i, (i + 1 - s) % n, set(have[i][(i + 1 - s) % n])) for i in range(n)]
        for i, chunk, part in sent:
            have[(i + 1) % n][chunk] = part
        states.append((f"all-gather, $s = {s}$", [[set(c) for c in row] for row in have]))

    cw, ch, label_w, gap = 0.72, 0.34, 0.8, 0.4
    panel_w = n * cw
    width = label_w + 3 * panel_w + 2 * gap + 0.15
    fig, ax = _canvas(width, 4.0)
    colour = {1: PALETTE["input"], n: PALETTE["output"]}
    tops = (3.85, 1.85)
    for k, (title, grid) in enumerate(states):
        top = tops[k // 3]
        x0 = label_w + (k % 3) * (panel_w + gap)
        _text(ax, x0 + panel_w / 2, top - 0.15, title, size=FONT)
        for j in range(n):
            _text(ax, x0 + (j + 0.5) * cw, top - 0.5, f"chunk {j}", color=PALETTE["note"])
        for i in range(n):
            y = top - 0.85 - i * (ch + 0.06)
            if k % 3 == 0:
                _text(ax, label_w - 0.42, y, f"process {i}", color=PALETTE["note"])
            for j in range(n):
                held = sorted(grid[i][j])
                _box(ax, x0 + (j + 0.5) * cw, y, "$" + "{+}".join(held) + "$",
                     colour.get(len(held), PALETTE["state"]), w=cw - 0.06, h=ch, size=SMALL)
    # the sixth place: the ring itself
    cx, cy, rad, r = label_w + 2 * (panel_w + gap) + panel_w / 2, 0.8, 0.5, 0.17
    angles = [math.pi / 2 - 2 * math.pi * i / n for i in range(n)]  # clockwise, 0 on top
    spots = [(cx + rad * math.cos(a), cy + rad * math.sin(a)) for a in angles]
    _text(ax, cx, tops[1] - 0.15, "the ring", size=FONT)
    for i, (x, y) in enumerate(spots):
        _op(ax, x, y, str(i), r=r, size=SMALL)
    for i in range(n):
        (x1, y1), (x2, y2) = spots[i], spots[(i + 1) % n]
        d = math.hypot(x2 - x1, y2 - y1)
        ux, uy = (x2 - x1) / d, (y2 - y1) / d
        _arrow(ax, (x1 + ux * (r + 0.03), y1 + uy * (r + 0.03)),
               (x2 - ux * (r + 0.03), y2 - uy * (r + 0.03)))
    _text(ax, cx, 0.12, "process $i$ sends to $i + 1$", color=PALETTE["note"])
    return fig
