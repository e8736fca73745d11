"""Datasets by name, and one DataLoader factory.

``load(name, split)`` returns a real dataset, downloading and verifying it on first use. Offline and
without the files it raises :class:`DatasetUnavailableError` naming the URL and where to put the files.
Synthetic data of the same shape is used only with ``synthetic=True``, and the dataset then carries
``data_source="synthetic"`` so every result row built from it says so. There is no silent fallback.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import DataLoader, Subset

from cnnlab.data.images import (DIGITS_IMAGES, DIGITS_TEST_IMAGES, ImageTensorDataset, load_cifar, load_digits,
                                 synthetic_images)
from cnnlab.data.storage import DamagedFileError, DatasetUnavailableError, data_root
from cnnlab.data.text import TokenDataset, load_imdb, synthetic_sentiment


@dataclass(frozen=True)
class DatasetInfo:
    name: str
    num_classes: int
    input_shape: tuple
    input_kind: str  # "image" or "tokens"
    train_size: int
    test_size: int


INFO = {
    "cifar10": DatasetInfo("cifar10", 10, (3, 32, 32), "image", 50000, 10000),
    "cifar100": DatasetInfo("cifar100", 100, (3, 32, 32), "image", 50000, 10000),
    "mini_imagenet": DatasetInfo("mini_imagenet", 100, (3, 224, 224), "image", 48000, 12000),
    "imdb": DatasetInfo("imdb", 2, (256,), "tokens", 25000, 25000),
    "digits": DatasetInfo("digits", 10, (3, 32, 32), "image", DIGITS_IMAGES - DIGITS_TEST_IMAGES, DIGITS_TEST_IMAGES),
}
SPLITS = ("train", "test")


def names() -> list[str]:
    return list(INFO)


def info(name: str) -> DatasetInfo:
    """Shape, class count and size of a dataset, without loading it."""
    if name not in INFO:
        raise ValueError(f"unknown dataset {name!r}; valid names: {', '.join(INFO)}")
    return INFO[name]


def load(name: str, split: str = "train", *, synthetic: bool = False, root=None, download: bool = True,
         augment: bool = False, synthetic_size: int | None = None, **options):
    """The ``split`` ("train" or "test") of dataset ``name``.

    Image datasets yield ``(float image (C, H, W), label)``; ``imdb`` yields ``(token ids (seq_len,), label)``
    and takes ``vocab_size`` and ``seq_len`` options. ``synthetic=True`` gives labelled synthetic data of the
    same shape and class count (``synthetic_size`` items, default 1/10 of the real split).
    """
    meta = info(name)
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; valid splits: {', '.join(SPLITS)}")
    unknown = set(options) - ({"vocab_size", "seq_len"} if name == "imdb" else set())
    if unknown:
        raise ValueError(f"unknown option(s) {sorted(unknown)} for dataset {name!r}")
    if synthetic:
        size = synthetic_size or (meta.train_size if split == "train" else meta.test_size) // 10
        if name == "imdb":
            return synthetic_sentiment(split, size=size, **options)
        shape = meta.input_shape
        return synthetic_images(name, split, shape=shape, num_classes=meta.num_classes, size=size)
    if name in ("cifar10", "cifar100"):
        return load_cifar(name, split, root=root, download_ok=download, augment=augment and split == "train")
    if name == "digits":
        return load_digits(split)
    if name == "imdb":
        return load_imdb(split, root=root, download_ok=download, **options)
    return _load_image_folder(split, root=root)


def stand_in(name: str, split: str = "train", *, synthetic: bool = False, root=None, **options) -> tuple[Any, int]:
    """(a data set to probe with, the size of the one a run will load): the split itself where it is here
    (nothing is downloaded), else synthetic data of its shape (a tenth of its size), with the real split's size.
    For estimates, which must not download."""
    try:
        dataset = load(name, split, synthetic=synthetic, root=root, download=False, **options)
        return dataset, len(dataset)
    except DatasetUnavailableError:
        meta = info(name)
        return load(name, split, synthetic=True, **options), meta.train_size if split == "train" else meta.test_size


def _load_image_folder(split: str, *, root=None):
    """Mini-ImageNet as an ImageFolder tree ``<data>/mini_imagenet/{train,test}/<class>/<image>``.

    Mini-ImageNet (Vinyals et al. 2016) has no official, stable download: it is cut from ImageNet, whose
    licence requires registration. So this loader reads a tree the user provides and never downloads.
    """
    folder = data_root(root) / "mini_imagenet" / split
    if not folder.is_dir():
        raise DatasetUnavailableError(
            f"mini_imagenet: {folder} not found. Mini-ImageNet has no official download (it is cut from "
            f"ImageNet, which needs registration). Put an ImageFolder tree at {folder}/<class>/<image>.jpg, "
            f"or pass synthetic=True for labelled synthetic 3x224x224 images.")
    import cnnlab  # noqa: F401  (makes torchvision importable beside a CPU torch)
    from torchvision import datasets, transforms

    tf = transforms.Compose([transforms.Resize(256), transforms.CenterCrop(224), transforms.ToTensor(),
                             transforms.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))])
    dataset = datasets.ImageFolder(folder, transform=tf, loader=_open_image)
    dataset.data_source, dataset.name, dataset.input_shape = "real", "mini_imagenet", (3, 224, 224)
    dataset.num_classes = len(dataset.classes)
    return dataset


def _open_image(path: str):
    """The image at ``path`` as an RGB PIL image; a file PIL cannot decode (truncated, not an image) raises
    :class:`DamagedFileError` naming it, where torchvision's own loader names no file."""
    from PIL import Image

    try:
        with open(path, "rb") as f:
            return Image.open(f).convert("RGB")
    except (OSError, SyntaxError, ValueError) as err:  # PIL raises all three for broken files
        raise DamagedFileError(f"{path} cannot be read as an image ({type(err).__name__}: {err}); it is truncated "
                               "or damaged: replace it with a good copy or delete it") from err


def subset(dataset, fraction: float, *, seed: int = 0):
    """A seeded random ``fraction`` (0 < fraction <= 1) of ``dataset``, keeping its labelling attributes."""
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    if fraction == 1:
        return dataset
    n = max(1, int(len(dataset) * fraction))
    order = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(seed))[:n]
    part = Subset(dataset, order.tolist())
    for attr in ("data_source", "name", "num_classes", "input_shape"):
        setattr(part, attr, getattr(dataset, attr))
    return part


def make_loader(dataset, batch_size: int, *, num_workers: int = 0, pin_memory: bool = False,
                persistent_workers: bool = False, fraction: float = 1.0, shuffle: bool = False, seed: int = 0,
                sampler=None, drop_last: bool = False) -> DataLoader:
    """A DataLoader over ``fraction`` of ``dataset`` (study 002 uses 1, 1/2 and 1/10 of the data)."""
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    if not isinstance(num_workers, int) or num_workers < 0:
        raise ValueError(f"num_workers must be an integer >= 0, got {num_workers!r}")
    data = subset(dataset, fraction, seed=seed)
    generator = torch.Generator().manual_seed(seed) if shuffle and sampler is None else None
    return DataLoader(data, batch_size=batch_size, shuffle=shuffle and sampler is None, sampler=sampler,
                      num_workers=num_workers, pin_memory=pin_memory,
                      persistent_workers=persistent_workers and num_workers > 0, drop_last=drop_last,
                      generator=generator)


__all__ = ["DamagedFileError", "DatasetInfo", "DatasetUnavailableError", "ImageTensorDataset", "TokenDataset",
           "data_root", "info", "load", "make_loader", "names", "stand_in", "subset"]
