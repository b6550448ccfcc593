"""Vocabularies and tokenizers: text to ids and back.

:class:`Vocab` maps tokens to ids, with four reserved tokens first (``<pad> <unk> <sos> <eos>``);
:func:`tokenize_chars` and :func:`tokenize_words` cut text into tokens; :func:`decode_ids`
turns ids back into a string.
"""

from __future__ import annotations

import numbers
import re
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np
import torch

from .checks import INTEGER_DTYPES, check_flag, check_ids, check_int, check_str, checked

__all__ = [
    "PAD", "UNK", "SOS", "EOS", "RESERVED", "Vocab", "tokenize_chars", "tokenize_words",
    "normalize_text", "check_vocab", "decode_ids",
]


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
        max_size: keep at most this many tokens besides the reserved ones (0 keeps only those).

    Example:
        >>> v = Vocab(list("hello"))
        >>> v.decode(v.encode(list("hello")))
        ['h', 'e', 'l', 'l', 'o']
    """

    def __init__(self, tokens: Iterable = (), min_freq: int = 1, max_size: int | None = None):
        min_freq = check_int("min_freq", min_freq, minimum=1)
        if max_size is not None:
            max_size = check_int("max_size", max_size, minimum=0)
        if tokens is None or not isinstance(tokens, Iterable):
            raise TypeError(f"tokens must be an iterable of str, got {type(tokens).__name__}")
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
        """Whether ``token`` has its own id (anything but a str never has one)."""
        return isinstance(token, str) and token in self.stoi

    def __getitem__(self, token: str) -> int:
        """The id of ``token``; ``<unk>``'s id if it is not in the vocabulary."""
        return self.stoi.get(check_str("token", token), self.unk_id)

    @checked(add_sos=check_flag, add_eos=check_flag)
    def encode(self, tokens: Sequence[str], add_sos: bool = False, add_eos: bool = False) -> list[int]:
        """Map tokens to ids; unknown tokens map to ``<unk>``.

        A plain string is read as a sequence of characters, so ``encode("abc")`` equals
        ``encode(list("abc"))``. That reading only makes sense for a character vocabulary: if the
        vocabulary has a token longer than one character, a string is refused (pass a list of
        tokens, e.g. ``tokenize_words(text)``).
        """
        if isinstance(tokens, str):
            longer = next((t for t in self.itos[len(RESERVED):] if len(t) > 1), None)
            if longer is not None:
                raise TypeError(
                    f"tokens must be a list of tokens for this vocabulary, which has multi-character tokens "
                    f"such as {longer!r}; got the str {tokens[:20]!r} (use e.g. tokenize_words(text))"
                )
            tokens = list(tokens)  # a plain string is read as a sequence of characters
        elif tokens is None or not isinstance(tokens, Iterable):
            raise TypeError(f"tokens must be a sequence of str, got {type(tokens).__name__}")
        ids = []
        for k, t in enumerate(tokens):
            if not isinstance(t, str):
                raise TypeError(f"tokens must hold str tokens, got {type(t).__name__} {t!r} at position {k}"
                                " (to map ids back to tokens use decode)")
            ids.append(self.stoi.get(t, self.unk_id))
        return ([self.sos_id] if add_sos else []) + ids + ([self.eos_id] if add_eos else [])

    def decode(self, ids: Iterable[int], strip_special: bool = False) -> list[str]:
        """Map ids back to tokens; with ``strip_special`` drop ``<pad> <sos> <eos>``.

        ``ids`` is a 1-D integer tensor or array, or an iterable of ints (0-d integer tensors too).
        """
        strip_special = check_flag("strip_special", strip_special)
        if isinstance(ids, (torch.Tensor, np.ndarray)):
            if ids.ndim != 1:
                raise ValueError(f"ids must be 1-D, got shape {tuple(ids.shape)}")
            integer = ids.dtype in INTEGER_DTYPES if isinstance(ids, torch.Tensor) else ids.dtype.kind in "iu"
            if not integer:
                raise TypeError(f"ids must be an integer tensor or array, got {ids.dtype}")
            ids = ids.tolist()
        elif isinstance(ids, (str, bytes)) or ids is None or not isinstance(ids, Iterable):
            raise TypeError(f"ids must be a sequence of ints, got {type(ids).__name__}")
        out = []
        for k, i in enumerate(ids):
            if isinstance(i, (torch.Tensor, np.ndarray)) and i.ndim == 0:
                i = i.item()  # a 0-d tensor, e.g. labels[k]
            if isinstance(i, (bool, np.bool_)) or not isinstance(i, numbers.Integral):
                raise TypeError(f"ids must hold ints, got {type(i).__name__} {i!r} at position {k}")
            if not 0 <= i < len(self.itos):
                raise _IdOutOfRange(f"id {i} is outside the vocabulary of size {len(self.itos)}: ids must "
                                    f"be in [0, {len(self.itos) - 1}]")
            token = self.itos[i]
            if strip_special and token in (PAD, SOS, EOS):
                continue
            out.append(token)
        return out

    def __repr__(self) -> str:
        return f"Vocab(size={len(self)}, first={self.itos[4:10]})"


