"""The data layer every chapter shares: vocabularies, tokenizers, loaders and batching.

Loaders never assume the internet. Each looks for a local copy first, in this order:

1. the folder named by the environment variable ``SEQBOOK_DATA``;
2. the user cache (``pooch.os_cache("seqbook")``, e.g. ``~/.cache/seqbook``);
3. known system locations (for example a Debian data package);

and only then downloads the file from its canonical public source into the user cache, with a
progress bar and a SHA-256 check (done by ``pooch``). With no local copy and no network the
loader raises one :class:`DataNotFoundError` that says where to put the file.
"""

from __future__ import annotations

import calendar
import gzip
import os
import random
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path

import numpy as np
import pooch
import torch

# ---------------------------------------------------------------------------------------------
# Finding files: local first, then a checked download.
# ---------------------------------------------------------------------------------------------


class DataNotFoundError(FileNotFoundError):
    """A data file is neither on disk nor downloadable."""


@dataclass(frozen=True)
class RemoteFile:
    """A data file known by name, canonical address and SHA-256 hash."""

    fname: str
    url: str
    sha256: str
    system_paths: tuple[str, ...] = ()


def cache_dir() -> Path:
    """The user cache where downloaded files are kept."""
    return Path(pooch.os_cache("seqbook"))


def _local_candidates(remote: RemoteFile) -> list[Path]:
    candidates = []
    if os.environ.get("SEQBOOK_DATA"):
        candidates.append(Path(os.environ["SEQBOOK_DATA"]) / remote.fname)
    candidates.append(cache_dir() / remote.fname)
    candidates.extend(Path(p) for p in remote.system_paths)
    return candidates


def fetch(remote: RemoteFile, download: bool = True) -> Path:
    """Return a local path to ``remote``, downloading it into the user cache if needed.

    Args:
        remote: the file to find.
        download: if False, never touch the network.

    Raises:
        DataNotFoundError: no local copy exists and the download failed (or was not allowed),
            with a message that lists where the file may be put.
    """
    candidates = _local_candidates(remote)
    for path in candidates:
        if path.is_file():
            return path
    error = None
    if download:
        try:
            path = pooch.retrieve(
                url=remote.url,
                known_hash=f"sha256:{remote.sha256}",
                fname=remote.fname,
                path=cache_dir(),
                progressbar=_progressbar_wanted(),
            )
            return Path(path)
        except Exception as exc:  # no network, HTTP error, or a wrong checksum
            error = exc
    where = "\n  ".join(str(p) for p in candidates)
    reason = f"the download from {remote.url} failed ({error})" if error else "downloads are off"
    raise DataNotFoundError(
        f"{remote.fname!r} was not found and {reason}.\n"
        f"Put a copy in one of these places (or set SEQBOOK_DATA to its folder):\n  {where}"
    )


def _progressbar_wanted() -> bool:
    if os.environ.get("TQDM_DISABLE"):
        return False
    try:
        import tqdm  # noqa: F401
    except ImportError:  # pragma: no cover - tqdm is a dependency
        return False
    return True


# ---------------------------------------------------------------------------------------------
# Vocabulary and tokenizers.
# ---------------------------------------------------------------------------------------------

PAD, UNK, SOS, EOS = "<pad>", "<unk>", "<sos>", "<eos>"
RESERVED = (PAD, UNK, SOS, EOS)


