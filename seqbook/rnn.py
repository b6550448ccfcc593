"""Recurrent layers written out step by step: the Elman RNN, the GRU and the LSTM.

Each cell computes one time step and reads like its equations. The layers :class:`RNN`, :class:`GRU`
and :class:`LSTM` loop the cells over time, stack them in depth and run them in both directions,
with the same shapes as PyTorch's ``batch_first=True`` modules:

    output, h_n = RNN(input_size, hidden_size, num_layers, bidirectional=...)(x, h0)
    x:      (B, T, input_size)
    h0:     (num_layers * D, B, hidden_size), D = 2 if bidirectional else 1 (default: zeros)
    output: (B, T, D * hidden_size)   the top layer's state at every step, both directions
    h_n:    (num_layers * D, B, hidden_size)   every layer's last state, rows ordered like PyTorch

``from_torch(m)`` copies the weights of ``nn.RNN`` / ``nn.GRU`` / ``nn.LSTM`` into our module, so
both compute the same function. Parameters have PyTorch's shapes and gate order: the rows of
``weight_ih`` are stacked (r, z, n) for the GRU and (i, f, g, o) for the LSTM.

One speed-up departs from the letter of the equations: a layer multiplies the whole input sequence
by ``weight_ih`` at once (``cell.project_input``), before the time loop, because that product does
not depend on the state. Only ``cell.step`` runs inside the loop.

The Python loop over time is slow next to PyTorch's own implementation, which runs the loop in C++
(on a CPU still one operation after another, each recorded for the backward pass, but without
Python's overhead at every step; on a GPU in cuDNN's fused kernels). ``fast=True`` (a constructor
argument, or set ``layer.fast = True`` later) hands *our* parameters to the same kernel ``nn.RNN``
/ ``nn.GRU`` / ``nn.LSTM`` call; the tests check
it computes the same values and gradients as the readable loop. Use the readable path to learn
and to look inside (``return_gates``), the fast one to train.
"""

from __future__ import annotations

import math
import warnings
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from .checks import (
    check_choice,
    check_flag,
    check_ids,
    check_like,
    check_positive_int,
    check_probability,
    check_tensor,
    checked,
    shape_of,
)

__all__ = ["RNNCell", "GRUCell", "LSTMCell", "RNN", "GRU", "LSTM", "SequenceClassifier"]


# ---------------------------------------------------------------------------------------------
# Cells: one time step.
# ---------------------------------------------------------------------------------------------


class RecurrentCell(nn.Module):
    """What the three cells share: weights of ``gates`` row blocks of size ``hidden_size``.

    ``fast=True`` makes ``forward`` call PyTorch's own cell on the same parameters (same values;
    the gates are not returned on that path). The layers below loop over ``step`` and have their
    own switch.

    Shape:
        x: (B, input_size), h: (B, hidden_size) -> (B, hidden_size), for every cell (an LSTM's
        state, in and out, is the pair (h, c), both (B, hidden_size)).
    """

    gates = 1

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, fast: bool = False):
        super().__init__()
        input_size = check_positive_int("input_size", input_size)
        hidden_size = check_positive_int("hidden_size", hidden_size)
        bias = check_flag("bias", bias)
        self.fast = check_flag("fast", fast)
        self.input_size, self.hidden_size = input_size, hidden_size
        G = self.gates * hidden_size
        self.weight_ih = nn.Parameter(torch.empty(G, input_size))
        self.weight_hh = nn.Parameter(torch.empty(G, hidden_size))
        if bias:
            self.bias_ih = nn.Parameter(torch.empty(G))
            self.bias_hh = nn.Parameter(torch.empty(G))
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """PyTorch's initialisation: every weight uniform in [-1/sqrt(H), 1/sqrt(H)]."""
        bound = 1.0 / math.sqrt(self.hidden_size)
        for p in self.parameters():
            nn.init.uniform_(p, -bound, bound)

    def project_input(self, x: torch.Tensor) -> torch.Tensor:
        """``W_ih x + b_ih`` for one step (B, D) or a whole sequence (B, T, D) -> (..., G*H)."""
        return F.linear(x, self.weight_ih, self.bias_ih)

    def project_hidden(self, h: torch.Tensor) -> torch.Tensor:
        """``W_hh h + b_hh``: (B, H) -> (B, G*H)."""
        return F.linear(h, self.weight_hh, self.bias_hh)

    def check_step_input(self, x: torch.Tensor, h: torch.Tensor, h_name: str = "h") -> None:
        """Check one step's input ``x`` (B, input_size) and state ``h`` (B, hidden_size)."""
        check_tensor("x", x, shape=(None, self.input_size), names=f"(B, {self.input_size})")
        check_tensor(h_name, h, nonempty=False)
        if shape_of(h) != (x.shape[0], self.hidden_size):
            raise ValueError(f"{h_name} must have shape ({x.shape[0]}, {self.hidden_size}), "
                             f"got {shape_of(h)}")
        check_like("x", x, self.weight_ih)
        check_like(h_name, h, self.weight_hh)

    def extra_repr(self) -> str:
        return f"{self.input_size}, {self.hidden_size}, bias={self.bias_ih is not None}"


