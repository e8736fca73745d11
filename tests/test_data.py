import functools
import hashlib
import http.server
import io
import os
import pickle
import tarfile
import threading
import time

import numpy as np
import pytest
import torch

from cnnlab import data
from cnnlab.data import images as image_data


def _fake_cifar_archive(n_per_batch=4, replace=None) -> bytes:
    """A tarball in CIFAR-10's python layout (5 train batches, 1 test batch), tiny; ``replace`` maps a batch
    name to the bytes to store instead of that batch."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
            rng = np.random.default_rng(len(name))
            batch = {b"data": rng.integers(0, 256, (n_per_batch, 3072), dtype=np.uint8),
                     b"labels": rng.integers(0, 10, n_per_batch).tolist()}
            payload = (replace or {}).get(name, pickle.dumps(batch))
            info = tarfile.TarInfo(f"cifar-10-batches-py/{name}")
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
    return buf.getvalue()


def _fake_cifar_meta(url, archive: bytes) -> dict:
    """CIFAR-10's table entry pointing at ``archive``, with the MD5s of its batch files (the published ones
    cannot match fake data)."""
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        md5s = {member.name.split("/")[-1]: hashlib.md5(tar.extractfile(member).read()).hexdigest()
                for member in tar.getmembers()}
    return dict(image_data.CIFAR_ARCHIVES["cifar10"], url=url, md5=hashlib.md5(archive).hexdigest(), files_md5=md5s)


@pytest.fixture
def serve(tmp_path):
    """Serve bytes on a loopback HTTP server; yields a function that returns the file's URL."""
    servers = []

    def start(content: bytes, name="archive.tar.gz", delay_s: float = 0.0):
        """``delay_s``: the server waits this long between the headers and the file (a slow network)."""
        (tmp_path / "www").mkdir(exist_ok=True)
        (tmp_path / "www" / name).write_bytes(content)

        class Handler(http.server.SimpleHTTPRequestHandler):
            def copyfile(self, source, outputfile):
                time.sleep(delay_s)
                super().copyfile(source, outputfile)

            def log_message(self, *args):
                pass

        handler = functools.partial(Handler, directory=str(tmp_path / "www"))
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}/{name}"

    yield start
    for server in servers:
        server.shutdown()


def test_offline_cifar10_fails_fast_and_clearly(tmp_path, monkeypatch):
    # ".invalid" never resolves (RFC 2606): the same failure as a machine with no network.
    meta = dict(image_data.CIFAR_ARCHIVES["cifar10"], url="http://cnnlab.invalid/cifar-10-python.tar.gz")
    monkeypatch.setitem(image_data.CIFAR_ARCHIVES, "cifar10", meta)
    start = time.perf_counter()
    with pytest.raises(data.DatasetUnavailableError) as err:
        data.load("cifar10", root=tmp_path)
    assert time.perf_counter() - start < 5
    message = str(err.value)
    assert meta["url"] in message and "cifar-10-python.tar.gz" in message and str(tmp_path) in message
    assert "synthetic=True" in message
    assert list(tmp_path.iterdir()) == []  # no half-written files


def test_download_verifies_checksum_and_keeps_nothing_on_mismatch(tmp_path, serve, monkeypatch):
    archive = _fake_cifar_archive()
    url = serve(archive)
    bad = dict(image_data.CIFAR_ARCHIVES["cifar10"], url=url, md5="0" * 32)
    monkeypatch.setitem(image_data.CIFAR_ARCHIVES, "cifar10", bad)
    with pytest.raises(data.DatasetUnavailableError, match="md5"):
        data.load("cifar10", root=tmp_path / "root")
    assert list((tmp_path / "root").iterdir()) == []