class Vocab:
    """A two-way map between tokens and integer ids.

    The ids 0, 1, 2, 3 are always ``<pad> <unk> <sos> <eos>``; the other tokens follow in order of
    decreasing frequency (ties broken alphabetically), so the same text always gives the same ids.
    Tokens never seen when the vocabulary was built encode to ``<unk>``.

    Args:
        tokens: the training tokens (any iterable of strings, or of lists of strings).
        min_freq: tokens seen fewer times are left out (they become ``<unk>``).
        max_size: keep at most this many tokens besides the reserved ones.

    Example:
        >>> v = Vocab(list("hello"))
        >>> v.decode(v.encode(list("hello")))
        ['h', 'e', 'l', 'l', 'o']
    """

    def __init__(self, tokens: Iterable = (), min_freq: int = 1, max_size: int | None = None):
        if min_freq < 1:
            raise ValueError(f"min_freq must be >= 1, got {min_freq}")
        counter = Counter(_flatten(tokens))
        for token in RESERVED:
            counter.pop(token, None)
        kept = sorted((t for t, c in counter.items() if c >= min_freq), key=lambda t: (-counter[t], t))
        if max_size is not None:
            kept = kept[:max_size]
        self.counts = counter
        self.itos: list[str] = list(RESERVED) + kept
        self.stoi: dict[str, int] = {t: i for i, t in enumerate(self.itos)}

    pad_id, unk_id, sos_id, eos_id = 0, 1, 2, 3

    def __len__(self) -> int:
        return len(self.itos)

    def __contains__(self, token: str) -> bool:
        return token in self.stoi

    def __getitem__(self, token: str) -> int:
        return self.stoi.get(token, self.unk_id)

    def encode(self, tokens: Sequence[str], add_sos: bool = False, add_eos: bool = False) -> list[int]:
        """Map tokens to ids; unknown tokens map to ``<unk>``."""
        if isinstance(tokens, str) and len(tokens) > 1 and tokens not in self.stoi:
            tokens = list(tokens)  # a plain string is read as a sequence of characters
        ids = [self.stoi.get(t, self.unk_id) for t in tokens]
        return ([self.sos_id] if add_sos else []) + ids + ([self.eos_id] if add_eos else [])

    def decode(self, ids: Iterable[int], strip_special: bool = False) -> list[str]:
        """Map ids back to tokens; with ``strip_special`` drop ``<pad> <sos> <eos>``."""
        if isinstance(ids, torch.Tensor):
            ids = ids.tolist()
        out = []
        for i in ids:
            if not 0 <= i < len(self.itos):
                raise IndexError(f"id {i} is outside the vocabulary of size {len(self.itos)}")
            token = self.itos[i]
            if strip_special and token in (PAD, SOS, EOS):
                continue
            out.append(token)
        return out

    def __repr__(self) -> str:
        return f"Vocab(size={len(self)}, first={self.itos[4:10]})"


def _flatten(tokens: Iterable) -> Iterable[str]:
    for t in tokens:
        if isinstance(t, str):
            yield t
        else:
            yield from t


def tokenize_chars(text: str) -> list[str]:
    """Split text into characters."""
    return list(text)


_WORD = re.compile(r"[a-z]+(?:'[a-z]+)?")


def tokenize_words(text: str) -> list[str]:
    """Lower-case words (letters and inner apostrophes); punctuation and digits are dropped."""
    return _WORD.findall(text.lower().replace("’", "'"))


def normalize_text(text: str) -> str:
    """Lower-case, keep the letters a-z, and turn every other run of characters into one space.

    This is the 27-symbol alphabet (26 letters and the space) the language models train on.
    """
    return re.sub(r"[^a-z]+", " ", text.lower()).strip()


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
    start = re.search(r"\*\*\* ?START OF (THE|THIS) PROJECT GUTENBERG EBOOK[^\n]*\*\*\*", text)
    end = re.search(r"\*\*\* ?END OF (THE|THIS) PROJECT GUTENBERG EBOOK", text)
    if start is None or end is None:
        raise ValueError("text has no Project Gutenberg START/END markers")
    return text[start.end() : end.start()].strip()


def load_time_machine(download: bool = True) -> str:
    """H. G. Wells, *The Time Machine* (Project Gutenberg #35), without header and licence.

    Returns the raw body text (case and punctuation kept); see :func:`normalize_text`.
    """
    path = fetch(TIME_MACHINE, download=download)
    return strip_gutenberg(path.read_text(encoding="utf-8-sig"))


def split_text(text: str, valid_frac: float = 0.1) -> tuple[str, str]:
    """Split a text into a training head and a held-out tail (no shuffling: no leakage)."""
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

    languages = list(languages or NAME_LOCALES)
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
    out += [f"{w} {fday} {m} {year}", f"le {fday} {m} {year}", f"{day} {m[:4].rstrip('.')}. {year}"]
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
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
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
FASHION_MNIST = {
    "train-images": RemoteFile(
        "train-images-idx3-ubyte.gz", _FMNIST_URL + "train-images-idx3-ubyte.gz",
        "3aede38d61863908ad78613f6a32ed271626dd12800ba2636569512369268a84",
        (f"{_FMNIST_SYSTEM}/train-images-idx3-ubyte.gz",)),
    "train-labels": RemoteFile(
        "train-labels-idx1-ubyte.gz", _FMNIST_URL + "train-labels-idx1-ubyte.gz",
        "a04f17134ac03560a47e3764e11b92fc97de4d1bfaf8ba1a3aa29af54cc90845",
        (f"{_FMNIST_SYSTEM}/train-labels-idx1-ubyte.gz",)),
    "test-images": RemoteFile(
        "t10k-images-idx3-ubyte.gz", _FMNIST_URL + "t10k-images-idx3-ubyte.gz",
        "346e55b948d973a97e58d2351dde16a484bd415d4595297633bb08f03db6a073",
        (f"{_FMNIST_SYSTEM}/t10k-images-idx3-ubyte.gz",)),
    "test-labels": RemoteFile(
        "t10k-labels-idx1-ubyte.gz", _FMNIST_URL + "t10k-labels-idx1-ubyte.gz",
        "67da17c76eaffca5446c3361aaab5c3cd6d1c2608764d35dfb1850b086bf8dd5",
        (f"{_FMNIST_SYSTEM}/t10k-labels-idx1-ubyte.gz",)),
}
FASHION_MNIST_CLASSES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal",
                         "Shirt", "Sneaker", "Bag", "Ankle boot"]


