"""Image classification datasets held in memory as uint8 tensors: CIFAR-10/100, digits, synthetic."""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import Dataset

from cnnlab.data.storage import data_root, dataset_lock, download, extract, read_or_explain, verify_md5

# Per-channel statistics of the CIFAR training sets (the usual values, e.g. kuangliu/pytorch-cifar).
CIFAR10_MEAN, CIFAR10_STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)
CIFAR100_MEAN, CIFAR100_STD = (0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)

# files_md5: the published MD5 of every extracted file, copied from torchvision 0.28's
# torchvision/datasets/cifar.py (train_list, test_list, meta; cnnlab does not import torchvision.datasets). An
# extracted batch is a pickle, and unpickling runs code, so each is checked against this table before it is read:
# the archive's MD5 proves only what was downloaded, not what is in the folder now.
CIFAR_ARCHIVES = {
    "cifar10": dict(url="https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
                    file="cifar-10-python.tar.gz", md5="c58f30108f718f92721af3b95e74349a",
                    folder="cifar-10-batches-py", train=[f"data_batch_{i}" for i in range(1, 6)],
                    test=["test_batch"], label_key=b"labels", num_classes=10,
                    files_md5={"data_batch_1": "c99cafc152244af753f735de768cd75f",
                               "data_batch_2": "d4bba439e000b95fd0a9bffe97cbabec",
                               "data_batch_3": "54ebc095f3ab1f0389bbae665268c751",
                               "data_batch_4": "634d18415352ddfa80567beed471001a",
                               "data_batch_5": "482c414d41f54cd18b22e5b47cb7c3cb",
                               "test_batch": "40351d587109b95175f43aff81a1287e",
                               "batches.meta": "5ff9c542aee3614f3951f8cda6e48888"}),
    "cifar100": dict(url="https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz",
                     file="cifar-100-python.tar.gz", md5="eb9058c3a382ffc7106e4002c42a8d85",
                     folder="cifar-100-python", train=["train"], test=["test"],
                     label_key=b"fine_labels", num_classes=100,
                     files_md5={"train": "16019d7e3df5f24257cddd939b257f8d",
                                "test": "f0ef6b0ae62326f3e7ffdfab6717acfc",
                                "meta": "7973b15100ade9c7d40fb424638fde48"}),
}


class ImageTensorDataset(Dataset):
    """Images as a uint8 tensor (N, C, H, W) and integer labels; items are normalised float tensors.

    ``augment`` applies the CIFAR ResNet recipe's augmentation (He et al. 2016, sec. 4.2): 4-pixel zero
    padding with a random 32x32 crop, and a random horizontal flip.
    """

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, *, mean, std, num_classes: int,
                 data_source: str, name: str, augment: bool = False):
        if images.dtype != torch.uint8 or images.ndim != 4:
            raise ValueError(f"images must be uint8 (N, C, H, W), got {images.dtype} {tuple(images.shape)}")
        self.images, self.labels = images, labels.long()
        self.mean = torch.tensor(mean).view(-1, 1, 1)
        self.std = torch.tensor(std).view(-1, 1, 1)
        self.num_classes, self.data_source, self.name, self.augment = num_classes, data_source, name, augment
        self.input_shape = tuple(images.shape[1:])

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index):
        image = self.images[index].float().div_(255)
        if self.augment:
            h, w = image.shape[1:]
            padded = F.pad(image, (4, 4, 4, 4))
            top, left = torch.randint(0, 9, (2,)).tolist()
            image = padded[:, top:top + h, left:left + w]
            if torch.rand(()) < 0.5:
                image = image.flip(-1)
        return (image - self.mean) / self.std, self.labels[index]


def _read_cifar_batches(folder: Path, files: list[str], *, label_key: bytes, num_classes: int,
                        files_md5: dict[str, str]):
    """The images (uint8 tensor (N, 3, 32, 32)) and labels (int64 tensor (N,)) of the batch ``files`` in
    ``folder``, each file's MD5 checked against ``files_md5`` before it is unpickled and its labels checked
    against its images (one per image, each in 0..num_classes-1); a file that fails is named."""
    remedy = f"delete the folder {folder} (cnnlab extracts it again from the verified archive)"

    def read(path):
        with open(path, "rb") as f:
            batch = pickle.load(f, encoding="bytes")
        data = np.asarray(batch[b"data"], dtype=np.uint8).reshape(-1, 3, 32, 32)
        labels = np.asarray(batch[label_key], dtype=np.int64).reshape(-1)
        # checked here, not trusted: a short list would pair images with the wrong labels silently
        if len(labels) != len(data):
            raise ValueError(f"{len(labels)} labels for {len(data)} images")
        bad = labels[(labels < 0) | (labels >= num_classes)]
        if len(bad):
            raise ValueError(f"label {bad[0]} is outside 0..{num_classes - 1}")
        return data, labels

    images, labels = [], []
    for name in files:
        verify_md5(folder / name, files_md5.get(name), remedy=remedy)
        data, batch_labels = read_or_explain(folder / name, read, remedy=remedy)
        images.append(data)
        labels.append(batch_labels)
    return torch.from_numpy(np.concatenate(images)), torch.from_numpy(np.concatenate(labels))