def test_real_cifar_loader_downloads_extracts_and_reads(tmp_path, serve, monkeypatch):
    archive = _fake_cifar_archive(n_per_batch=4)
    meta = _fake_cifar_meta(serve(archive), archive)
    monkeypatch.setitem(image_data.CIFAR_ARCHIVES, "cifar10", meta)
    train = data.load("cifar10", "train", root=tmp_path)
    test = data.load("cifar10", "test", root=tmp_path)
    assert (len(train), len(test)) == (20, 4)
    image, label = train[0]
    assert image.shape == (3, 32, 32) and image.dtype == torch.float32 and 0 <= int(label) < 10
    assert train.data_source == "real"
    assert not list(tmp_path.glob("*.part"))


def _fake_imdb_archive() -> bytes:
    """A tarball in aclImdb's layout: one review per split and label."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for split in ("train", "test"):
            for label, words in (("neg", "bad awful"), ("pos", "good great")):
                payload = f"a {words} film".encode()
                info = tarfile.TarInfo(f"aclImdb/{split}/{label}/0_1.txt")
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))
    return buf.getvalue()


@pytest.mark.parametrize("name, stage", [("cifar10", "download"), ("cifar10", "extract"), ("imdb", "download")])
def test_two_loads_of_one_dataset_at_once_take_turns_and_both_get_the_data(tmp_path, serve, monkeypatch, capsys,
                                                                            name, stage):
    import concurrent.futures
    import tarfile as tarfile_module

    from cnnlab.data import storage, text

    if name == "cifar10":
        archive = _fake_cifar_archive(n_per_batch=4)
        meta = _fake_cifar_meta(serve(archive, delay_s=0.5), archive)
        monkeypatch.setitem(image_data.CIFAR_ARCHIVES, "cifar10", meta)
        path, md5 = tmp_path / "root" / meta["file"], meta["md5"]
    else:
        archive = _fake_imdb_archive()
        monkeypatch.setattr(text, "REVIEWS_PER_LABEL", 1)
        monkeypatch.setattr(text, "IMDB_URL", serve(archive, delay_s=0.5))
        monkeypatch.setattr(text, "IMDB_MD5", md5 := hashlib.md5(archive).hexdigest())
        path = tmp_path / "root" / "aclImdb_v1.tar.gz"
    if stage == "extract":  # the archive is here already: both extract it at once, each slowly
        path.parent.mkdir()
        path.write_bytes(archive)
        extractall = tarfile_module.TarFile.extractall

        def slow(self, *args, **kwargs):
            time.sleep(0.5)
            return extractall(self, *args, **kwargs)

        monkeypatch.setattr(tarfile_module.TarFile, "extractall", slow)
    options = dict(vocab_size=50, seq_len=8) if name == "imdb" else {}
    start = threading.Barrier(2)

    def load():
        start.wait()
        return data.load(name, "train", root=tmp_path / "root", **options)

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        loads = [pool.submit(load) for _ in range(2)]
        first, second = [f.result(timeout=60) for f in loads]
    assert len(first) == len(second) == (20 if name == "cifar10" else 2)
    assert torch.equal(first.labels, second.labels) and first.data_source == second.data_source == "real"
    assert storage.md5sum(path) == md5  # one whole archive, not two writers' bytes mixed
    said = capsys.readouterr().err  # the second said why it waited, and for whom
    assert f"{name}: another process (pid {os.getpid()}) is downloading or preparing it" in said and "waiting" in said
    assert not list(path.parent.glob("*.part")) and not list(path.parent.glob(".*.lock"))  # nothing left behind


def test_digits_is_real_offline_data():
    train, test = data.load("digits", "train"), data.load("digits", "test")
    assert (len(train), len(test)) == (837, 960) == (data.info("digits").train_size, data.info("digits").test_size)
    assert train.data_source == "real" and train.num_classes == 10
    # stratified: every class has about as many test images as its share of the 1,797 (no class left out of either)
    assert set(test.labels.tolist()) == set(range(10)) and max(test.labels.bincount()) - min(test.labels.bincount()) < 10
    x, _ = train[0]
    assert x.shape == (3, 32, 32)
    assert set(train.labels.tolist()) == set(range(10))


def test_synthetic_only_when_asked_and_labelled():
    ds = data.load("cifar100", "train", synthetic=True, synthetic_size=50)
    assert ds.data_source == "synthetic" and ds.num_classes == 100 and len(ds) == 50
    assert ds[0][0].shape == (3, 32, 32)
    text = data.load("imdb", "train", synthetic=True, synthetic_size=100, seq_len=32)
    ids, label = text[0]
    assert text.data_source == "synthetic" and ids.shape == (32,) and ids.dtype == torch.long


def test_synthetic_sentiment_labels_depend_on_words():
    ds = data.load("imdb", "test", synthetic=True, synthetic_size=2000, seq_len=64)
    positive = ((ds.ids >= 2) & (ds.ids < 52)).sum(1)
    negative = ((ds.ids >= 52) & (ds.ids < 102)).sum(1)
    guess = (positive > negative).long()
    assert (guess == ds.labels).float().mean() > 0.85  # a word-counting reader beats guessing by far


def test_imdb_tokenize_vocab_encode():
    from cnnlab.data import text

    docs = [text.tokenize("Great movie!<br />Great acting."), text.tokenize("bad")]
    assert docs[0] == ["great", "movie", "great", "acting"]
    vocab = text.build_vocab(docs, vocab_size=4)
    assert vocab["great"] == 2 and len(vocab) == 2
    ids, lengths = text.encode(docs, vocab, seq_len=3)
    assert ids.tolist()[0] == [2, vocab.get("movie", 1), 2] and lengths.tolist() == [3, 1]
    assert ids[1, 1:].tolist() == [0, 0]


def test_loader_fraction_and_validation():
    ds = data.load("digits", "test")
    loader = data.make_loader(ds, 32, fraction=0.1, shuffle=True)
    assert len(loader.dataset) == 96 and loader.dataset.data_source == "real"
    with pytest.raises(ValueError, match="fraction"):
        data.make_loader(ds, 32, fraction=0)
    with pytest.raises(ValueError, match="batch_size"):
        data.make_loader(ds, 0)


def test_unknown_names_list_valid_ones(tmp_path):
    with pytest.raises(ValueError, match="cifar10, cifar100, mini_imagenet, imdb, digits"):
        data.load("mnist")
    with pytest.raises(ValueError, match="valid splits"):
        data.load("digits", "val")
    with pytest.raises(data.DatasetUnavailableError, match="ImageFolder"):
        data.load("mini_imagenet", root=tmp_path)


def test_read_only_data_folder_gives_the_clear_message(tmp_path, monkeypatch):
    import errno
    import urllib.request
    from pathlib import Path

    from cnnlab.data import storage

    meta = dict(image_data.CIFAR_ARCHIVES["cifar10"], url="http://cnnlab.invalid/cifar-10-python.tar.gz")
    monkeypatch.setitem(image_data.CIFAR_ARCHIVES, "cifar10", meta)
    read_only = OSError(errno.EROFS, "Read-only file system")

    def refuse(*args, **kwargs):
        raise read_only

    # root may write anywhere, so a read-only mount is simulated: every write and delete in the data folder fails
    monkeypatch.setattr(urllib.request, "urlopen", lambda *a, **k: io.BytesIO(b"x"))
    monkeypatch.setattr(storage, "open", refuse, raising=False)
    monkeypatch.setattr(Path, "unlink", refuse)
    with pytest.raises(data.DatasetUnavailableError) as err:
        data.load("cifar10", root=tmp_path)
    assert "Read-only file system" in str(err.value) and "put cifar-10-python.tar.gz" in str(err.value)


def test_truncated_archive_is_named_and_download_false_stays_offline(tmp_path, monkeypatch):
    import urllib.request

    (tmp_path / "cifar-10-python.tar.gz").write_bytes(_fake_cifar_archive()[:100])  # cut short

    def no_network(*args, **kwargs):
        raise AssertionError("download=False touched the network")

    monkeypatch.setattr(urllib.request, "urlopen", no_network)
    with pytest.raises(data.DatasetUnavailableError) as err:
        data.load("cifar10", root=tmp_path, download=False)
    message = str(err.value)
    assert "its md5 is" in message and "truncated or damaged" in message
    assert str(tmp_path / "cifar-10-python.tar.gz") in message


def test_damaged_extracted_folder_names_the_file_and_the_remedy(tmp_path, serve, monkeypatch):
    archive = _fake_cifar_archive(n_per_batch=4)
    meta = _fake_cifar_meta(serve(archive), archive)
    monkeypatch.setitem(image_data.CIFAR_ARCHIVES, "cifar10", meta)
    data.load("cifar10", "test", root=tmp_path)
    batch = tmp_path / "cifar-10-batches-py" / "test_batch"
    batch.write_bytes(batch.read_bytes()[:50])
    with pytest.raises(data.DamagedFileError) as err:
        data.load("cifar10", "test", root=tmp_path)
    assert str(batch) in str(err.value) and "delete the folder" in str(err.value)


def _fake_imdb_folder(root, per_label: int = 1, splits=("train", "test"), labels=("neg", "pos")) -> None:
    """``root/aclImdb`` with ``per_label`` reviews in each of ``splits`` x ``labels``."""
    for split in splits:
        for label in labels:
            folder = root / "aclImdb" / split / label
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(per_label):
                (folder / f"{i}_1.txt").write_text(f"a {'good great' if label == 'pos' else 'bad awful'} film")


@pytest.fixture
def one_review_each(monkeypatch):
    """A whole aclImdb folder holds 12,500 reviews per split and label; these tests make one of each."""
    from cnnlab.data import text

    monkeypatch.setattr(text, "REVIEWS_PER_LABEL", 1)


def test_damaged_imdb_cache_names_the_file(tmp_path, one_review_each):
    _fake_imdb_folder(tmp_path)
    data.load("imdb", root=tmp_path, vocab_size=100, seq_len=16)
    [cache] = tmp_path.glob("imdb_v100_l16_*.pt")
    cache.write_bytes(b"not a torch archive")
    with pytest.raises(data.DamagedFileError, match=r"imdb_v100_l16_\w+\.pt.*delete it"):
        data.load("imdb", root=tmp_path, vocab_size=100, seq_len=16)


def test_an_incomplete_imdb_folder_is_refused_not_used_as_real_data(tmp_path):
    # issue 44, item 9: three reviews of one class were tokenised, cached and labelled data_source="real"
    _fake_imdb_folder(tmp_path, per_label=3, splits=("train",), labels=("pos",))
    with pytest.raises(data.DatasetUnavailableError) as err:
        data.load("imdb", "train", root=tmp_path, vocab_size=50, seq_len=8)
    message = str(err.value)
    assert str(tmp_path / "aclImdb") in message and "12,500 reviews" in message
    assert "train/neg: 0, train/pos: 3, test/neg: 0, test/pos: 0" in message and "Delete the folder" in message
    assert not list(tmp_path.glob("imdb_*.pt"))  # nothing cached
    # an estimate (which must not download) probes with synthetic data instead
    probe, size = data.stand_in("imdb", "train", root=tmp_path)
    assert probe.data_source == "synthetic" and size == 25_000


def test_the_imdb_cache_follows_the_folders_files(tmp_path, monkeypatch):
    # issue 44, item 9: files added after a first load must not get the first load's cached tensors
    from cnnlab.data import text

    monkeypatch.setattr(text, "REVIEWS_PER_LABEL", 1)
    _fake_imdb_folder(tmp_path, per_label=1)
    assert len(data.load("imdb", "train", root=tmp_path, vocab_size=50, seq_len=8)) == 2
    monkeypatch.setattr(text, "REVIEWS_PER_LABEL", 2)
    _fake_imdb_folder(tmp_path, per_label=2)
    train = data.load("imdb", "train", root=tmp_path, vocab_size=50, seq_len=8)
    assert len(train) == 4 and train.labels.tolist() == [0, 0, 1, 1]
    # a review changed in place is tokenised again too
    review = tmp_path / "aclImdb" / "train" / "pos" / "1_1.txt"
    review.write_text("zebra zebra zebra")
    train = data.load("imdb", "train", root=tmp_path, vocab_size=50, seq_len=8)
    assert "zebra" in train.vocab
    assert len(list(tmp_path.glob("imdb_v50_l8_*.pt"))) == 3  # one cache per set of files


def test_unwritable_imdb_token_cache_is_a_warning_and_the_data_is_returned(tmp_path, monkeypatch, one_review_each):
    from cnnlab.data import text

    for split in ("train", "test"):
        for label, words in (("neg", "bad awful"), ("pos", "good great")):
            folder = tmp_path / "aclImdb" / split / label
            folder.mkdir(parents=True)
            (folder / "0_1.txt").write_text(f"a {words} film")

    def read_only(*args, **kwargs):
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(text.torch, "save", read_only)
    with pytest.warns(UserWarning, match="could not cache the tokenised data .*Read-only file system"):
        train = data.load("imdb", "train", root=tmp_path, vocab_size=50, seq_len=8)
    assert len(train) == 2 and train.data_source == "real"
    assert not list(tmp_path.glob("*.part")) and not list(tmp_path.glob("imdb_*.pt"))


class _Planted:
    """Unpickling this creates ``marker``: a stand-in for a planted file that runs a command when loaded."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def test_planted_cifar_batch_is_refused_before_it_is_unpickled(tmp_path, serve, monkeypatch):
    archive = _fake_cifar_archive()
    meta = _fake_cifar_meta(serve(archive), archive)
    monkeypatch.setitem(image_data.CIFAR_ARCHIVES, "cifar10", meta)
    data.load("cifar10", "test", root=tmp_path / "root")
    marker = tmp_path / "unpickled"
    batch = tmp_path / "root" / "cifar-10-batches-py" / "test_batch"
    batch.write_bytes(pickle.dumps(_Planted(marker)))
    pickle.loads(pickle.dumps(_Planted(tmp_path / "probe")))  # the plant works when unpickled
    assert (tmp_path / "probe").exists()
    with pytest.raises(data.DamagedFileError) as err:
        data.load("cifar10", "test", root=tmp_path / "root")
    assert not marker.exists()  # refused before unpickling
    message = str(err.value)
    assert str(batch) in message and meta["files_md5"]["test_batch"] in message and "delete the folder" in message