class RNNCell(RecurrentCell):
    r"""One step of the Elman RNN (Elman, 1990), eq. (2.1) of the book.

    .. math::
        h_t = \sigma_h(W_{ih} x_t + b_{ih} + W_{hh} h_{t-1} + b_{hh}),

    with :math:`\sigma_h` = tanh or ReLU. (The read-out of eq. (2.2),
    :math:`y_t = \sigma_y(W_y h_t + b_y)`, is a linear layer on the states, then
    :math:`\sigma_y`.)

    The layers call the pieces unchecked: ``project_input`` once for all steps, before
    their time loops, and ``step`` (which calls ``project_hidden``) at every step;
    ``fast=True`` runs PyTorch's own cell.

    Shape:
        x: (B, input_size), h: (B, hidden_size) -> h_t: (B, hidden_size)
    """

    gates = 1

    @checked(nonlinearity=partial(check_choice, choices=("tanh", "relu")))
    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        bias: bool = True,
        nonlinearity: str = "tanh",
        fast: bool = False,
    ):
        super().__init__(input_size, hidden_size, bias, fast)
        self.nonlinearity = nonlinearity
        self.act = torch.tanh if nonlinearity == "tanh" else torch.relu

    def step(self, xw: torch.Tensor, h: torch.Tensor, return_gates: bool = False):
        """The recurrence given the projected input ``xw = W_ih x_t + b_ih`` (B, H)."""
        h = self.act(xw + self.project_hidden(h))  # (B, H)
        return (h, {}) if return_gates else h

    @checked(RecurrentCell.check_step_input)
    def forward(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        if self.fast:  # PyTorch's own cell, on the same parameters
            fused = {"tanh": torch.rnn_tanh_cell, "relu": torch.rnn_relu_cell}
            w = (self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh)
            return fused[self.nonlinearity](x, h, *w)
        return self.step(self.project_input(x), h)

    def extra_repr(self) -> str:
        return super().extra_repr() + f", nonlinearity={self.nonlinearity!r}"


class GRUCell(RecurrentCell):
    r"""One step of the gated recurrent unit (Cho et al., 2014), eqs. (3.1)-(3.4) of the book.

    .. math::
        z_t &= \sigma(W_{iz} x_t + b_{iz} + W_{hz} h_{t-1} + b_{hz})            && \text{update gate (3.1)}\\
        r_t &= \sigma(W_{ir} x_t + b_{ir} + W_{hr} h_{t-1} + b_{hr})            && \text{reset gate (3.2)}\\
        n_t &= \tanh(W_{in} x_t + b_{in} + r_t \odot (W_{hn} h_{t-1} + b_{hn})) && \text{candidate (3.3)}\\
        h_t &= (1 - z_t) \odot n_t + z_t \odot h_{t-1}                            && \text{new state (3.4)}

    ``z_t`` near 1 keeps the old state, near 0 overwrites it with the candidate. The rows of
    ``weight_ih`` / ``weight_hh`` are stacked in PyTorch's order (r, z, n).

    Shape:
        x: (B, input_size), h: (B, hidden_size) -> h_t: (B, hidden_size)
    """

    gates = 3

    def step(self, xw: torch.Tensor, h: torch.Tensor, return_gates: bool = False):
        """The recurrence given the projected input ``xw = W_ih x_t + b_ih`` (B, 3H)."""
        x_r, x_z, x_n = xw.chunk(3, dim=-1)                   # each (B, H)
        h_r, h_z, h_n = self.project_hidden(h).chunk(3, dim=-1)
        z = torch.sigmoid(x_z + h_z)                          # update gate (3.1)
        r = torch.sigmoid(x_r + h_r)                          # reset gate  (3.2)
        n = torch.tanh(x_n + r * h_n)                         # candidate   (3.3)
        h = (1 - z) * n + z * h                               # new state   (3.4)
        return (h, {"r": r, "z": z, "n": n}) if return_gates else h

    @checked(RecurrentCell.check_step_input, return_gates=check_flag)
    def forward(self, x: torch.Tensor, h: torch.Tensor, return_gates: bool = False):
        """One step; with ``return_gates`` also a dict of the gates ``r``, ``z``, ``n`` (B, H)."""
        if self.fast and not return_gates:
            return torch.gru_cell(x, h, self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh)
        return self.step(self.project_input(x), h, return_gates)


class LSTMCell(RecurrentCell):
    r"""One step of the long short-term memory (Hochreiter and Schmidhuber, 1997).

    .. math::
        i_t &= \sigma(W_{ii} x_t + b_{ii} + W_{hi} h_{t-1} + b_{hi})  && \text{input gate}\\
        f_t &= \sigma(W_{if} x_t + b_{if} + W_{hf} h_{t-1} + b_{hf})  && \text{forget gate}\\
        g_t &= \tanh(W_{ig} x_t + b_{ig} + W_{hg} h_{t-1} + b_{hg})   && \text{candidate cell}\\
        o_t &= \sigma(W_{io} x_t + b_{io} + W_{ho} h_{t-1} + b_{ho})  && \text{output gate}\\
        c_t &= f_t \odot c_{t-1} + i_t \odot g_t                         && \text{memory cell}\\
        h_t &= o_t \odot \tanh(c_t)                                      && \text{hidden state}

    The state is the pair ``(h, c)``; the rows of the weights are stacked in PyTorch's order
    (i, f, g, o).

    Shape:
        x: (B, input_size), state: ((B, hidden_size), (B, hidden_size)) -> (h_t, c_t), same shapes
    """

    gates = 4

    def step(self, xw: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor], return_gates: bool = False):
        """The recurrence given the projected input ``xw = W_ih x_t + b_ih`` (B, 4H)."""
        h, c = state
        a_i, a_f, a_g, a_o = (xw + self.project_hidden(h)).chunk(4, dim=-1)  # each (B, H)
        i, f, g, o = torch.sigmoid(a_i), torch.sigmoid(a_f), torch.tanh(a_g), torch.sigmoid(a_o)
        c = f * c + i * g                                     # (B, H)
        h = o * torch.tanh(c)                                 # (B, H)
        return ((h, c), {"i": i, "f": f, "g": g, "o": o}) if return_gates else (h, c)

    def forward(self, x: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor], return_gates: bool = False):
        """One step; ``state = (h, c)``; with ``return_gates`` also a dict of i, f, g, o."""
        if not isinstance(state, (tuple, list)):
            raise TypeError("state must be a pair (h, c) of tensors of shape (B, hidden_size), "
                            f"got {type(state).__name__}")
        if len(state) != 2:
            raise ValueError("state must be a pair (h, c) of tensors of shape (B, hidden_size), "
                             f"got {len(state)} items")
        self.check_step_input(x, state[0], "state[0]")
        self.check_step_input(x, state[1], "state[1]")
        check_flag("return_gates", return_gates)
        if self.fast and not return_gates:
            return tuple(torch.lstm_cell(x, tuple(state), self.weight_ih, self.weight_hh, self.bias_ih,
                                       self.bias_hh))
        return self.step(self.project_input(x), tuple(state), return_gates)