class _IdOutOfRange(ValueError, IndexError):
    """An id outside the vocabulary: a ValueError, and an IndexError as it always was."""


def _flatten(tokens: Iterable) -> Iterable[str]:
    for t in tokens:
        if isinstance(t, str):
            yield t
        elif isinstance(t, Iterable) and not isinstance(t, (bytes, torch.Tensor, np.ndarray)):
            for u in t:
                if not isinstance(u, str):
                    raise TypeError(f"tokens must hold str or lists of str, got {type(u).__name__} {u!r}")
                yield u
        else:
            raise TypeError(f"tokens must hold str or lists of str, got {type(t).__name__} {t!r}")


def tokenize_chars(text: str) -> list[str]:
    """Split text into characters."""
    return list(check_str("text", text))


_WORD = re.compile(r"[a-z]+(?:'[a-z]+)?")


def tokenize_words(text: str) -> list[str]:
    """Lower-case words (letters and inner apostrophes); punctuation and digits are dropped."""
    return _WORD.findall(check_str("text", text).lower().replace("’", "'"))


def normalize_text(text: str) -> str:
    """Lower-case, keep the letters a-z, and turn every other run of characters into one space.

    This is the 27-symbol alphabet (26 letters and the space) the language models train on.
    """
    return re.sub(r"[^a-z]+", " ", check_str("text", text).lower()).strip()


def check_vocab(name: str, vocab) -> None:
    if not isinstance(vocab, Vocab):
        raise TypeError(f"{name} must be a seqbook.vocab.Vocab, got {type(vocab).__name__}")


def decode_ids(ids: Sequence[int] | torch.Tensor, vocab: Vocab) -> str:
    """Ids -> string: stops at the first ``<eos>`` and skips ``<pad>`` and ``<sos>``."""
    check_vocab("vocab", vocab)
    if isinstance(ids, torch.Tensor):
        if ids.dim() != 1:
            raise ValueError(f"ids must have shape (T,), got {tuple(ids.shape)}")
        check_ids("ids", ids, nonempty=False)
        ids = ids.tolist()
    if isinstance(ids, str) or not isinstance(ids, Sequence):
        raise TypeError(f"ids must be a 1-D tensor or a list of ints, got {type(ids).__name__}")
    for i in ids:
        if isinstance(i, bool) or not isinstance(i, int | np.integer) or not 0 <= i < len(vocab):
            raise ValueError(f"ids must hold ints in [0, {len(vocab) - 1}], found {i!r}")
    chars = []
    for i in ids:
        if i == Vocab.eos_id:
            break
        if i in (Vocab.pad_id, Vocab.sos_id):
            continue
        chars.append(vocab.itos[i])
    return "".join(chars)