def test_published_cifar_md5s_are_torchvisions():
    import importlib.util
    import re
    from pathlib import Path

    # read torchvision/datasets/cifar.py as text (cnnlab never imports torchvision.datasets): train_list,
    # test_list and meta of CIFAR10 and CIFAR100, whose file names do not overlap
    source = (Path(importlib.util.find_spec("torchvision").origin).parent / "datasets" / "cifar.py").read_text()
    published = dict(re.findall(r'\["([\w.]+)", "([0-9a-f]{32})"\]', source))
    published.update(re.findall(r'"filename": "([\w.]+)",\s*"key": "\w+",\s*"md5": "([0-9a-f]{32})"', source))
    ours = {**image_data.CIFAR_ARCHIVES["cifar10"]["files_md5"], **image_data.CIFAR_ARCHIVES["cifar100"]["files_md5"]}
    assert len(published) == 10 and ours == published
    for meta in image_data.CIFAR_ARCHIVES.values():
        assert set(meta["train"]) | set(meta["test"]) <= set(meta["files_md5"])  # every file read has a checksum


@pytest.mark.parametrize("labels, expected", [([1, 2, 3], "3 labels for 4 images"),
                                              ([1, 2, 57, 3], "label 57 .*outside 0..9")])
def test_misaligned_or_out_of_range_cifar_labels_are_refused(tmp_path, serve, monkeypatch, labels, expected):
    bad = pickle.dumps({b"data": np.zeros((4, 3072), dtype=np.uint8), b"labels": labels})
    archive = _fake_cifar_archive(replace={"test_batch": bad})
    monkeypatch.setitem(image_data.CIFAR_ARCHIVES, "cifar10", _fake_cifar_meta(serve(archive), archive))
    with pytest.raises(data.DamagedFileError, match=expected) as err:
        data.load("cifar10", "test", root=tmp_path)
    assert str(tmp_path / "cifar-10-batches-py" / "test_batch") in str(err.value)
    assert len(data.load("cifar10", "train", root=tmp_path)) == 20  # the good batches still load