# ---------------------------------------------------------------------------------------------
# Layers: cells looped over time, stacked in depth, run in both directions.
# ---------------------------------------------------------------------------------------------


class _RecurrentLayer(nn.Module):
    """A stack of ``num_layers`` recurrent layers, each run forwards (and backwards if
    ``bidirectional``). Layer k > 0 reads the concatenated outputs of layer k-1, after dropout.

    The cells sit in ``self.cells`` at index ``layer * D + direction``, which is also the order of
    the rows of ``h_n`` and of PyTorch's parameters ``weight_ih_l{layer}{'' or '_reverse'}``.

    Shape:
        x: (B, T, input_size) -> output (B, T, D * hidden_size) and h_n
        (num_layers * D, B, hidden_size) (an LSTM's is the pair (h_n, c_n)), D = 2 if
        bidirectional else 1; ``loop`` takes x and one first state per cell, each
        (B, hidden_size) or, for an LSTM, a pair of them.
    """

    torch_class: type[nn.RNNBase] = nn.RNNBase

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 dropout: float = 0.0, bidirectional: bool = False, fast: bool = False, **cell_kwargs):
        super().__init__()
        input_size = check_positive_int("input_size", input_size)
        hidden_size = check_positive_int("hidden_size", hidden_size)
        num_layers = check_positive_int("num_layers", num_layers)
        dropout = check_probability("dropout", dropout)
        bias = check_flag("bias", bias)
        bidirectional = check_flag("bidirectional", bidirectional)
        fast = check_flag("fast", fast)
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.bias, self.dropout, self.bidirectional = bias, float(dropout), bool(bidirectional)
        self.num_directions = D = 2 if bidirectional else 1
        self.fast = bool(fast)
        self.cells = nn.ModuleList(
            self.make_cell(input_size if layer == 0 else D * hidden_size, hidden_size, bias, **cell_kwargs)
            for layer in range(num_layers)
            for _ in range(D)
        )

    def make_cell(self, input_size: int, hidden_size: int, bias: bool, **kwargs) -> RecurrentCell:
        raise NotImplementedError

    # --- input checks ------------------------------------------------------------------------

    def _check_input(self, x: torch.Tensor) -> None:
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"x must be a tensor of shape (B, T, {self.input_size}), got {type(x).__name__}")
        if x.dim() != 3:
            raise ValueError(
                f"x must have shape (B, T, {self.input_size}) (batch first, 3-D), got {shape_of(x)}")
        if x.shape[2] != self.input_size:
            raise ValueError(f"x must have shape (B, T, {self.input_size}), got {shape_of(x)}")
        if x.shape[1] == 0:
            raise ValueError(f"x must hold at least one time step: shape (B, T>=1, {self.input_size}), "
                             f"got {shape_of(x)}")
        if x.shape[0] == 0:
            raise ValueError(f"x must hold at least one sequence: shape (B>=1, T, {self.input_size}), "
                             f"got {shape_of(x)}")
        check_like("x", x, self.cells[0].weight_ih)

    def _initial_state(self, x: torch.Tensor, h0: torch.Tensor | None, name: str = "h0") -> torch.Tensor:
        """Zeros by default; otherwise ``h0`` checked against (num_layers * D, B, H)."""
        expected = (self.num_layers * self.num_directions, x.shape[0], self.hidden_size)
        if h0 is None:
            return x.new_zeros(expected)
        if not isinstance(h0, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor of shape {expected} = (num_layers * "
                            f"num_directions, B, hidden_size), got {type(h0).__name__}")
        if shape_of(h0) != expected:
            raise ValueError(f"{name} must have shape {expected} = (num_layers * num_directions, B, "
                             f"hidden_size), got {shape_of(h0)}")
        check_like(name, h0, self.cells[0].weight_hh)
        return h0

    # --- the loops ---------------------------------------------------------------------------

    @staticmethod
    def output_of(state):
        """The part of a cell's state that is its output: ``h`` (an LSTM's state is ``(h, c)``)."""
        return state[0] if isinstance(state, tuple) else state

    def loop(self, x: torch.Tensor, states: list, return_gates: bool = False):
        """Run every layer and direction; ``states[k]`` is the first state of ``cells[k]``.

        Returns the top layer's outputs (B, T, D*H), the final states (one per cell) and,
        with ``return_gates``, ``{name: (L*D, B, T, H)}``. Unchecked (``forward`` checks).
        """
        B, T, _ = x.shape
        D = self.num_directions
        finals, gates = [], {}
        layer_input = x                                                # (B, T, D_in)
        for layer in range(self.num_layers):
            outputs = []
            for direction in range(D):
                k = layer * D + direction
                cell = self.cells[k]
                # W_ih x_t + b_ih for all steps at once, then one (B, G*H) tensor per step
                # (unbind keeps the backward pass linear in T; T slices xw[:, t] would not).
                xw = cell.project_input(layer_input).unbind(1)
                state = states[k]
                steps = range(T - 1, -1, -1) if direction == 1 else range(T)
                hs, gs = [None] * T, [None] * T
                for t in steps:
                    if return_gates:
                        state, gs[t] = cell.step(xw[t], state, return_gates=True)
                    else:
                        state = cell.step(xw[t], state)
                    hs[t] = self.output_of(state)                      # (B, H)
                outputs.append(torch.stack(hs, dim=1))                 # (B, T, H)
                finals.append(state)
                if return_gates:
                    for name in gs[0]:
                        g = torch.stack([g[name] for g in gs], dim=1)  # (B, T, H)
                        gates.setdefault(name, []).append(g)
            layer_input = torch.cat(outputs, dim=-1)                   # (B, T, D*H)
            if self.dropout > 0 and self.training and layer < self.num_layers - 1:
                layer_input = F.dropout(layer_input, p=self.dropout, training=True)
        gates = {name: torch.stack(g) for name, g in gates.items()}    # (L*D, B, T, H)
        return layer_input, finals, gates

    def _fused_kernel(self):
        raise NotImplementedError

    def _run_fast(self, x: torch.Tensor, hx):
        """The same computation in PyTorch's kernel (C++; cuDNN on a GPU), with our parameters.

        ``hx`` is h0 (L*D, B, H), or the pair (h0, c0) for the LSTM; returns the kernel's tuple
        ``(output, h_n)`` or ``(output, h_n, c_n)``.
        """
        kinds = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
        flat = [getattr(cell, k) for cell in self.cells for k in kinds if getattr(cell, k) is not None]
        with warnings.catch_warnings():
            # On CUDA, cuDNN wants every weight in one buffer and warns that it copies them there at
            # each call. Ours live in separate cells by design (that is what keeps them readable);
            # the copy is part of what the fast path costs, so the warning is not news.
            warnings.filterwarnings("ignore", message="RNN module weights are not part of single")
            return self._fused_kernel()(x, hx, flat, self.bias, self.num_layers, self.dropout,
                                        self.training, self.bidirectional, True)  # batch_first=True

    # --- PyTorch interoperability ------------------------------------------------------------

    def _torch_param_names(self):
        """Pairs (our cell index, PyTorch suffix), e.g. (3, 'l1_reverse')."""
        for layer in range(self.num_layers):
            for direction in range(self.num_directions):
                yield layer * self.num_directions + direction, f"l{layer}" + ("_reverse" if direction else "")

    @classmethod
    def _kwargs_from_torch(cls, m: nn.RNNBase) -> dict:
        if not isinstance(m, cls.torch_class):
            raise TypeError(f"m must be an nn.{cls.torch_class.__name__}, got {type(m).__name__}")
        if getattr(m, "proj_size", 0):
            raise ValueError(f"proj_size > 0 is not supported, got proj_size={m.proj_size}")
        return dict(input_size=m.input_size, hidden_size=m.hidden_size, num_layers=m.num_layers,
                    bias=m.bias, dropout=m.dropout, bidirectional=m.bidirectional)

    @classmethod
    def from_torch(cls, m: nn.RNNBase, fast: bool = False):
        """A copy of PyTorch's ``nn.RNN`` / ``nn.GRU`` / ``nn.LSTM`` ``m``: same weights, same function.

        Our layers are batch-first; ``m`` may have either ``batch_first`` (it does not change the
        weights). The copy sits on ``m``'s device and dtype.
        """
        ours = cls(**cls._kwargs_from_torch(m), fast=check_flag("fast", fast))
        ref = next(m.parameters())
        ours.to(device=ref.device, dtype=ref.dtype)
        with torch.no_grad():
            for k, suffix in ours._torch_param_names():
                cell = ours.cells[k]
                cell.weight_ih.copy_(getattr(m, f"weight_ih_{suffix}"))
                cell.weight_hh.copy_(getattr(m, f"weight_hh_{suffix}"))
                if ours.bias:
                    cell.bias_ih.copy_(getattr(m, f"bias_ih_{suffix}"))
                    cell.bias_hh.copy_(getattr(m, f"bias_hh_{suffix}"))
        return ours

    def torch_parameter(self, name: str) -> nn.Parameter:
        """Our parameter under PyTorch's name, e.g. ``'weight_hh_l0_reverse'``."""
        if not isinstance(name, str):
            raise TypeError(f"name must be a str such as 'weight_hh_l0', got {type(name).__name__}")
        for k, suffix in self._torch_param_names():
            for kind in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                if name == f"{kind}_{suffix}":
                    return getattr(self.cells[k], kind)
        raise ValueError(f"name must be a parameter name such as 'weight_hh_l0', got {name!r}")

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}, num_layers={self.num_layers}"
        if not self.bias:
            s += ", bias=False"
        if self.fast:
            s += ", fast=True"
        if self.bidirectional:
            s += ", bidirectional=True"
        if self.dropout:
            s += f", dropout={self.dropout}"
        return s


