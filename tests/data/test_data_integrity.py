"""The data layer under corruption: damaged, edited, swapped and shadowing copies of data files.

Every scenario runs on small files written under ``tmp_path``, with its own ``SEQBOOK_DATA``, its own
user cache and, for downloads, a local HTTP server on 127.0.0.1: nothing touches the network, and
the real data folders are only read. The last tests check the real files' hashes where installed.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import http.server
import os
import threading
from functools import partial
from pathlib import Path

import numpy as np
import pytest
import torch

from seqbook import data, fetch
from seqbook.fetch import DataFileError, DataNotFoundError, RemoteFile

TEXT = (b"The Project Gutenberg eBook of The Time Machine\n"
        b"*** START OF THE PROJECT GUTENBERG EBOOK THE TIME MACHINE ***\n"
        b"The Time Machine\n\nThe Time Traveller was expounding a recondite matter to us.\n"
        b"*** END OF THE PROJECT GUTENBERG EBOOK THE TIME MACHINE ***\nlicence\n")
BODY = "The Time Machine\n\nThe Time Traveller was expounding a recondite matter to us."


def sha(content: bytes) -> str:
    return hashlib.sha256(content).hexdigest()


# --- fixtures: isolated folders and a local server -------------------------------------------------


@pytest.fixture
def places(tmp_path, monkeypatch):
    """Empty ``SEQBOOK_DATA``, user cache, system folder and web root, all under ``tmp_path``."""
    dirs = {name: tmp_path / name for name in ("env", "cache", "system", "www")}
    for d in dirs.values():
        d.mkdir()
    monkeypatch.setenv("SEQBOOK_DATA", str(dirs["env"]))
    monkeypatch.setenv("TQDM_DISABLE", "1")
    monkeypatch.setattr(fetch, "cache_dir", lambda: dirs["cache"])
    return dirs


@pytest.fixture
def server(places):
    """A local HTTP server over ``places['www']``; yields its base URL."""
    handler = partial(http.server.SimpleHTTPRequestHandler, directory=str(places["www"]))
    handler.log_message = lambda *args: None
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=partial(httpd.serve_forever, poll_interval=0.05), daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture
def book(places, server, monkeypatch):
    """A small Gutenberg text served locally, standing in for The Time Machine (sha256 of TEXT)."""
    (places["www"] / "timemachine.txt").write_bytes(TEXT)
    remote = RemoteFile("timemachine.txt", f"{server}/timemachine.txt", sha(TEXT))
    monkeypatch.setattr(data, "TIME_MACHINE", remote)
    return remote


def trust(monkeypatch, content: bytes):
    """Make ``content`` the known hash of the Time Machine file: the content checks must catch it."""
    monkeypatch.setattr(data, "TIME_MACHINE", dataclasses.replace(data.TIME_MACHINE, sha256=sha(content)))


# --- The Time Machine: edited, non-UTF-8, tampered cache ---------------------------------------------


def test_good_copy_in_seqbook_data_is_used(book, places):
    (places["env"] / "timemachine.txt").write_bytes(TEXT)
    assert data.load_time_machine(download=False) == BODY


def test_edited_text_is_refused_with_path_and_both_hashes(book, places):
    edited = TEXT.replace(b"recondite", b"difficult")  # markers intact, one word changed
    path = places["env"] / "timemachine.txt"
    path.write_bytes(edited)
    with pytest.raises(DataNotFoundError) as info:
        data.load_time_machine(download=False)
    message = str(info.value)
    for word in (str(path), sha(edited), sha(TEXT), "delete them or replace them", book.url,
                 "downloads are off"):
        assert word in message
    assert path.read_bytes() == edited  # never changed


def test_edited_text_in_seqbook_data_does_not_block_a_good_download(book, places):
    edited = TEXT.replace(b"recondite", b"difficult")
    (places["env"] / "timemachine.txt").write_bytes(edited)
    with pytest.warns(UserWarning, match="damaged copies of 'timemachine.txt'"):
        assert data.load_time_machine() == BODY
    assert (places["cache"] / "timemachine.txt").read_bytes() == TEXT
    assert (places["env"] / "timemachine.txt").read_bytes() == edited


def test_tampered_cache_is_replaced_by_a_good_download(book, places):
    cached = places["cache"] / "timemachine.txt"
    cached.write_bytes(TEXT.replace(b"Traveller", b"Travellor"))
    with pytest.warns(UserWarning, match=str(cached)):
        assert data.load_time_machine() == BODY
    assert cached.read_bytes() == TEXT
    assert data.load_time_machine() == BODY  # now good: no warning, no download needed


def test_tampered_cache_with_downloads_off_names_the_file(book, places):
    cached = places["cache"] / "timemachine.txt"
    bad = TEXT + b"extra line\n"
    cached.write_bytes(bad)
    with pytest.raises(DataNotFoundError, match="no good copy of 'timemachine.txt'") as info:
        data.load_time_machine(download=False)
    assert str(cached) in str(info.value) and sha(bad) in str(info.value)
    assert cached.read_bytes() == bad


def test_tampered_cache_and_a_bad_server_keep_the_cache_as_it_was(book, places):
    cached = places["cache"] / "timemachine.txt"
    bad = TEXT + b"extra line\n"
    cached.write_bytes(bad)
    (places["www"] / "timemachine.txt").write_bytes(b"not the book")  # the server is wrong too
    with pytest.raises(DataNotFoundError) as info:
        data.load_time_machine()
    message = str(info.value)
    assert "download from" in message and "failed" in message and str(cached) in message
    assert cached.read_bytes() == bad


def test_good_seqbook_data_copy_wins_over_a_damaged_cache(book, places, recwarn):
    (places["env"] / "timemachine.txt").write_bytes(TEXT)
    (places["cache"] / "timemachine.txt").write_bytes(b"damaged")
    assert fetch.fetch(data.TIME_MACHINE, download=False) == places["env"] / "timemachine.txt"
    assert not recwarn.list  # the damaged cache is never looked at


def test_a_folder_in_place_of_the_file_is_skipped(book, places):
    (places["env"] / "timemachine.txt").mkdir()
    with pytest.raises(DataNotFoundError, match="downloads are off"):
        data.load_time_machine(download=False)


def test_non_utf8_text_is_refused_by_its_hash(book, places):
    path = places["env"] / "timemachine.txt"
    path.write_bytes(TEXT.replace(b"recondite", b"r\xe9condite"))
    with pytest.raises(DataNotFoundError, match="sha256"):
        data.load_time_machine(download=False)


def test_non_utf8_text_gives_an_error_naming_the_file(book, places, monkeypatch):
    """Even a file whose hash is trusted is decoded with a clear error."""
    content = TEXT.replace(b"recondite", b"r\xe9condite")
    path = places["env"] / "timemachine.txt"
    path.write_bytes(content)
    trust(monkeypatch, content)
    with pytest.raises(DataFileError, match="not UTF-8") as info:
        data.load_time_machine(download=False)
    assert str(path) in str(info.value) and "0xe9" in str(info.value)


def test_text_without_markers_gives_an_error_naming_the_file(book, places, monkeypatch):
    content = b"just some text\n"
    path = places["env"] / "timemachine.txt"
    path.write_bytes(content)
    trust(monkeypatch, content)
    with pytest.raises(DataFileError, match="START/END") as info:
        data.load_time_machine(download=False)
    assert str(path) in str(info.value)


# --- hashing once per process ---------------------------------------------------------------------------


def test_each_file_is_hashed_once_until_it_changes(book, places, monkeypatch):
    path = places["env"] / "timemachine.txt"
    path.write_bytes(TEXT)
    calls = []
    real = hashlib.sha256

    def counting(*args):
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(fetch.hashlib, "sha256", counting)
    for _ in range(3):
        assert fetch.fetch(data.TIME_MACHINE, download=False) == path
    assert len(calls) == 1
    # the same size, another content and time stamp: hashed again, and refused
    path.write_bytes(TEXT.replace(b"Time Traveller", b"Time Travellor"))
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    with pytest.raises(DataNotFoundError, match="sha256"):
        fetch.fetch(data.TIME_MACHINE, download=False)
    assert len(calls) == 2


# --- Fashion-MNIST: small idx files that stand in for the real ones ---------------------------------------

SIZES = {"train": 5, "test": 3}


def idx(array, magic: int | None = None, shape=None) -> bytes:
    """The bytes of an idx file holding ``array`` (``magic`` and ``shape`` may be forged)."""
    a = np.asarray(array, dtype=np.uint8)
    shape = a.shape if shape is None else shape
    magic = 0x0800 + len(shape) if magic is None else magic
    return magic.to_bytes(4, "big") + b"".join(n.to_bytes(4, "big") for n in shape) + a.tobytes()


def gz(content: bytes) -> bytes:
    return gzip.compress(content, mtime=0)


def good_files() -> dict[str, bytes]:
    rng = np.random.default_rng(0)
    return {f"{split}-{kind}": gz(idx(rng.integers(0, 256, (n, 28, 28)) if kind == "images"
                                      else np.arange(n) % 10))
            for split, n in SIZES.items() for kind in ("images", "labels")}


@pytest.fixture
def fmnist(places, monkeypatch):
    """Good small Fashion-MNIST files in the system folder; returns their bytes by key."""
    files = good_files()
    for key, content in files.items():
        remote = data.FASHION_MNIST[key]
        (places["system"] / remote.fname).write_bytes(content)
        monkeypatch.setitem(data.FASHION_MNIST, key, RemoteFile(
            remote.fname, f"http://127.0.0.1:9/{remote.fname}", sha(content),
            (str(places["system"] / remote.fname),)))
    monkeypatch.setattr(data, "_FMNIST_SIZES", SIZES)
    return files


def install(places, monkeypatch, key: str, content: bytes, trusted: bool = True) -> Path:
    """Put ``content`` as the system copy of ``key``; with ``trusted`` also make it the known hash,
    so that only the content checks stand between it and the user."""
    remote = data.FASHION_MNIST[key]
    path = places["system"] / remote.fname
    path.write_bytes(content)
    if trusted:
        monkeypatch.setitem(data.FASHION_MNIST, key, dataclasses.replace(remote, sha256=sha(content)))
    return path


def test_small_fashion_mnist_loads(fmnist):
    images, labels = data.load_fashion_mnist("test", download=False)
    assert images.shape == (3, 28, 28) and images.dtype == torch.float32
    assert labels.tolist() == [0, 1, 2] and labels.dtype == torch.int64


IMAGES = np.zeros((3, 28, 28))
DAMAGED = {  # name: (key, content, words in the message)
    "truncated-gzip": ("test-images", lambda f: f["test-images"][:-20], ("gzip",)),
    "not-gzip": ("test-labels", lambda f: idx(np.arange(3)), ("gzip", "BadGzipFile")),
    "empty-file": ("test-labels", lambda f: b"", ("0 bytes", "idx header")),
    "gzip-of-nothing": ("test-images", lambda f: gz(b""), ("0 bytes",)),
    "truncated-payload": ("test-images", lambda f: gz(idx(IMAGES)[:-100]), ("truncated", "(3, 28, 28)")),
    "truncated-header": ("test-images", lambda f: gz(idx(IMAGES)[:10]), ("idx header",)),
    "wrong-magic": ("test-labels", lambda f: gz(idx(np.arange(3), magic=0x0B01)), ("magic number 2049",
                                                                                   "2817")),
    "labels-file-holds-images": ("test-labels", lambda f: f["test-images"], ("2049", "got 2051",
                                                                             "idx images file")),
    "images-file-holds-labels": ("test-images", lambda f: f["test-labels"], ("2051", "got 2049",
                                                                             "idx labels file")),
    "images-of-27x28": ("test-images", lambda f: gz(idx(np.zeros((3, 27, 28)))),
                        ("(N, 28, 28)", "(3, 27, 28)")),
    "train-images-under-test-name": ("test-images", lambda f: f["train-images"], ("5 images", "expected 3",
                                                                                  "other split")),
    "images-and-labels-disagree": ("test-labels", lambda f: gz(idx(np.arange(4))),
                                   ("4 labels", "expected 3")),
    "label-out-of-range": ("test-labels", lambda f: gz(idx([0, 10, 1])), ("label 10", "0-9")),
}


@pytest.mark.parametrize("name", sorted(DAMAGED))
def test_damaged_fashion_mnist_file_is_refused_by_its_hash(name, fmnist, places, monkeypatch):
    key, make, _ = DAMAGED[name]
    content = make(fmnist)
    path = install(places, monkeypatch, key, content, trusted=False)
    with pytest.raises(DataNotFoundError) as info:
        data.load_fashion_mnist("test", download=False)
    message = str(info.value)
    assert str(path) in message and sha(content) in message and data.FASHION_MNIST[key].sha256 in message
    assert path.read_bytes() == content


@pytest.mark.parametrize("name", sorted(DAMAGED))
def test_damaged_fashion_mnist_file_is_refused_by_its_contents(name, fmnist, places, monkeypatch):
    """With a hash that matches (a wrong known hash), the contents are still checked."""
    key, make, words = DAMAGED[name]
    path = install(places, monkeypatch, key, make(fmnist))
    with pytest.raises(DataFileError) as info:
        data.load_fashion_mnist("test", download=False)
    message = str(info.value)
    for word in (str(path), *words):
        assert word in message


def test_swapped_file_is_named_by_what_it_holds(fmnist, places, monkeypatch):
    install(places, monkeypatch, "test-labels", fmnist["test-images"], trusted=False)
    with pytest.raises(DataNotFoundError, match="it is 't10k-images-idx3-ubyte.gz'"):
        data.load_fashion_mnist("test", download=False)


def test_bad_copy_in_seqbook_data_does_not_shadow_a_good_system_copy(fmnist, places):
    bad = places["env"] / "t10k-labels-idx1-ubyte.gz"
    bad.write_bytes(gz(idx(np.arange(7))))
    with pytest.warns(UserWarning, match=str(bad)):
        images, labels = data.load_fashion_mnist("test", download=False)
    assert labels.tolist() == [0, 1, 2]


def test_bad_copy_in_seqbook_data_and_no_other_lists_what_was_found(fmnist, places, monkeypatch):
    remote = data.FASHION_MNIST["test-labels"]
    monkeypatch.setitem(data.FASHION_MNIST, "test-labels", dataclasses.replace(remote, system_paths=()))
    bad = places["env"] / remote.fname
    bad.write_bytes(b"junk")
    with pytest.raises(DataNotFoundError) as info:
        data.load_fashion_mnist("test", download=False)
    message = str(info.value)
    for word in (str(bad), sha(b"junk"), remote.sha256, "delete them or replace them", "Put a copy"):
        assert word in message


def test_other_known_hash_is_accepted_for_local_copies(fmnist, places, monkeypatch):
    """A re-packaged copy (another gzip header, the same data) is good when its hash is listed."""
    remote = data.FASHION_MNIST["test-labels"]
    repacked = gzip.compress(gzip.decompress(fmnist["test-labels"]), mtime=12345)
    path = install(places, monkeypatch, "test-labels", repacked, trusted=False)
    with pytest.raises(DataNotFoundError):
        fetch.fetch(data.FASHION_MNIST["test-labels"], download=False)
    monkeypatch.setitem(data.FASHION_MNIST, "test-labels",
                        dataclasses.replace(remote, other_sha256=(sha(repacked),)))
    assert fetch.fetch(data.FASHION_MNIST["test-labels"], download=False) == path


# --- the real files, where installed ----------------------------------------------------------------------


def test_time_machine_hash_matches_the_installed_copy():
    folder = os.environ.get("SEQBOOK_DATA")
    path = Path(folder or "/nonexistent") / data.TIME_MACHINE.fname
    if not path.is_file():
        pytest.skip("no timemachine.txt in SEQBOOK_DATA")
    assert sha(path.read_bytes()) == data.TIME_MACHINE.sha256


DEBIAN_TIME_STAMPS = {"train-images": 1504176606, "train-labels": 1504176606,
                      "test-images": 1504176627, "test-labels": 1504176627}


@pytest.mark.parametrize("key", sorted(data.FASHION_MNIST))
def test_debian_fashion_mnist_is_the_canonical_data(key):
    """The Debian files differ from the canonical downloads only in the gzip header: putting back the
    stored name and the original time stamp gives the canonical file, byte for byte."""
    remote = data.FASHION_MNIST[key]
    path = Path(remote.system_paths[0])
    if not path.is_file():
        pytest.skip("the Debian package dataset-fashion-mnist is not installed")
    content = path.read_bytes()
    assert sha(content) in remote.other_sha256
    assert content[:4] == b"\x1f\x8b\x08\x00"  # gzip, deflate, no stored name
    name = remote.fname.removesuffix(".gz").encode() + b"\x00"
    canonical = (b"\x1f\x8b\x08\x08" + DEBIAN_TIME_STAMPS[key].to_bytes(4, "little") + b"\x00\x03" + name
                 + content[10:])
    assert sha(canonical) == remote.sha256


def test_bad_copy_in_seqbook_data_does_not_shadow_the_debian_files(places):
    remote = data.FASHION_MNIST["test-labels"]
    if not Path(remote.system_paths[0]).is_file():
        pytest.skip("the Debian package dataset-fashion-mnist is not installed")
    bad = places["env"] / remote.fname
    bad.write_bytes(gz(idx(np.arange(10_000) % 10)))
    with pytest.warns(UserWarning, match=str(bad)):
        images, labels = data.load_fashion_mnist("test", download=False)
    assert images.shape == (10_000, 28, 28) and labels.shape == (10_000,)
    assert torch.bincount(labels).tolist() == [1000] * 10
