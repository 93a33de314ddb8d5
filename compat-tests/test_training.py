"""Training pipelines, unmodified: s3torchconnector (latest, from PyPI; the AWS CRT client inside)
and torch's DataLoader against a real lode, and torchvision's ImageFolder over the Lode mount.

One generated image-like set (`LODE_TRAIN_SAMPLES`, 20,000 by default: 100-500 KB each, raw and
packed into tar shards; see trainset.py), uploaded once with boto3, then read back:
- S3MapDataset.from_prefix, shuffled, 4 workers, path-style: every sample once, bit-exact;
- S3IterableDataset over the tar shards: from a shuffled list of shards and from_prefix,
  sharded across the workers;
- the range-based reader (seek/read pieces in a shuffled order);
- virtual-hosted addressing (`<bucket>.<domain>` resolves, the bare domain does not, so a
  path-style fallback would fail);
- S3Checkpoint save/load of a real torchvision model's state dict (multipart via the CRT);
- ImageFolder over /<mount>/<bucket>/train with the same hashes as over S3.

With LODE_COMPAT_MODE=cluster the set is uploaded through one cluster-mode gateway and read
through another (which also serves the mount), 1,000 samples unless LODE_TRAIN_SAMPLES says
otherwise (three replicas on the test cluster's small OSD files).
"""

import collections
import os
import uuid

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("s3torchconnector")
import torchvision  # noqa: E402

import trainset  # noqa: E402
from conftest import ACCESS_KEY, CLUSTER_MODE, SECRET_KEY, Lode, cluster_gateways, make_client  # noqa: E402
from s3torchconnector import S3Checkpoint, S3ClientConfig  # noqa: E402
from s3torchconnector.s3reader import S3ReaderConstructor  # noqa: E402

SAMPLES = int(os.environ.get("LODE_TRAIN_SAMPLES", "1000" if CLUSTER_MODE else "20000"))
VHOST_DOMAIN = "lode-vhost.test"
HAVE_FUSE = os.geteuid() == 0 and os.path.exists("/dev/fuse")