def _full_disk_save(obj, path, *args, **kwargs):
    """torch.save on a full disk: part of the file is written, then torch's RuntimeError (not an OSError)."""
    with open(path, "wb") as f:
        f.write(b"PK\x03\x04 partial")
    raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 64 vs 0")


def test_full_disk_imdb_token_cache_is_a_warning_and_leaves_no_part_file(tmp_path, monkeypatch, one_review_each):
    from cnnlab.data import text

    for split in ("train", "test"):
        for label, words in (("neg", "bad awful"), ("pos", "good great")):
            folder = tmp_path / "aclImdb" / split / label
            folder.mkdir(parents=True)
            (folder / "0_1.txt").write_text(f"a {words} film")
    monkeypatch.setattr(text.torch, "save", _full_disk_save)
    with pytest.warns(UserWarning, match=r"imdb_v50_l8_\w+\.pt.*unexpected pos.*free") as record:
        train = data.load("imdb", "train", root=tmp_path, vocab_size=50, seq_len=8)
    assert str(tmp_path / "imdb_v50_l8_") in str(record[0].message)
    assert len(train) == 2 and train.data_source == "real"
    assert not list(tmp_path.glob("*.part")) and not list(tmp_path.glob("imdb_*.pt"))


def test_imdb_review_with_a_bad_byte_is_named(tmp_path, one_review_each):
    for split in ("train", "test"):
        for label in ("neg", "pos"):
            folder = tmp_path / "aclImdb" / split / label
            folder.mkdir(parents=True)
            (folder / "0_1.txt").write_text("a fine film")
    bad = tmp_path / "aclImdb" / "test" / "pos" / "0_1.txt"
    bad.write_bytes(b"a fine \xff film")
    with pytest.raises(data.DamagedFileError, match="not UTF-8") as err:
        data.load("imdb", "train", root=tmp_path, vocab_size=50, seq_len=8)
    assert str(bad) in str(err.value) and "aclImdb" in str(err.value)


