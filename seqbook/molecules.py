"""Molecules as sets of vector symbols: each bond is the binding of its two atoms' symbols and
its own features' symbol, bundled with a fractional power of a position symbol
(:class:`MoleculeEncoder`); :func:`encode_solubility` encodes chapter 8's solubility data set.
"""

from __future__ import annotations

import torch
from torch import nn

from .checks import check_ids, check_int, check_layer_input, check_positive_int, checked
from .data import ATOM_FEATURES, BOND_FEATURES, load_solubility
from .utils import seed_everything
from .vsa import fhrr_bind, fhrr_bundle, fhrr_wrap, random_symbols
from .vsa_models import SymbolProjection

__all__ = ["MoleculeEncoder", "encode_solubility"]


class MoleculeEncoder(nn.Module):
    """Molecules as sets of FHRR symbols, one per bond (figure 6b of the paper); nothing is trained.

    Every atom's and every bond's feature vector is projected into a symbol by a fixed random
    projection (:class:`SymbolProjection`). A bond t between atoms i and j becomes the binding of
    the two atom symbols and the bond's own symbol, and is then bundled with a fractional power code
    of its position t in the molecule's bond list::

        e_t = bind(bind(a_i, a_j), b_t)          binding is commutative: the bond has no direction
        s_t = bundle(e_t, base ** t)             the position code, see :func:`fractional_power`

    :meth:`encode` pads the sets of a list of molecules into one tensor for
    :class:`VSAAttentionClassifier` (with ``cols=None``) and returns the mask of real bonds.

    Shape:
        forward: atoms (A, atom_features), bonds (E, 2) int atom indices, bond_features
        (E, bond_features) -> (E, embed_dim) symbols.
    """

    @checked(atom_features=check_positive_int, bond_features=check_positive_int, embed_dim=check_positive_int)
    def __init__(self, atom_features: int, bond_features: int, embed_dim: int):
        super().__init__()
        self.embed_dim = int(embed_dim)
        self.atom = SymbolProjection(atom_features, embed_dim)
        self.bond = SymbolProjection(bond_features, embed_dim)
        self.register_buffer("position_base", random_symbols(1, embed_dim)[0])

    def _check_forward(self, atoms, bonds, bond_features) -> None:
        n, m = self.atom.in_features, self.bond.in_features
        check_layer_input("atoms", atoms, self.position_base, (None, n), f"(A, {n})")
        check_ids("bonds", bonds, len(atoms), shape=(None, 2), names="(E, 2)", nonempty=False)
        check_layer_input("bond_features", bond_features, self.position_base, (len(bonds), m),
                          f"(E, {m}) with E = {len(bonds)} bonds")

    @checked(_check_forward)
    def forward(self, atoms: torch.Tensor, bonds: torch.Tensor, bond_features: torch.Tensor) -> torch.Tensor:
        a = self.atom(atoms)  # (A, D)
        edges = fhrr_bind(fhrr_bind(a[bonds[:, 0]], a[bonds[:, 1]]), self.bond(bond_features))  # (E, D)
        t = torch.arange(len(bonds), dtype=a.dtype, device=a.device)
        position = fhrr_wrap(t[:, None] * self.position_base)  # (E, D): base ** t
        return fhrr_bundle(torch.stack([edges, position]), dim=0)  # (E, D)

    @torch.no_grad()
    def encode(self, molecules, max_bonds: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Encode molecules (anything with ``atoms``, ``bonds`` and ``bond_features`` lists, such as
        :class:`seqbook.data.Molecules`) into padded symbols (N, T, embed_dim) and a mask (N, T), True at
        real bonds. T is ``max_bonds`` (default: the largest bond count); padding has angle 0."""
        fields = ("atoms", "bonds", "bond_features")
        if not all(isinstance(getattr(molecules, f, None), (list, tuple)) for f in fields):
            raise TypeError(f"molecules must have lists atoms, bonds and bond_features (a "
                            f"seqbook.data.Molecules), got {type(molecules).__name__}")
        counts = [len(getattr(molecules, f)) for f in fields]
        if len(set(counts)) != 1:
            raise ValueError(f"molecules must have as many atoms, bonds and bond_features entries, "
                             f"got {counts[0]}, {counts[1]} and {counts[2]}")
        if max_bonds is not None:
            check_int("max_bonds", max_bonds)
        parts = zip(molecules.atoms, molecules.bonds, molecules.bond_features, strict=True)
        sets = [self(atoms, bonds, features) for atoms, bonds, features in parts]
        longest = max((len(s) for s in sets), default=0)
        t = longest if max_bonds is None else int(max_bonds)
        if longest > t:
            raise ValueError(f"max_bonds must be at least the largest bond count, {longest}, got {t}")
        symbols = self.position_base.new_zeros(len(sets), t, self.embed_dim)
        mask = torch.zeros(len(sets), t, dtype=torch.bool, device=symbols.device)
        for i, s in enumerate(sets):
            symbols[i, :len(s)], mask[i, :len(s)] = s, True
        return symbols, mask


def encode_solubility(embed_dim: int,
                      seed: int = 0) -> tuple[tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]:
    """The solubility molecules as padded FHRR symbol sets: ``(symbols, mask, labels)`` for the
    training and the test split, both padded to the largest bond count of either (50)."""
    seed_everything(seed)
    train, test = load_solubility("train"), load_solubility("test")
    encoder = MoleculeEncoder(len(ATOM_FEATURES), len(BOND_FEATURES), embed_dim)
    longest = max(len(b) for b in train.bonds + test.bonds)
    return ((*encoder.encode(train, longest), train.labels), (*encoder.encode(test, longest), test.labels))