class RNN(_RecurrentLayer):
    r"""A multi-layer Elman RNN, batch first, equal to ``nn.RNN(..., batch_first=True)``.

    Every layer and direction runs :class:`RNNCell`,
    :math:`h_t = \sigma_h(W_{ih} x_t + b_{ih} + W_{hh} h_{t-1} + b_{hh})`, eq. (2.1) of the book.

    Args:
        input_size, hidden_size: feature sizes of x and h.
        num_layers: stacked layers; layer k > 0 reads the outputs of layer k-1.
        nonlinearity: ``"tanh"`` or ``"relu"``.
        bias: use ``b_ih`` and ``b_hh``.
        dropout: dropout on the outputs of every layer but the last (training only).
        bidirectional: also run each layer from the last step to the first and concatenate.
        fast: run PyTorch's kernel (C++; cuDNN on a GPU) on our parameters instead of the Python
            loop.

    Shape:
        x: (B, T, input_size); h0: (num_layers * D, B, hidden_size) or None (zeros)
        -> output: (B, T, D * hidden_size), h_n: (num_layers * D, B, hidden_size)
    """

    torch_class = nn.RNN

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, nonlinearity: str = "tanh",
                 bias: bool = True, dropout: float = 0.0, bidirectional: bool = False, fast: bool = False):
        super().__init__(input_size, hidden_size, num_layers, bias, dropout, bidirectional, fast,
                         nonlinearity=nonlinearity)
        self.nonlinearity = nonlinearity

    def make_cell(self, input_size, hidden_size, bias, nonlinearity="tanh"):
        return RNNCell(input_size, hidden_size, bias, nonlinearity)

    def _fused_kernel(self):
        return torch.rnn_tanh if self.nonlinearity == "tanh" else torch.rnn_relu

    @classmethod
    def _kwargs_from_torch(cls, m):
        return dict(super()._kwargs_from_torch(m), nonlinearity=m.nonlinearity)

    def forward(self, x: torch.Tensor, h0: torch.Tensor | None = None):
        self._check_input(x)
        h0 = self._initial_state(x, h0)
        if self.fast:
            return self._run_fast(x, h0)
        output, finals, _ = self.loop(x, list(h0.unbind(0)))
        return output, torch.stack(finals)

    def extra_repr(self) -> str:
        return super().extra_repr() + f", nonlinearity={self.nonlinearity!r}"