def test_truncated_jpeg_in_mini_imagenet_is_named(tmp_path):
    from PIL import Image

    folder = tmp_path / "mini_imagenet" / "test" / "n01"
    folder.mkdir(parents=True)
    Image.new("RGB", (64, 64), (200, 10, 10)).save(folder / "a.jpg")
    Image.effect_noise((256, 256), 60).convert("RGB").save(folder / "b.jpg")
    bad = folder / "b.jpg"
    bad.write_bytes(bad.read_bytes()[:2000])  # cut short, as an interrupted copy leaves it
    dataset = data.load("mini_imagenet", "test", root=tmp_path)
    image, label = dataset[0]
    assert image.shape == (3, 224, 224) and label == 0
    with pytest.raises(data.DamagedFileError) as err:
        dataset[1]
    assert str(bad) in str(err.value) and "delete it" in str(err.value)


def test_stand_in_is_the_split_where_it_is_here_else_synthetic_data_with_the_real_size(tmp_path):
    digits, size = data.stand_in("digits", "test")
    assert size == len(digits) == data.info("digits").test_size and digits.data_source == "real"
    cifar, size = data.stand_in("cifar10", "train", root=tmp_path)  # not downloaded: nothing is fetched
    assert size == 50_000 and cifar.data_source == "synthetic" and len(cifar) == 5_000
    assert not any(tmp_path.iterdir())