@pytest.fixture(scope="module")
def train(tmp_path_factory):
    d = tmp_path_factory.mktemp("train")
    mnt = str(d / "mnt")
    # Raw + shards are ~2 x 300 KB per sample; the device is preallocated at its full size.
    dev_gib = max(2, (SAMPLES * 2 * 300_000 * 5 // 4) >> 30) + 1
    extra = ["--mount", mnt] if HAVE_FUSE else []
    if CLUSTER_MODE:
        gws = cluster_gateways(tmp_path_factory, first_args=extra, extra_env={"LODE_DOMAIN": VHOST_DOMAIN})
    else:
        gws = [Lode(str(d / "data"), extra_env={"LODE_DOMAIN": VHOST_DOMAIN}, extra_args=extra,
                    device_size=f"{dev_gib}GiB")]
        gws[0].start()
    # Readers use the first (its mount too); the set goes in through the last.
    srv = gws[0]
    # The CRT client inside s3torchconnector reads its credentials from the environment.
    os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"] = ACCESS_KEY, SECRET_KEY
    bucket = "train-" + uuid.uuid4().hex[:8]
    s3 = trainset.s3_client(gws[-1].endpoint, ACCESS_KEY, SECRET_KEY)
    s3.create_bucket(Bucket=bucket)
    hashes = trainset.generate(s3, bucket, SAMPLES)
    assert len(hashes) == SAMPLES
    yield collections.namedtuple("T", "srv s3 bucket hashes mnt")(srv, s3, bucket, hashes, mnt if HAVE_FUSE else None)
    for g in gws:
        g.remove()


def check_epoch(items, expected):
    names = [n for n, _ in items]
    assert len(names) == len(expected), (len(names), len(expected))
    assert collections.Counter(names) == collections.Counter(expected.keys())  # each sample exactly once
    bad = [n for n, h in items if expected[n] != h]
    assert bad == [], f"{len(bad)} samples differ, e.g. {bad[:3]}"


def test_map_dataset_shuffled_epoch(train):
    ds = trainset.s3_map(train.bucket, train.srv.endpoint)
    assert len(ds) == SAMPLES
    items = trainset.epoch(ds, workers=4, shuffle=True, seed=1)
    check_epoch(items, train.hashes)
    # Shuffled: not in listing order.
    names = [n for n, _ in items]
    assert names != sorted(names)


def test_iterable_dataset_over_tar_shards(train):
    keys = sorted(o["Key"] for p in train.s3.get_paginator("list_objects_v2").paginate(Bucket=train.bucket, Prefix="shards/")
                  for o in p.get("Contents", []))
    assert len(keys) == (SAMPLES + trainset.SHARD - 1) // trainset.SHARD
    import random
    random.Random(3).shuffle(keys)
    ds = trainset.s3_shards(train.bucket, train.srv.endpoint, keys)
    shards = trainset.epoch(ds, workers=4, shuffle=False, batch=1)
    assert len(shards) == len(keys)  # sharded across workers: each shard read once
    check_epoch([s for shard in shards for s in shard], train.hashes)


def test_iterable_dataset_from_prefix(train):
    """`S3IterableDataset.from_prefix` as the docs show it: the listing order, sharded across
    workers (an iterable dataset cannot be shuffled by the DataLoader; the shuffled shard order
    is tested above)."""
    from s3torchconnector import S3IterableDataset

    ds = S3IterableDataset.from_prefix(
        f"s3://{train.bucket}/shards/", region="us-east-1", endpoint=train.srv.endpoint,
        transform=trainset.tar_samples, s3client_config=S3ClientConfig(force_path_style=True),
        enable_sharding=True,
    )
    shards = trainset.epoch(ds, workers=3, shuffle=False, batch=1)
    assert len(shards) == (SAMPLES + trainset.SHARD - 1) // trainset.SHARD
    check_epoch([s for shard in shards for s in shard], train.hashes)


def test_range_based_reader(train):
    ds = trainset.s3_map(train.bucket, train.srv.endpoint, prefix="train/class_03/",
                         transform=trainset.s3_sample_pieces, reader=S3ReaderConstructor.range_based())
    n = min(300, len(ds))
    items = trainset.epoch(torch.utils.data.Subset(ds, range(n)), workers=2, shuffle=True)
    assert len(items) == n and all(name.startswith("class_03/") for name, _ in items)
    check_epoch(items, {name: train.hashes[name] for name, _ in items})


@pytest.fixture
def vhost(train):
    """`<bucket>.lode-vhost.test` -> 127.0.0.1 in /etc/hosts (the bare domain stays unresolvable)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to add an /etc/hosts entry")
    line = f"127.0.0.1 {train.bucket}.{VHOST_DOMAIN}  # lode compat test\n"
    with open("/etc/hosts", "a") as f:
        f.write(line)
    yield f"http://{VHOST_DOMAIN}:{train.srv.port}"
    with open("/etc/hosts") as f:
        now = f.read()
    with open("/etc/hosts", "w") as f:
        f.write(now.replace(line, ""))


def test_virtual_hosted_addressing(train, vhost):
    want = {k: v for k, v in train.hashes.items() if k.startswith("class_05/")}
    ds = trainset.s3_map(train.bucket, vhost, path_style=False, prefix="train/class_05/")
    items = trainset.epoch(ds, workers=2, shuffle=True)
    check_epoch(items, want)
    # The same endpoint path-style cannot work (the bare domain does not resolve): the requests
    # above really went to `<bucket>.<domain>`.
    with pytest.raises(Exception):
        len(trainset.s3_map(train.bucket, vhost, path_style=True, prefix="train/class_05/"))


def test_checkpoint_save_and_load(train):
    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(2, 3, 64, 64)).sum().backward()
    opt.step()
    state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": 7}
    ckpt = S3Checkpoint(region="us-east-1", endpoint=train.srv.endpoint,
                        s3client_config=S3ClientConfig(force_path_style=True))
    uri = f"s3://{train.bucket}/checkpoints/resnet18-epoch7.pt"
    with ckpt.writer(uri) as w:
        torch.save(state, w)
    head = train.s3.head_object(Bucket=train.bucket, Key="checkpoints/resnet18-epoch7.pt")
    assert head["ContentLength"] > 40 << 20  # 11.7 M parameters + momentum buffers
    assert "-" in head["ETag"]  # the CRT uploaded it in parts
    with ckpt.reader(uri) as r:
        back = torch.load(r, weights_only=True)
    assert back["epoch"] == 7
    for k, v in state["model"].items():
        assert torch.equal(v, back["model"][k]), k
    m2 = torchvision.models.resnet18(weights=None)
    m2.load_state_dict(back["model"])
    x = torch.randn(1, 3, 64, 64)
    model.eval(), m2.eval()
    assert torch.equal(model(x), m2(x))
    # Small incremental saves overwrite in place; the reader sees the newest.
    for step in range(3):
        with ckpt.writer(f"s3://{train.bucket}/checkpoints/latest.pt") as w:
            torch.save({"step": step, "w": torch.full((1000,), float(step))}, w)
        with ckpt.reader(f"s3://{train.bucket}/checkpoints/latest.pt") as r:
            assert torch.load(r, weights_only=True)["step"] == step


@pytest.mark.skipif(not HAVE_FUSE, reason="needs FUSE (root)")
def test_image_folder_over_the_mount_matches_s3(train):
    root = os.path.join(train.mnt, train.bucket, "train")
    folder = trainset.image_folder(root)
    assert len(folder) == SAMPLES and len(folder.classes) == trainset.CLASSES
    items = trainset.epoch(trainset.Items(folder), workers=4, shuffle=True, seed=5)
    check_epoch(items, train.hashes)