class GRU(_RecurrentLayer):
    r"""A multi-layer GRU, batch first, equal to ``nn.GRU(..., batch_first=True)``.

    Every layer and direction runs :class:`GRUCell`, eqs. (3.1)-(3.4) of the book. With
    ``return_gates=True``, ``forward`` also returns the gates at every step, e.g. the update gate
    ``gates["z"]`` of shape (num_layers * D, B, T, hidden_size) (rows ordered like ``h_n``);
    the gates always come from the readable loop, even when ``fast`` is set.

    Shape:
        x: (B, T, input_size); h0: (num_layers * D, B, hidden_size) or None (zeros)
        -> output: (B, T, D * hidden_size), h_n: (num_layers * D, B, hidden_size)
    """

    torch_class = nn.GRU

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 dropout: float = 0.0, bidirectional: bool = False, fast: bool = False):
        super().__init__(input_size, hidden_size, num_layers, bias, dropout, bidirectional, fast)

    def make_cell(self, input_size, hidden_size, bias):
        return GRUCell(input_size, hidden_size, bias)

    def _fused_kernel(self):
        return torch.gru

    def forward(self, x: torch.Tensor, h0: torch.Tensor | None = None, return_gates: bool = False):
        """``(output, h_n)``, or ``(output, h_n, gates)`` with ``return_gates`` (keys r, z, n)."""
        self._check_input(x)
        check_flag("return_gates", return_gates)
        h0 = self._initial_state(x, h0)
        if self.fast and not return_gates:
            return self._run_fast(x, h0)
        output, finals, gates = self.loop(x, list(h0.unbind(0)), return_gates)
        h_n = torch.stack(finals)
        return (output, h_n, gates) if return_gates else (output, h_n)