def load_cifar(name: str, split: str, *, root=None, download_ok: bool = True, augment: bool = False):
    """CIFAR-10 or CIFAR-100 (Krizhevsky 2009), downloaded and MD5-verified on first use (by one process at a time:
    another waits for it, then uses its copy)."""
    meta = CIFAR_ARCHIVES[name]
    root = data_root(root)
    folder = root / meta["folder"]
    if not folder.exists():
        with dataset_lock(root, name):  # one process at a time: another waits, then finds this one's copy
            archive = root / meta["file"]
            download(meta["url"], archive, meta["md5"], dataset=name, network=download_ok,
                     expected=f"{meta['file']}, which unpacks to {meta['folder']}/")
            extract(archive, root, meta["folder"])
    images, labels = _read_cifar_batches(folder, meta[split], label_key=meta["label_key"],
                                         num_classes=meta["num_classes"], files_md5=meta["files_md5"])
    mean, std = (CIFAR10_MEAN, CIFAR10_STD) if name == "cifar10" else (CIFAR100_MEAN, CIFAR100_STD)
    return ImageTensorDataset(images, labels, mean=mean, std=std, num_classes=meta["num_classes"],
                              data_source="real", name=name, augment=augment)


# The digits test split: 960 of the 1,797 images, so that the quick preset's paired accuracy claims can be decided.
# Two models that agree on every test image differ by at most +-4.38 / n (n test images: Clopper-Pearson's upper end
# of 0 discordant at 97.5%, cnnlab.profiling.accuracy.paired_exact), so fp16's "within 0.5 pp" needs n >= 876; 960 is
# also a multiple of 07's timed batch (40). The 837 training images still train the quick recipe's models to ~97-99%.
DIGITS_IMAGES, DIGITS_TEST_IMAGES = 1797, 960


def load_digits(split: str, *, test_size: int = DIGITS_TEST_IMAGES, seed: int = 0):
    """scikit-learn's bundled handwritten digits (1,797 real 8x8 images, 10 classes), as 3x32x32.

    Upsampled bilinearly to 32x32 and repeated over three channels so CIFAR models run on it unchanged.
    Split into train/test by a fixed stratified shuffle (``test_size`` images, ``seed``). Needs no network.
    """
    from sklearn.datasets import load_digits as sk_digits
    from sklearn.model_selection import train_test_split

    bunch = sk_digits()
    x = torch.from_numpy(bunch.images).float().unsqueeze(1) / 16.0  # pixel values are 0..16
    x = F.interpolate(x, size=(32, 32), mode="bilinear", align_corners=False).clamp_(0, 1)
    images = (x * 255).round().to(torch.uint8).repeat(1, 3, 1, 1)
    labels = torch.from_numpy(bunch.target)
    train_idx, test_idx = train_test_split(np.arange(len(labels)), test_size=test_size,
                                           random_state=seed, stratify=bunch.target)
    idx = torch.from_numpy(train_idx if split == "train" else test_idx)
    mean = tuple(images[torch.from_numpy(train_idx)].float().div(255).mean(dim=(0, 2, 3)).tolist())
    std = tuple(images[torch.from_numpy(train_idx)].float().div(255).std(dim=(0, 2, 3)).tolist())
    return ImageTensorDataset(images[idx], labels[idx], mean=mean, std=std, num_classes=10,
                              data_source="real", name="digits")


def synthetic_images(name: str, split: str, *, shape, num_classes: int, size: int, seed: int = 0):
    """Random images of a dataset's shape whose class shifts a per-class mean pattern, so they are learnable.

    Labelled ``data_source="synthetic"``: every result computed from them must say so.
    """
    gen = torch.Generator().manual_seed(seed + (0 if split == "train" else 1))
    labels = torch.randint(0, num_classes, (size,), generator=gen)
    patterns = torch.rand((num_classes, *shape), generator=torch.Generator().manual_seed(seed)) * 128
    noise = torch.rand((size, *shape), generator=gen) * 128
    images = (patterns[labels] + noise).to(torch.uint8)
    return ImageTensorDataset(images, labels, mean=(0.5,) * shape[0], std=(0.25,) * shape[0],
                              num_classes=num_classes, data_source="synthetic", name=name)