def _read_idx(path: Path) -> np.ndarray:
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    shape = tuple(int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim))
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)


def load_fashion_mnist(split: str = "train", download: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Fashion-MNIST images and labels for ``split`` in ``{"train", "test"}``.

    Returns:
        ``images`` of shape (N, 28, 28), float32 in [0, 1], and ``labels`` of shape (N,), int64.
    """
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    images = _read_idx(fetch(FASHION_MNIST[f"{split}-images"], download=download))
    labels = _read_idx(fetch(FASHION_MNIST[f"{split}-labels"], download=download))
    return (torch.from_numpy(images.astype(np.float32) / 255.0),
            torch.from_numpy(labels.astype(np.int64)))


# ---------------------------------------------------------------------------------------------
# Batching helpers.
# ---------------------------------------------------------------------------------------------


def pad_sequences(
    sequences: Sequence[Sequence[int]], pad_id: int = Vocab.pad_id, max_len: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad integer sequences into one tensor.

    Args:
        sequences: B sequences of ids, of any lengths (empty sequences are allowed).
        pad_id: the id that fills the tail.
        max_len: pad (or truncate) to this length; default: the longest sequence.

    Returns:
        ``padded`` (B, T) int64 and ``lengths`` (B,) int64, the true length of each row.
    """
    if len(sequences) == 0:
        raise ValueError("sequences is empty: need at least one sequence to pad")
    lengths = [len(s) for s in sequences]
    T = max(lengths) if max_len is None else max_len
    padded = torch.full((len(sequences), T), pad_id, dtype=torch.long)
    for i, seq in enumerate(sequences):
        seq = list(seq)[:T]
        if seq:
            padded[i, : len(seq)] = torch.as_tensor(seq, dtype=torch.long)
    return padded, torch.tensor([min(n, T) for n in lengths], dtype=torch.long)


def padding_mask(lengths: torch.Tensor, max_len: int | None = None) -> torch.Tensor:
    """Boolean mask (B, T) that is True at real tokens and False at padding."""
    if lengths.dim() != 1:
        raise ValueError(f"lengths must have shape (B,), got {tuple(lengths.shape)}")
    T = int(lengths.max()) if max_len is None else max_len
    return torch.arange(T, device=lengths.device)[None, :] < lengths[:, None]


def lm_chunks(ids: torch.Tensor, batch_size: int, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Cut a long id stream into aligned language-model chunks for truncated BPTT.

    The stream is split into ``batch_size`` contiguous rows, so chunk k of row b continues chunk
    k-1 of row b (the hidden state can be carried across chunks).

    Returns:
        ``inputs`` and ``targets`` of shape (num_chunks, batch_size, seq_len); targets are the
        inputs shifted by one token.
    """
    if ids.dim() != 1:
        raise ValueError(f"ids must have shape (N,), got {tuple(ids.shape)}")
    n_per_row = (len(ids) - 1) // batch_size
    n_chunks = n_per_row // seq_len
    if n_chunks == 0:
        raise ValueError(
            f"stream of {len(ids)} tokens is too short for batch_size={batch_size}, seq_len={seq_len}"
        )
    usable = n_chunks * seq_len
    x = ids[: batch_size * n_per_row].view(batch_size, n_per_row)[:, :usable]
    y = ids[1 : batch_size * n_per_row + 1].view(batch_size, n_per_row)[:, :usable]
    x = x.view(batch_size, n_chunks, seq_len).transpose(0, 1).contiguous()
    y = y.view(batch_size, n_chunks, seq_len).transpose(0, 1).contiguous()
    return x, y