class LSTM(_RecurrentLayer):
    r"""A multi-layer LSTM, batch first, equal to ``nn.LSTM(..., batch_first=True)`` (no projection).

    Every layer and direction runs :class:`LSTMCell`. The state is a pair ``(h, c)``.
    With ``return_gates=True``, ``forward`` also returns the gates i, f, g, o at every step,
    each of shape (num_layers * D, B, T, hidden_size) (from the readable loop even when ``fast``).

    Shape:
        x: (B, T, input_size); h0: a pair (h_0, c_0), each (num_layers * D, B, hidden_size), or None
        -> output: (B, T, D * hidden_size), (h_n, c_n): each (num_layers * D, B, hidden_size)
    """

    torch_class = nn.LSTM

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 dropout: float = 0.0, bidirectional: bool = False, fast: bool = False):
        super().__init__(input_size, hidden_size, num_layers, bias, dropout, bidirectional, fast)

    def make_cell(self, input_size, hidden_size, bias):
        return LSTMCell(input_size, hidden_size, bias)

    def _fused_kernel(self):
        return torch.lstm

    def forward(self, x: torch.Tensor, h0: tuple[torch.Tensor, torch.Tensor] | None = None,
                return_gates: bool = False):
        """``(output, (h_n, c_n))``, or ``(output, (h_n, c_n), gates)`` with ``return_gates``."""
        self._check_input(x)
        check_flag("return_gates", return_gates)
        if h0 is None:
            h0 = c0 = self._initial_state(x, None)
        elif not isinstance(h0, (tuple, list)) or len(h0) != 2:
            shape = f"({self.num_layers * self.num_directions}, B, {self.hidden_size})"
            if not isinstance(h0, (tuple, list)):
                raise TypeError(f"h0 must be a pair (h_0, c_0) of tensors of shape {shape}, got "
                                f"{type(h0).__name__}")
            raise ValueError(f"h0 must be a pair (h_0, c_0) of tensors of shape {shape}, got {len(h0)} items")
        else:
            h0, c0 = self._initial_state(x, h0[0], "h0[0]"), self._initial_state(x, h0[1], "h0[1]")
        if self.fast and not return_gates:
            output, h_n, c_n = self._run_fast(x, (h0, c0))
            return output, (h_n, c_n)
        states = list(zip(h0.unbind(0), c0.unbind(0), strict=True))
        output, finals, gates = self.loop(x, states, return_gates)
        h_n = torch.stack([h for h, _ in finals])
        c_n = torch.stack([c for _, c in finals])
        return (output, (h_n, c_n), gates) if return_gates else (output, (h_n, c_n))


