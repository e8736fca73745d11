"""IMDB movie-review sentiment (Maas et al. 2011) as padded token-id tensors, and a synthetic stand-in."""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from pathlib import Path

import torch
from torch.utils.data import Dataset

from cnnlab.data.storage import (DamagedFileError, DatasetUnavailableError, data_root, dataset_lock, download,
                                 extract, read_or_explain, save_or_warn)

IMDB_URL = "https://ai.stanford.edu/~amaas/data/sentiment/aclImdb_v1.tar.gz"
IMDB_MD5 = "7c2ac02c03563afcf9b574c7e56c153a"
# reviews in each of train/neg, train/pos, test/neg and test/pos of the archive (its README: 25,000 train and 25,000
# test reviews, half of each positive)
REVIEWS_PER_LABEL = 12_500
PAD, UNK = 0, 1
_TOKEN = re.compile(r"[a-z0-9']+")


def tokenize(text: str) -> list[str]:
    """Lower-case words; IMDB's ``<br />`` line breaks are dropped."""
    return _TOKEN.findall(text.lower().replace("<br />", " "))


def build_vocab(documents, vocab_size: int) -> dict[str, int]:
    """The ``vocab_size - 2`` most frequent tokens get ids 2..; 0 is padding, 1 is unknown."""
    counts = Counter(tok for doc in documents for tok in doc)
    return {tok: i + 2 for i, (tok, _) in enumerate(counts.most_common(vocab_size - 2))}


def encode(documents, vocab: dict[str, int], seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids padded (with 0) or truncated to ``seq_len``, and each document's unpadded length."""
    ids = torch.zeros((len(documents), seq_len), dtype=torch.long)
    lengths = torch.zeros(len(documents), dtype=torch.long)
    for row, doc in enumerate(documents):
        tokens = [vocab.get(tok, UNK) for tok in doc[:seq_len]]
        ids[row, : len(tokens)] = torch.tensor(tokens, dtype=torch.long)
        lengths[row] = max(len(tokens), 1)  # an empty review still feeds one (padding) step
    return ids, lengths


class TokenDataset(Dataset):
    """Items are ``(token_ids[seq_len], label)``; ``lengths`` holds the unpadded lengths for packing."""

    def __init__(self, ids, lengths, labels, *, vocab, data_source: str, name: str):
        self.ids, self.lengths, self.labels = ids, lengths, labels.long()
        self.vocab, self.data_source, self.name = vocab, data_source, name
        self.num_classes = 2
        self.input_shape = (ids.shape[1],)
        self.vocab_size = len(vocab) + 2

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index):
        return self.ids[index], self.labels[index]


def _read_reviews(paths: list[Path], folder: Path) -> list[list[str]]:
    """The tokens of each review in ``paths``; a review that is not UTF-8 is named (``folder``: the aclImdb folder)."""
    docs = []
    for path in paths:
        try:
            review = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as err:  # the archive's reviews are all UTF-8: this copy was changed
            raise DamagedFileError(
                f"{path} is not UTF-8 (byte {err.object[err.start:err.start + 1]!r} at offset {err.start}): "
                f"fix or delete that file, or delete the folder {folder} (cnnlab extracts the reviews "
                "again from the archive)") from err
        docs.append(tokenize(review))
    return docs


def load_imdb(split: str, *, root=None, download_ok: bool = True, vocab_size: int = 20000, seq_len: int = 256):
    """The aclImdb archive: 25,000 train and 25,000 test reviews, vocabulary built on the train split.

    The folder ``<data>/aclImdb`` must hold all of them (:func:`review_files`), else
    :class:`~cnnlab.data.storage.DatasetUnavailableError` says what is missing. Encoded tensors are cached in
    ``<data>/imdb_v{vocab_size}_l{seq_len}_{listing}.pt``, where ``listing`` is a digest of the reviews' names, sizes
    and modification times, so tokenising happens once for these files and a folder whose files changed is
    tokenised again. One process at a time downloads, extracts and tokenises (another waits for it, then reads its
    cache).
    """
    root = data_root(root)
    files = review_files(_reviews_folder(root, download_ok))
    cache = root / f"imdb_v{vocab_size}_l{seq_len}_{_listing_digest(files)}.pt"
    payload = None
    if not cache.exists():
        with dataset_lock(root, "imdb"):  # another process preparing it: wait, then read the cache it wrote
            if not cache.exists():
                payload = _tokenised(files, root / "aclImdb", cache, vocab_size, seq_len)
    if payload is None:
        payload = read_or_explain(cache, lambda path: torch.load(path, weights_only=True),
                                  remedy="delete it (cnnlab tokenises the reviews again)")
    data = payload[split]
    return TokenDataset(data["ids"], data["lengths"], data["labels"], vocab=payload["vocab"],
                        data_source="real", name="imdb")


def _reviews_folder(root: Path, download_ok: bool) -> Path:
    """``root/aclImdb``, downloaded and extracted first where it is missing."""
    folder = root / "aclImdb"
    if not folder.exists():
        with dataset_lock(root, "imdb"):  # another process downloading it: wait, then use its folder
            if not folder.exists():
                archive = root / "aclImdb_v1.tar.gz"
                download(IMDB_URL, archive, IMDB_MD5, dataset="imdb", network=download_ok,
                         expected="aclImdb_v1.tar.gz, which unpacks to aclImdb/")
                extract(archive, root, "aclImdb")
    return folder


