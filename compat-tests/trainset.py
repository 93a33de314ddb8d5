"""An image-like training set and the three ways a PyTorch job reads it: s3torchconnector over
S3, a file-based Dataset (torchvision ImageFolder) over the Lode mount, and the same Dataset over
a plain local directory. Shared by test_training.py and the train-epoch benchmark
(train_epoch.py).

Samples are `train/class_NN/NNNNNN.jpg`, 100-500 KB of random bytes behind a JPEG header (the
loaders hash bytes, they do not decode images), and the same samples packed 100 to a tar shard
under `shards/`. Every sample's SHA-256 is recorded when it is generated."""

import functools
import hashlib
import io
import os
import random
import tarfile
from concurrent.futures import ThreadPoolExecutor

import boto3
import torch
from botocore.config import Config
from torch.utils.data import DataLoader, Dataset
from torchvision.datasets import ImageFolder

from s3torchconnector import S3ClientConfig, S3IterableDataset, S3MapDataset

CLASSES = 10
SHARD = 100
JPEG_HEADER = b"\xff\xd8\xff\xe0\x00\x10JFIF\x00"


def sample_name(i):
    return f"class_{i % CLASSES:02d}/{i:06d}.jpg"


def sample_size(i, lo=100_000, hi=500_000):
    return random.Random(i).randint(lo, hi)


def make_sample(i):
    n = sample_size(i)
    return JPEG_HEADER + os.urandom(n - len(JPEG_HEADER))


def s3_client(endpoint, access_key, secret_key, threads=16):
    return boto3.client(
        "s3", endpoint_url=endpoint, aws_access_key_id=access_key, aws_secret_access_key=secret_key,
        region_name="us-east-1", config=Config(s3={"addressing_style": "path"}, max_pool_connections=threads),
    )


def generate(s3, bucket, samples, local_dir=None, shards=True, threads=16):
    """Uploads `samples` samples (and their tar shards) with boto3; optionally writes the same
    bytes under `local_dir`. Returns {name: sha256 hex}."""
    hashes = {}

    def one_shard(k):
        buf = io.BytesIO()
        tar = tarfile.open(fileobj=buf, mode="w") if shards else None
        for i in range(k * SHARD, min(samples, (k + 1) * SHARD)):
            data, name = make_sample(i), sample_name(i)
            hashes[name] = hashlib.sha256(data).hexdigest()
            s3.put_object(Bucket=bucket, Key="train/" + name, Body=data)
            if local_dir:
                path = os.path.join(local_dir, name)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "wb") as f:
                    f.write(data)
            if tar:
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        if tar:
            tar.close()
            s3.put_object(Bucket=bucket, Key=f"shards/shard-{k:05d}.tar", Body=buf.getvalue())

    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(one_shard, range((samples + SHARD - 1) // SHARD)))
    return hashes


# ---- transforms and loaders (module level, so DataLoader workers can use them) ----

def s3_sample(reader):
    """S3MapDataset transform: (name under train/, sha256) of the whole object."""
    return reader.key.split("/", 1)[1], hashlib.sha256(reader.read()).hexdigest()


def s3_sample_pieces(reader, piece=64 << 10):
    """The same through seek/read ranges in a shuffled order (for the range-based reader)."""
    size = reader.seek(0, io.SEEK_END)
    offsets = list(range(0, size, piece))
    random.Random(size).shuffle(offsets)
    parts = {}
    for off in offsets:
        assert reader.seek(off) == off
        parts[off] = reader.read(min(piece, size - off))
        assert reader.tell() == off + len(parts[off])
    data = b"".join(parts[o] for o in sorted(parts))
    return reader.key.split("/", 1)[1], hashlib.sha256(data).hexdigest()


def s3_sample_size(reader):
    """Benchmark transform: read the whole sample, return its size."""
    return len(reader.read())


def tar_samples(reader):
    """S3IterableDataset transform: every member of a tar shard, streamed."""
    out = []
    with tarfile.open(fileobj=reader, mode="r|") as tar:
        for m in tar:
            out.append((m.name, hashlib.sha256(tar.extractfile(m).read()).hexdigest()))
    return out


def file_sample(root, path):
    with open(path, "rb") as f:
        return os.path.relpath(path, root), hashlib.sha256(f.read()).hexdigest()


def file_sample_size(path):
    with open(path, "rb") as f:
        return len(f.read())


def is_jpg(p):
    return p.endswith(".jpg")


def image_folder(root, bench=False):
    """torchvision's ImageFolder over `root` (the mount or a local dir): (sample, class) items."""
    loader = file_sample_size if bench else functools.partial(file_sample, root)
    return ImageFolder(root, loader=loader, is_valid_file=is_jpg)


def s3_map(bucket, endpoint, path_style=True, prefix="train/", transform=s3_sample, reader=None):
    return S3MapDataset.from_prefix(
        f"s3://{bucket}/{prefix}", region="us-east-1", endpoint=endpoint, transform=transform,
        s3client_config=S3ClientConfig(force_path_style=path_style), reader_constructor=reader,
    )


def s3_shards(bucket, endpoint, shard_keys):
    return S3IterableDataset.from_objects(
        [f"s3://{bucket}/{k}" for k in shard_keys], region="us-east-1", endpoint=endpoint,
        transform=tar_samples, s3client_config=S3ClientConfig(force_path_style=True), enable_sharding=True,
    )


def as_list(batch):
    return batch


def epoch(dataset, workers=4, batch=32, shuffle=True, seed=0):
    """One epoch through torch's DataLoader; returns the items in the order they arrived."""
    g = torch.Generator()
    g.manual_seed(seed)
    dl = DataLoader(dataset, batch_size=batch, shuffle=shuffle, num_workers=workers, collate_fn=as_list,
                    generator=g if shuffle else None, persistent_workers=False)
    out = []
    for b in dl:
        out.extend(b)
    return out


class Items(Dataset):
    """ImageFolder items as (name, sha) only (drops the class index after checking it)."""

    def __init__(self, folder):
        self.f = folder

    def __len__(self):
        return len(self.f)

    def __getitem__(self, i):
        (name, sha), cls = self.f[i]
        assert self.f.classes[cls] == name.split("/")[0]
        return name, sha