# ---------------------------------------------------------------------------------------------
# Seq2vec: a whole sequence -> one class.
# ---------------------------------------------------------------------------------------------


class SequenceClassifier(nn.Module):
    r"""Embedding -> recurrent layer -> one vector per sequence -> class logits (seq2vec).

    ``pooling="last"`` reads out the state after the last token, :math:`\hat y = \mathrm{softmax}(W h_T)`
    (for a bidirectional layer: the last forward state beside the last backward state, i.e. the
    one after reading the first token). ``pooling="mean"`` averages the (concatenated) states over
    time, :math:`\bar h = \frac1T \sum_t h_t`, :math:`\hat y = \mathrm{softmax}(W \bar h)`: the
    mean-pooled bidirectional classifier of chapter 2. Every sequence starts from a zero state.

    Sequences in one batch must have the same length (batch them by length): padding would be
    read as input, and a backward layer would read it first.

    Shape:
        ids: (B, T) int64 -> logits: (B, num_classes)
    """

    def __init__(self, vocab_size: int, num_classes: int, hidden_size: int = 64, cell: str = "rnn",
                 embed_dim: int = 32, num_layers: int = 1, bidirectional: bool = False,
                 pooling: str = "last", dropout: float = 0.0, fast: bool = False):
        super().__init__()
        layers = {"rnn": RNN, "gru": GRU, "lstm": LSTM}
        if not isinstance(cell, str) or cell not in layers:
            raise ValueError(f"cell must be one of {sorted(layers)}, got {cell!r}")
        if not isinstance(pooling, str) or pooling not in ("last", "mean"):
            raise ValueError(f"pooling must be 'last' or 'mean', got {pooling!r}")
        self.vocab_size = check_positive_int("vocab_size", vocab_size)
        num_classes = check_positive_int("num_classes", num_classes)
        embed_dim = check_positive_int("embed_dim", embed_dim)
        self.pooling = pooling
        self.embed = nn.Embedding(vocab_size, embed_dim)
        self.rnn = layers[cell](embed_dim, hidden_size, num_layers=num_layers, dropout=dropout,
                                bidirectional=bidirectional, fast=fast)
        self.head = nn.Linear(self.rnn.num_directions * hidden_size, num_classes)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        check_ids("ids", ids, self.vocab_size, shape=(None, None), names="(B, T)")
        output, state = self.rnn(self.embed(ids))             # (B, T, D*H)
        if self.pooling == "mean":
            return self.head(output.mean(dim=1))              # (B, C)
        h_n = state[0] if isinstance(state, tuple) else state  # (L*D, B, H)
        D = self.rnn.num_directions
        last = torch.cat(list(h_n[-D:]), dim=-1)              # top layer, every direction: (B, D*H)
        return self.head(last)                                # (B, C)