def review_files(folder: Path) -> dict[str, dict[int, list[Path]]]:
    """The labelled reviews of the aclImdb folder ``folder``: {split: {label: sorted paths}}, label 0 for
    ``neg/``, 1 for ``pos/``. Raises :class:`~cnnlab.data.storage.DatasetUnavailableError` unless each of the four
    holds :data:`REVIEWS_PER_LABEL` ``.txt`` files, as the archive's do: a partial copy would be trained on and
    reported as the real data set."""
    files, counts = {}, {}
    for split in ("train", "test"):
        files[split] = {}
        for label, sub in ((0, "neg"), (1, "pos")):
            files[split][label] = sorted((folder / split / sub).glob("*.txt"))
            counts[f"{split}/{sub}"] = len(files[split][label])
    if any(count != REVIEWS_PER_LABEL for count in counts.values()):
        found = ", ".join(f"{name}: {count:,}" for name, count in counts.items())
        raise DatasetUnavailableError(
            f"imdb: {folder} is not the whole aclImdb data set: it must hold {REVIEWS_PER_LABEL:,} reviews (*.txt) "
            f"in each of train/neg, train/pos, test/neg and test/pos; found {found}. Delete the folder (cnnlab "
            f"downloads and extracts {IMDB_URL} again), or put the whole extracted archive there, or pass "
            "synthetic=True for labelled synthetic reviews.")
    return files


def _listing_digest(files: dict[str, dict[int, list[Path]]]) -> str:
    """12 hex digits of SHA-256 over every review's path (below aclImdb), size and modification time: what keys
    the token cache to these files (not their bytes: reading every review on every load is what the cache saves)."""
    digest = hashlib.sha256()
    for split, by_label in files.items():
        for paths in by_label.values():
            for path in paths:
                stat = path.stat()
                entry = f"{split}/{path.parent.name}/{path.name}\0{stat.st_size}\0{stat.st_mtime_ns}\n"
                digest.update(entry.encode())
    return digest.hexdigest()[:12]


def _tokenised(files: dict[str, dict[int, list[Path]]], folder: Path, cache: Path, vocab_size: int,
               seq_len: int) -> dict:
    """The reviews in ``files`` (from :func:`review_files`) encoded with the train split's vocabulary: {"vocab",
    "train", "test"}, each split {"ids", "lengths", "labels"}; cached in ``cache`` where it can be written."""
    docs, labels = {}, {}
    for split, by_label in files.items():
        docs[split] = [doc for label in (0, 1) for doc in _read_reviews(by_label[label], folder)]
        labels[split] = torch.tensor([label for label in (0, 1) for _ in by_label[label]])
    vocab = build_vocab(docs["train"], vocab_size)
    payload = {"vocab": vocab}
    for split in ("train", "test"):
        ids, lengths = encode(docs[split], vocab, seq_len)
        payload[split] = {"ids": ids, "lengths": lengths, "labels": labels[split]}
    # where it cannot be cached (a read-only or full data folder) go on with what was just tokenised
    save_or_warn(payload, cache, failure="imdb: could not cache the tokenised data in",
                 consequence="it is tokenised again on every load")
    return payload


def synthetic_sentiment(split: str, *, size: int = 2000, vocab_size: int = 2000, seq_len: int = 64,
                        signal: float = 0.15, seed: int = 0) -> TokenDataset:
    """A synthetic review corpus whose label depends on the words, so a model must learn it.

    The vocabulary has 50 "positive" and 50 "negative" words; the rest are neutral. Each review mixes
    neutral words with sentiment words; a fraction ``signal`` of its words carries sentiment, drawn 80/20
    from the label's side, so a bag-of-words reader gets most reviews right and guessing gets 50%.
    Reviews have random lengths (``seq_len // 4`` .. ``seq_len``). Labelled ``data_source="synthetic"``.
    """
    if vocab_size < 200:
        raise ValueError(f"vocab_size must be >= 200 for the synthetic corpus, got {vocab_size}")
    gen = torch.Generator().manual_seed(seed + (0 if split == "train" else 1))
    positive, negative = torch.arange(2, 52), torch.arange(52, 102)
    labels = torch.randint(0, 2, (size,), generator=gen)
    lengths = torch.randint(seq_len // 4, seq_len + 1, (size,), generator=gen)
    ids = torch.randint(102, vocab_size, (size, seq_len), generator=gen)
    is_sentiment = torch.rand((size, seq_len), generator=gen) < signal
    agrees = torch.rand((size, seq_len), generator=gen) < 0.8
    pick = torch.randint(0, 50, (size, seq_len), generator=gen)
    label_side = torch.where(labels[:, None].bool(), positive[pick], negative[pick])
    other_side = torch.where(labels[:, None].bool(), negative[pick], positive[pick])
    ids = torch.where(is_sentiment, torch.where(agrees, label_side, other_side), ids)
    ids[torch.arange(seq_len)[None, :] >= lengths[:, None]] = PAD
    vocab = {f"w{i}": i for i in range(2, vocab_size)}
    return TokenDataset(ids, lengths, labels, vocab=vocab, data_source="synthetic", name="imdb")
