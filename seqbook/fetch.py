"""Finding data files: a local copy first, each copy checked by its SHA-256, then a download.

Loaders never assume the internet. :func:`fetch` looks for a local copy first, in this order:

1. the folder named by the environment variable ``SEQBOOK_DATA``;
2. the user cache (``pooch.os_cache("seqbook")``, e.g. ``~/.cache/seqbook``);
3. known system locations (for example a Debian data package);

and only then downloads the file from its canonical public source into the user cache, with a
progress bar and a SHA-256 check (done by ``pooch``). With no local copy and no network it raises
one :class:`DataNotFoundError` that says where to put the file.

Every local copy is checked against its known SHA-256 before it is used (once per process: the
result is remembered by path, size and modification time). A copy that fails the check is never
used: the next place is tried, a damaged file in the user cache is replaced by a fresh download
when downloads are allowed, and if no good copy exists the error lists each bad copy with its
expected and actual hash. The data sets themselves are in :mod:`seqbook.data`.
"""

from __future__ import annotations

import hashlib
import os
import re
import warnings
from dataclasses import dataclass
from pathlib import Path

import pooch

from .checks import check_flag

__all__ = ["DataNotFoundError", "DataFileError", "RemoteFile", "KNOWN_FILES", "cache_dir", "fetch"]


# ---------------------------------------------------------------------------------------------
# Finding files: local first, each copy checked, then a checked download.
# ---------------------------------------------------------------------------------------------


class DataNotFoundError(FileNotFoundError):
    """No good copy of a data file is on disk, and it could not be downloaded."""


class DataFileError(ValueError):
    """A data file was found but its contents are damaged (gzip, idx header, counts, encoding)."""


_SHA256 = re.compile(r"[0-9a-f]{64}")

# Every RemoteFile made so far, so that a copy with the wrong hash can be named by what it is.
KNOWN_FILES: list = []


@dataclass(frozen=True)
class RemoteFile:
    """A data file known by name, canonical address and SHA-256 hash.

    Args:
        fname: the file name (no folder), as it is stored in ``SEQBOOK_DATA`` and the cache.
        url: the canonical address to download it from.
        sha256: the SHA-256 of the canonical file (hex, 64 characters); downloads must match it.
        system_paths: full paths where a system package may have installed the file.
        other_sha256: hashes of other copies known to be good: the same data packaged byte for
            byte differently (for example a re-compressed ``.gz``). Local copies may match any.
    """

    fname: str
    url: str
    sha256: str
    system_paths: tuple[str, ...] = ()
    other_sha256: tuple[str, ...] = ()

    def __post_init__(self):
        fname = self.fname
        if not isinstance(fname, str) or fname in ("", ".", "..") or Path(fname).name != fname:
            raise ValueError(f"fname must be a plain file name such as 'book.txt', got {fname!r}")
        if not isinstance(self.url, str) or not self.url:
            raise ValueError(f"url must be a non-empty str, got {self.url!r}")
        object.__setattr__(self, "sha256", _check_sha256("sha256", self.sha256))
        object.__setattr__(self, "system_paths", _str_tuple("system_paths", self.system_paths))
        hashes = _str_tuple("other_sha256", self.other_sha256)
        object.__setattr__(self, "other_sha256", tuple(_check_sha256("other_sha256", h) for h in hashes))
        KNOWN_FILES.append(self)

    @property
    def known_hashes(self) -> tuple[str, ...]:
        """Every SHA-256 a good copy may have: ``sha256`` first, then ``other_sha256``."""
        return (self.sha256,) + self.other_sha256


def _check_sha256(name: str, value) -> str:
    if not isinstance(value, str) or not _SHA256.fullmatch(value.lower()):
        raise ValueError(f"{name} must be a SHA-256 in hex (64 characters 0-9a-f), got {value!r}")
    return value.lower()


def _str_tuple(name: str, values) -> tuple[str, ...]:
    if isinstance(values, (str, bytes, os.PathLike)) or not isinstance(values, (tuple, list)):
        raise TypeError(f"{name} must be a tuple of str, got {type(values).__name__} {values!r}")
    for v in values:
        if not isinstance(v, (str, os.PathLike)):
            raise TypeError(f"{name} must be a tuple of str, got an entry {type(v).__name__} {v!r}")
    return tuple(str(v) for v in values)


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


_HASHES: dict[tuple[str, int, int], str] = {}  # (path, size, mtime_ns) -> sha256, once per process


def _sha256(path: Path) -> str:
    """SHA-256 of a file, computed once per process for each (path, size, mtime)."""
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key not in _HASHES:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        _HASHES[key] = h.hexdigest()
    return _HASHES[key]


def _known_as(sha: str) -> str:
    """' (it is <other file>)' when ``sha`` is the hash of another file of :data:`KNOWN_FILES`."""
    for remote in KNOWN_FILES:
        if sha in remote.known_hashes:
            return f" (it is {remote.fname!r})"
    return ""


def fetch(remote: RemoteFile, download: bool = True) -> Path:
    """Return a local path to a good copy of ``remote``, downloading it into the user cache if needed.

    Each local copy is checked against ``remote``'s known SHA-256 hashes; a copy that does not
    match is skipped (with a warning if a good copy is found elsewhere), so a damaged file never
    shadows a good one. A damaged copy in the user cache is replaced by the download.

    Args:
        remote: the file to find.
        download: if False, never touch the network.

    Raises:
        DataNotFoundError: no good local copy exists and the download failed (or was not allowed).
            The message lists the places the file may be put and every damaged copy found, with
            its expected and actual SHA-256.
    """
    if not isinstance(remote, RemoteFile):
        raise TypeError(f"remote must be a RemoteFile, got {type(remote).__name__}")
    download = check_flag("download", download)
    candidates = _local_candidates(remote)
    bad = []
    for path in candidates:
        if not path.is_file():
            continue
        try:
            actual = _sha256(path)
        except OSError as exc:  # unreadable: try the next place
            bad.append(f"{path}: could not be read ({exc})")
            continue
        if actual in remote.known_hashes:
            if bad:
                warnings.warn(f"skipped damaged copies of {remote.fname!r}, using {path}:\n  "
                              + "\n  ".join(bad), stacklevel=2)
            return path
        expected = " or ".join(remote.known_hashes)
        bad.append(f"{path}: sha256 {actual}, expected {expected}{_known_as(actual)}")
    error = None
    if download:
        try:
            path = pooch.retrieve(  # replaces a damaged cached copy once the new one is verified
                url=remote.url,
                known_hash=f"sha256:{remote.sha256}",
                fname=remote.fname,
                path=cache_dir(),
                progressbar=_progressbar_wanted(),
            )
            if bad:
                warnings.warn(f"found damaged copies of {remote.fname!r}, downloaded a good one to "
                              f"{path}:\n  " + "\n  ".join(bad), stacklevel=2)
            return Path(path)
        except Exception as exc:  # no network, HTTP error, or a wrong checksum
            error = exc
    where = "\n  ".join(str(p) for p in candidates)
    reason = f"the download from {remote.url} failed ({error})" if error else "downloads are off"
    found = ""
    if bad:
        found = ("\nThese copies were found but are damaged or are a different file; delete them or replace "
                 f"them with the original from {remote.url}:\n  " + "\n  ".join(bad))
    what = f"no good copy of {remote.fname!r} was found" if bad else f"{remote.fname!r} was not found"
    raise DataNotFoundError(
        f"{what} and {reason}.{found}\n"
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