def _archive(path, members) -> None:
    """A .tar.gz at ``path`` holding aclImdb/a.txt and then ``members``: (name, kind, payload or link target)."""
    with tarfile.open(path, "w:gz") as tar:
        for name, kind, value in [("aclImdb/a.txt", "file", "a fine film"), *members]:
            info = tarfile.TarInfo(name)
            info.type = {"file": tarfile.REGTYPE, "dir": tarfile.DIRTYPE, "symlink": tarfile.SYMTYPE,
                         "hardlink": tarfile.LNKTYPE, "chardev": tarfile.CHRTYPE, "fifo": tarfile.FIFOTYPE}[kind]
            payload = value.encode() if kind == "file" else b""
            if kind in ("symlink", "hardlink"):
                info.linkname = value
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload) if payload else None)


@pytest.fixture(params=["filter", "no filter"])
def tarfile_kind(request, monkeypatch):
    """tarfile as it is, and as on Python 3.11.0-3.11.3 (Debian 12: 3.11.2), whose extract and extractall have no
    ``filter`` keyword and which has no ``tarfile.data_filter``."""
    if request.param == "no filter":
        monkeypatch.delattr(tarfile, "data_filter")
        for method in ("extract", "extractall"):
            original = getattr(tarfile.TarFile, method)

            def without_filter(self, *args, _original=original, **kwargs):
                if "filter" in kwargs:
                    raise TypeError(f"extractall() got an unexpected keyword argument 'filter'")
                return _original(self, *args, **kwargs)

            monkeypatch.setattr(tarfile.TarFile, method, without_filter)
    return request.param


def test_a_good_archive_extracts_with_or_without_tarfiles_filter(tmp_path, tarfile_kind):
    from cnnlab.data import storage

    _archive(tmp_path / "good.tar.gz", [("aclImdb/train", "dir", ""), ("aclImdb/train/b.txt", "file", "good"),
                                        ("aclImdb/alias.txt", "symlink", "a.txt"),  # links inside are kept
                                        ("aclImdb/train/same.txt", "hardlink", "aclImdb/a.txt")])
    folder = storage.extract(tmp_path / "good.tar.gz", tmp_path, "aclImdb")
    assert folder == tmp_path / "aclImdb" and (folder / "train" / "b.txt").read_text() == "good"
    assert (folder / "alias.txt").is_symlink() and (folder / "alias.txt").read_text() == "a fine film"
    assert (folder / "train" / "same.txt").read_text() == "a fine film"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["aclImdb", "good.tar.gz"]  # no temporary folder left


CRAFTED = {
    "dot-dot path": [("aclImdb/../../evil.txt", "file", "x")],
    "absolute path": [("{outside}/evil.txt", "file", "x")],
    "symlink to an absolute path": [("aclImdb/etc", "symlink", "/etc")],
    "symlink out": [("aclImdb/up", "symlink", "../../..")],
    "hardlink to an absolute path": [("aclImdb/passwd", "hardlink", "/etc/passwd")],
    "hardlink out": [("aclImdb/up", "hardlink", "../outside/secret.txt")],
    "write through a symlink": [("aclImdb/out", "symlink", "../../outside"), ("aclImdb/out/evil.txt", "file", "x")],
    "character device": [("aclImdb/null", "chardev", "")],
    "fifo": [("aclImdb/pipe", "fifo", "")],
}


@pytest.mark.parametrize("case", CRAFTED)
def test_a_crafted_archive_is_refused_with_or_without_tarfiles_filter(tmp_path, tarfile_kind, case):
    from cnnlab.data import storage

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("secret")
    into = tmp_path / "data"
    into.mkdir()
    members = [(name.format(outside=outside), kind, value) for name, kind, value in CRAFTED[case]]
    _archive(tmp_path / "crafted.tar.gz", members)
    if case == "absolute path" and tarfile_kind == "filter":
        # filter="data" strips the leading "/" and extracts the file inside; without it cnnlab refuses it
        storage.extract(tmp_path / "crafted.tar.gz", into, "aclImdb")
    else:
        with pytest.raises(data.DamagedFileError, match="crafted.tar.gz.*nothing was extracted"):
            storage.extract(tmp_path / "crafted.tar.gz", into, "aclImdb")
        assert list(into.iterdir()) == []  # no half-extracted folder, no temporary folder
    assert sorted(p.name for p in outside.iterdir()) == ["secret.txt"]  # nothing written outside
    assert sorted(p.name for p in tmp_path.iterdir()) == ["crafted.tar.gz", "data", "outside"]
