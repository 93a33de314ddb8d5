"""Cluster mode: two real `lode serve --cluster ceph` gateways over the real single-host Ceph
cluster that ./test.sh starts (scripts/ceph-dev.sh; LODE_CEPH_CONF names its ceph.conf), driven
by boto3, with requests spread over both gateways. One RADOS namespace per test session."""

import hashlib
import json
import os
import subprocess
import threading
import uuid

import pytest
from botocore.exceptions import ClientError

from conftest import ACCESS_KEY, SECRET_KEY, Lode, lode_bin, make_client

MIB = 1024 * 1024
MASTER = {"LODE_MASTER_KEY": "5e" * 32}
INDEX_POOL = "lode-ct-index"
DATA_POOL = "lode-ct-data"


def ceph_conf():
    conf = os.environ.get("LODE_CEPH_CONF")
    if not conf:
        if os.environ.get("LODE_SKIP_CLUSTER_TESTS") == "1":
            pytest.skip("no cluster (LODE_SKIP_CLUSTER_TESTS=1)")
        pytest.fail("LODE_CEPH_CONF is not set: ./test.sh starts a cluster with scripts/ceph-dev.sh")
    return conf


def cluster_args(namespace, conf=None):
    return ["--cluster", "ceph", "--ceph-conf", conf or ceph_conf(), "--index-pool", INDEX_POOL,
            "--data-pool", DATA_POOL, "--namespace", namespace]


# The gateways of this module split index partitions at 64 keys, so that listings, uploads and
# conditional writes run across partitions (and splits) as they do at 50,000 keys in a big
# bucket.
SPLIT_KEYS = 64


@pytest.fixture(scope="module")
def gateways(tmp_path_factory):
    ns = "ct-" + uuid.uuid4().hex[:10]
    cfg = tmp_path_factory.mktemp("gw-cfg") / "lode.toml"
    cfg.write_text("[cluster]\nindex_split_keys = %d\n" % SPLIT_KEYS)
    gws = []
    for name in ("a", "b"):
        d = tmp_path_factory.mktemp("gw-" + name)
        g = Lode(str(d / "data"), extra_env=MASTER, extra_args=[*cluster_args(ns), "--config", str(cfg)])
        g.namespace = ns
        g.start()
        gws.append(g)
    yield gws
    for g in gws:
        g.stop()


def gateway_pair(tmp_path, ns, config):
    """Two started gateways a and b on namespace `ns`, both with lode.toml text `config`."""
    cfg = tmp_path / "lode.toml"
    cfg.write_text(config)
    gws = []
    for n in ("a", "b"):
        (tmp_path / n).mkdir()
        gws.append(Lode(str(tmp_path / n / "data"), extra_env=MASTER, extra_args=[*cluster_args(ns), "--config", str(cfg)]))
    for g in gws:
        g.start()
    return gws


@pytest.fixture
def ab(gateways):
    a, b = (make_client(g.endpoint) for g in gateways)
    name = "c-" + uuid.uuid4().hex[:10]
    a.create_bucket(Bucket=name)
    yield a, b, name
    for page in a.get_paginator("list_objects_v2").paginate(Bucket=name):
        for o in page.get("Contents", []):
            a.delete_object(Bucket=name, Key=o["Key"])
    a.delete_bucket(Bucket=name)


def code(e):
    return e.value.response["Error"]["Code"]


def test_banner_says_cluster_mode(gateways):
    assert any("rados (index pool lode-ct-index" in line for line in gateways[0].banner)


def test_a_write_through_one_gateway_is_read_through_the_other(ab):
    a, b, bucket = ab
    small, big = b"tiny", os.urandom(9 * MIB + 123)
    a.put_object(Bucket=bucket, Key="s", Body=small)
    a.put_object(Bucket=bucket, Key="dir/big", Body=big)
    assert b.get_object(Bucket=bucket, Key="s")["Body"].read() == small
    got = b.get_object(Bucket=bucket, Key="dir/big")
    assert got["Body"].read() == big and got["ETag"] == '"%s"' % hashlib.md5(big).hexdigest()
    assert b.get_object(Bucket=bucket, Key="dir/big", Range="bytes=4194300-4194310")["Body"].read() == big[4194300:4194311]
    assert [o["Key"] for o in b.list_objects_v2(Bucket=bucket)["Contents"]] == ["dir/big", "s"]
    listed = b.list_objects_v2(Bucket=bucket, Delimiter="/")
    assert [p["Prefix"] for p in listed["CommonPrefixes"]] == ["dir/"] and [o["Key"] for o in listed["Contents"]] == ["s"]
    # Overwrite through b, read through a; delete through b, gone on a.
    b.put_object(Bucket=bucket, Key="s", Body=b"v2")
    assert a.get_object(Bucket=bucket, Key="s")["Body"].read() == b"v2"
    b.delete_object(Bucket=bucket, Key="s")
    with pytest.raises(ClientError) as e:
        a.head_object(Bucket=bucket, Key="s")
    assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
    assert bucket in [x["Name"] for x in b.list_buckets()["Buckets"]]


def early_reads(g):
    """`lode_get_early_reads_total` of gateway `g`: {"used": n, "wasted": n}."""
    import urllib.request
    out = {}
    for line in urllib.request.urlopen(g.admin + "/metrics", timeout=10).read().decode().splitlines():
        if line.startswith("lode_get_early_reads_total{"):
            out[line.split('outcome="')[1].split('"')[0]] = int(float(line.rsplit(" ", 1)[1]))
    return out


def test_a_get_reads_its_first_chunk_beside_the_lookup_and_never_serves_stale_bytes(gateways, ab):
    """A GET through a gateway that saw the key before starts reading the chunk the key's
    record named then, beside the record lookup (lode_objects::early_read), and serves those
    bytes only if the record it reads names that chunk still. Overwrites and deletes through
    the other gateway show at once through the first, each costing it one wasted early read."""
    a, b, bucket = ab
    ga = gateways[0]
    v = [os.urandom(300_000) for _ in range(3)]

    def delta(before):
        now = early_reads(ga)
        return (now["used"] - before["used"], now["wasted"] - before["wasted"])

    a.put_object(Bucket=bucket, Key="k", Body=v[0])
    n = early_reads(ga)
    assert a.get_object(Bucket=bucket, Key="k")["Body"].read() == v[0]
    assert delta(n) == (1, 0)
    # Overwritten through b: a's guess is stale and dropped; a serves the new bytes.
    b.put_object(Bucket=bucket, Key="k", Body=v[1])
    n = early_reads(ga)
    assert a.get_object(Bucket=bucket, Key="k")["Body"].read() == v[1]
    assert delta(n) == (0, 1)
    n = early_reads(ga)
    assert a.get_object(Bucket=bucket, Key="k", Range="bytes=1000-1999")["Body"].read() == v[1][1000:2000]
    assert a.get_object(Bucket=bucket, Key="k")["Body"].read() == v[1]
    assert delta(n) == (2, 0)
    # Deleted through b: 404 through a, its early read wasted.
    b.delete_object(Bucket=bucket, Key="k")
    n = early_reads(ga)
    with pytest.raises(ClientError) as e:
        a.get_object(Bucket=bucket, Key="k")
    assert e.value.response["Error"]["Code"] == "NoSuchKey"
    assert delta(n) == (0, 1)
    # Written again through b: a has no guess (its last read found none), reads it plainly.
    b.put_object(Bucket=bucket, Key="k", Body=v[2])
    n = early_reads(ga)
    assert a.get_object(Bucket=bucket, Key="k")["Body"].read() == v[2]
    assert delta(n) == (0, 0)
    # A small object is inline in its index entry: no chunk, nothing read early.
    a.put_object(Bucket=bucket, Key="small", Body=b"tiny")
    n = early_reads(ga)
    assert a.get_object(Bucket=bucket, Key="small")["Body"].read() == b"tiny"
    assert delta(n) == (0, 0)
    # Versions by id, in a versioned bucket: the first GET of a version through a reads in
    # series; the next ones read its chunk early (a version never changes); one deleted
    # through b is NoSuchVersion through a, its early read wasted.
    vb = bucket + "-ver"
    a.create_bucket(Bucket=vb)
    a.put_bucket_versioning(Bucket=vb, VersioningConfiguration={"Status": "Enabled"})
    ids = [b.put_object(Bucket=vb, Key="k", Body=body)["VersionId"] for body in v[:2]]
    n = early_reads(ga)
    for i in (0, 1):
        assert a.get_object(Bucket=vb, Key="k", VersionId=ids[i])["Body"].read() == v[i]
    assert delta(n) == (0, 0)
    n = early_reads(ga)
    for i in (0, 1, 0):
        assert a.get_object(Bucket=vb, Key="k", VersionId=ids[i])["Body"].read() == v[i]
    assert delta(n) == (3, 0)
    b.delete_object(Bucket=vb, Key="k", VersionId=ids[0])
    n = early_reads(ga)
    with pytest.raises(ClientError) as e:
        a.get_object(Bucket=vb, Key="k", VersionId=ids[0])
    assert e.value.response["Error"]["Code"] == "NoSuchVersion"
    assert delta(n) == (0, 1)


def test_a_put_into_a_bucket_deleted_through_the_other_gateway_is_no_such_bucket(gateways):
    a, b = (make_client(g.endpoint) for g in gateways)
    name = "c-" + uuid.uuid4().hex[:10]
    a.create_bucket(Bucket=name)
    b.put_object(Bucket=name, Key="k", Body=b"x")
    b.delete_object(Bucket=name, Key="k")
    a.delete_bucket(Bucket=name)
    for body in (b"small", os.urandom(5 * MIB)):
        with pytest.raises(ClientError) as e:
            b.put_object(Bucket=name, Key="k2", Body=body)
        assert code(e) == "NoSuchBucket"
    assert name not in [x["Name"] for x in b.list_buckets()["Buckets"]]


def test_multipart_across_gateways_and_a_retried_complete(ab):
    a, b, bucket = ab
    up = a.create_multipart_upload(Bucket=bucket, Key="mp")["UploadId"]
    p1, p2 = os.urandom(5 * MIB), os.urandom(1234)
    e1 = a.upload_part(Bucket=bucket, Key="mp", UploadId=up, PartNumber=1, Body=p1)["ETag"]
    e2 = b.upload_part(Bucket=bucket, Key="mp", UploadId=up, PartNumber=2, Body=p2)["ETag"]
    assert [u["UploadId"] for u in b.list_multipart_uploads(Bucket=bucket)["Uploads"]] == [up]
    assert [p["PartNumber"] for p in a.list_parts(Bucket=bucket, Key="mp", UploadId=up)["Parts"]] == [1, 2]
    parts = {"Parts": [{"PartNumber": 1, "ETag": e1}, {"PartNumber": 2, "ETag": e2}]}
    r = b.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=up, MultipartUpload=parts)
    # The retry of a lost reply, through the other gateway, gets the same answer.
    again = a.complete_multipart_upload(Bucket=bucket, Key="mp", UploadId=up, MultipartUpload=parts)
    assert again["ETag"] == r["ETag"] and r["ETag"].endswith('-2"')
    assert a.get_object(Bucket=bucket, Key="mp")["Body"].read() == p1 + p2
    assert a.get_object(Bucket=bucket, Key="mp", PartNumber=2)["Body"].read() == p2
    assert not b.list_multipart_uploads(Bucket=bucket).get("Uploads")
    # An aborted upload is gone everywhere.
    up2 = b.create_multipart_upload(Bucket=bucket, Key="ab")["UploadId"]
    b.upload_part(Bucket=bucket, Key="ab", UploadId=up2, PartNumber=1, Body=b"x")
    a.abort_multipart_upload(Bucket=bucket, Key="ab", UploadId=up2)
    with pytest.raises(ClientError) as e:
        b.list_parts(Bucket=bucket, Key="ab", UploadId=up2)
    assert code(e) == "NoSuchUpload"


def test_if_none_match_races_across_gateways_exactly_one_wins(ab):
    a, b, bucket = ab
    rounds = 1000
    for i in range(rounds):
        results = {}

        def put(client, tag):
            try:
                client.put_object(Bucket=bucket, Key=f"race-{i}", Body=tag.encode(), IfNoneMatch="*")
                results[tag] = "ok"
            except ClientError as e:
                results[tag] = code_of(e)

        ts = [threading.Thread(target=put, args=(c, t)) for c, t in ((a, "a"), (b, "b"))]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        assert sorted(results.values()) == ["PreconditionFailed", "ok"], (i, results)
        winner = next(t for t, r in results.items() if r == "ok")
        assert a.get_object(Bucket=bucket, Key=f"race-{i}")["Body"].read() == winner.encode()


def code_of(e):
    return e.response["Error"]["Code"]


def partition_objects(ns, bucket):
    """The bucket's index partition objects after the first, as `rados ls` shows them."""
    out = subprocess.run(["rados", "-c", ceph_conf(), "-p", INDEX_POOL, "-N", ns, "ls"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    return [o for o in out.split() if o.startswith(f"lode.part.{bucket}.")]


def test_a_bucket_index_splits_under_writes_and_lists_across_partitions(gateways, ab):
    """Eight writers through both gateways (monotonic shard names and random image names)
    fill a bucket whose index partitions split at 64 keys while they write; then paged and
    delimited listings through either gateway are exactly what was written, and the index
    is several RADOS objects."""
    import random
    from concurrent.futures import ThreadPoolExecutor

    a, b, bucket = ab
    ns = gateways[0].extra_args[gateways[0].extra_args.index("--namespace") + 1]
    keys = [f"shards/shard-{i:06d}" for i in range(300)]
    keys += [f"img/{random.randrange(16)}/{uuid.uuid4().hex[:8]}.jpg" for _ in range(300)]
    bodies = {k: hashlib.sha1(k.encode()).digest() for k in keys}

    def put(i):
        client = (a, b)[i % 2]
        for k in keys[i::8]:
            client.put_object(Bucket=bucket, Key=k, Body=bodies[k])

    with ThreadPoolExecutor(8) as ex:
        list(ex.map(put, range(8)))
    for client in (a, b):
        got = []
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, PaginationConfig={"PageSize": 37}):
            got += [o["Key"] for o in page.get("Contents", [])]
        assert got == sorted(keys)
        top = client.list_objects_v2(Bucket=bucket, Delimiter="/")
        assert [p["Prefix"] for p in top["CommonPrefixes"]] == ["img/", "shards/"]
        imgs = client.list_objects_v2(Bucket=bucket, Prefix="img/", Delimiter="/")
        assert [p["Prefix"] for p in imgs["CommonPrefixes"]] == sorted({k.rsplit("/", 1)[0] + "/" for k in keys if k.startswith("img/")})
    # Splits run in the background: wait (bounded) for them to show.
    import time
    deadline = time.monotonic() + 30
    while len(partition_objects(ns, bucket)) < 4 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert len(partition_objects(ns, bucket)) >= 4
    for k in random.sample(keys, 40):
        assert b.get_object(Bucket=bucket, Key=k)["Body"].read() == bodies[k]


def test_a_versioning_change_through_one_gateway_holds_for_the_next_write_through_the_other(ab):
    """Gateway b has just read the bucket as unversioned (its cached state); a enables
    versioning: the announcement reaches b before a answers, so b's very next write makes a
    version and keeps the one it replaces. Suspending works the same way."""
    a, b, name = ab
    b.put_object(Bucket=name, Key="k", Body=b"0")
    a.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Enabled"})
    v1 = b.put_object(Bucket=name, Key="k", Body=b"1").get("VersionId")
    assert v1 and v1 != "null"
    listed = a.list_object_versions(Bucket=name)["Versions"]
    assert sorted(v["VersionId"] for v in listed) == sorted([v1, "null"])
    a.put_bucket_versioning(Bucket=name, VersioningConfiguration={"Status": "Suspended"})
    assert b.put_object(Bucket=name, Key="k", Body=b"2").get("VersionId") == "null"
    listed = a.list_object_versions(Bucket=name)["Versions"]
    assert sorted(v["VersionId"] for v in listed) == sorted([v1, "null"]), "the null version was replaced"
    assert a.get_object(Bucket=name, Key="k", VersionId=v1)["Body"].read() == b"1"
    for v in listed:
        b.delete_object(Bucket=name, Key="k", VersionId=v["VersionId"])


def test_copy_and_conditional_writes_in_cluster_mode(ab):
    a, b, bucket = ab
    body = os.urandom(5 * MIB + 7)
    etag = b.put_object(Bucket=bucket, Key="src", Body=body)["ETag"]
    c = a.copy_object(Bucket=bucket, Key="dst", CopySource={"Bucket": bucket, "Key": "src"})
    assert c["CopyObjectResult"]["ETag"] == etag
    # The copy owns its bytes: deleting the source leaves it whole.
    b.delete_object(Bucket=bucket, Key="src")
    assert b.get_object(Bucket=bucket, Key="dst")["Body"].read() == body
    with pytest.raises(ClientError) as e:
        a.put_object(Bucket=bucket, Key="dst", Body=b"x", IfMatch='"00000000000000000000000000000000"')
    assert code(e) == "PreconditionFailed"
    a.put_object(Bucket=bucket, Key="dst", Body=b"x", IfMatch=etag)
    assert b.get_object(Bucket=bucket, Key="dst")["Body"].read() == b"x"


def test_users_and_grants_live_in_the_cluster(gateways):
    """A user added through one gateway's admin API works through the other at once; a grant
    made through one is honoured by the other; a removed user is refused everywhere (the other
    gateway within its two-second refresh)."""
    import json
    import time

    a, b = gateways
    env = dict(os.environ, LODE_SECRET_KEY=SECRET_KEY, RUST_LIB_BACKTRACE="0")

    def admin(g, *args):
        p = subprocess.run([lode_bin(), "admin", "--admin-url", g.admin, *args], capture_output=True, env=env, timeout=30)
        assert p.returncode == 0, p.stderr.decode()
        return p.stdout

    name = "u" + uuid.uuid4().hex[:8]
    creds = json.loads(admin(a, "user", "add", name))
    as_user = lambda g: __import__("boto3").client(
        "s3", endpoint_url=g.endpoint, aws_access_key_id=creds["access_key"], aws_secret_access_key=creds["secret_key"],
        region_name="us-east-1", config=__import__("botocore").config.Config(retries={"max_attempts": 1}))
    ub = as_user(b)
    mine = "u-" + uuid.uuid4().hex[:8]
    ub.create_bucket(Bucket=mine)  # through the other gateway, at once
    ub.put_object(Bucket=mine, Key="k", Body=b"v")
    assert make_client(a.endpoint).get_object(Bucket=mine, Key="k")["Body"].read() == b"v"
    # Root's bucket: denied to the user until a grant through gateway a, honoured by b.
    rootb = "r-" + uuid.uuid4().hex[:8]
    make_client(a.endpoint).create_bucket(Bucket=rootb)
    with pytest.raises(ClientError) as e:
        ub.list_objects_v2(Bucket=rootb)
    assert code(e) == "AccessDenied"
    admin(a, "grant", rootb, name, "read")
    deadline = time.monotonic() + 10
    while True:
        try:
            ub.list_objects_v2(Bucket=rootb)
            break
        except ClientError:
            assert time.monotonic() < deadline, "the grant did not reach the other gateway"
            time.sleep(0.3)
    admin(a, "user", "remove", name)
    ua = as_user(a)
    with pytest.raises(ClientError) as e:
        ua.list_objects_v2(Bucket=mine)
    assert code(e) == "InvalidAccessKeyId"
    deadline = time.monotonic() + 10
    while True:
        try:
            ub.list_objects_v2(Bucket=mine)
        except ClientError as err:
            assert err.response["Error"]["Code"] == "InvalidAccessKeyId"
            break
        assert time.monotonic() < deadline, "a removed user still works on the other gateway"
        time.sleep(0.3)
    r = make_client(a.endpoint)
    r.delete_object(Bucket=mine, Key="k")
    r.delete_bucket(Bucket=mine)
    r.delete_bucket(Bucket=rootb)


def start_fails(tmp_path, args, env=None):
    """Starts a gateway that must refuse to start; returns its stderr."""
    e = dict(os.environ, LODE_ACCESS_KEY=ACCESS_KEY, LODE_SECRET_KEY=SECRET_KEY, RUST_LIB_BACKTRACE="0", **MASTER)
    e.update(env or {})
    p = subprocess.run([lode_bin(), "serve", "--listen", "127.0.0.1:0", "--admin-listen", "", "--data-dir", str(tmp_path / "d"), *args],
                       capture_output=True, env=e, timeout=60)
    assert p.returncode != 0, p.stdout.decode()
    return p.stderr.decode()


def test_bad_cluster_setups_are_refused_at_start(tmp_path):
    conf = ceph_conf()
    ns = "bad-" + uuid.uuid4().hex[:8]
    err = start_fails(tmp_path, cluster_args(ns, str(tmp_path / "missing.conf")))
    assert "is not a readable file" in err
    # Monitors that do not answer: a clear error within the connect timeout, not a hang.
    dead = tmp_path / "dead.conf"
    dead.write_text("[global]\nmon_host = v2:127.0.0.1:1\nauth_cluster_required = none\nauth_service_required = none\nauth_client_required = none\n")
    err = start_fails(tmp_path, cluster_args(ns, str(dead)))
    assert "connecting to the Ceph cluster" in err
    # An erasure-coded pool as the index: refused, nothing written into it.
    subprocess.run(["ceph", "-c", conf, "osd", "erasure-code-profile", "set", "lode-ct-ec", "k=2", "m=1", "crush-failure-domain=osd"], check=True, capture_output=True)
    subprocess.run(["ceph", "-c", conf, "osd", "pool", "create", "lode-ct-ec-index", "8", "8", "erasure", "lode-ct-ec"], check=True, capture_output=True)
    args = cluster_args(ns)
    args[args.index("--index-pool") + 1] = "lode-ct-ec-index"
    err = start_fails(tmp_path, args)
    assert "erasure-coded" in err
    listed = subprocess.run(["rados", "-c", conf, "-p", "lode-ct-ec-index", "ls", "--all"], capture_output=True, check=True)
    assert listed.stdout == b""
    # Cluster mode without root credentials: refused.
    e = dict(os.environ, RUST_LIB_BACKTRACE="0")
    e.pop("LODE_ACCESS_KEY", None)
    e.pop("LODE_SECRET_KEY", None)
    p = subprocess.run([lode_bin(), "serve", "--listen", "127.0.0.1:0", "--admin-listen", "", *cluster_args(ns)], capture_output=True, env=e, timeout=60)
    assert p.returncode != 0 and b"root credentials" in p.stderr
    # Without the shared master key that seals users' secrets: refused.
    p = subprocess.run([lode_bin(), "serve", "--listen", "127.0.0.1:0", "--admin-listen", "", *cluster_args(ns)],
                       capture_output=True, env={k: v for k, v in dict(os.environ, LODE_ACCESS_KEY=ACCESS_KEY, LODE_SECRET_KEY=SECRET_KEY).items() if k != "LODE_MASTER_KEY"}, timeout=60)
    assert p.returncode != 0 and b"LODE_MASTER_KEY" in p.stderr


# cephx ---------------------------------------------------------------------------------------
def ceph_user(name, *pools):
    """client.NAME with the smallest caps Lode needs on `pools` (scripts/ceph-dev.sh user):
    its keyring's path."""
    out = subprocess.run([SCRIPT, "user", os.path.dirname(ceph_conf()), name, *pools],
                         check=True, capture_output=True, text=True)
    return out.stdout.strip().splitlines()[-1]


def ceph(*args):
    return subprocess.run(["ceph", "-c", ceph_conf(), *args], check=True, capture_output=True, text=True)


def osds_have_map(epoch, timeout=60):
    """Waits until every OSD holds the OSD map `epoch`: an op that reaches an OSD after that is
    checked against it (the OSD queues each PG's move to a new map ahead of later ops)."""
    import time
    deadline = time.monotonic() + timeout
    for osd in ceph("osd", "ls").stdout.split():
        while True:
            st = json.loads(ceph("tell", f"osd.{osd}", "status").stdout)
            if st["newest_map"] >= epoch and st["state"] == "active":
                break
            assert time.monotonic() < deadline, f"osd.{osd} still at map {st['newest_map']} < {epoch}"
            time.sleep(0.1)


def test_a_gateway_runs_as_its_own_cephx_user_with_minimal_caps(tmp_path):
    """Lode runs as a user of its own with mon 'allow r' and osd 'allow rw' on its two pools
    only (README "Deploying against your Ceph cluster"). Caps revoked under it: requests end in
    503 within the op timeout with the reason logged, never a hang; given back, a restarted
    gateway serves again. A wrong key, or caps missing on a pool, are refused at start
    with a message that says what to fix."""
    import time
    ns = "cx-" + uuid.uuid4().hex[:8]
    user = "lode-min-" + uuid.uuid4().hex[:6]
    keyring = ceph_user(user, INDEX_POOL, DATA_POOL)
    cfg = tmp_path / "lode.toml"
    cfg.write_text("[cluster]\nop_timeout_secs = 3\n")
    args = [*cluster_args(ns), "--ceph-user", user, "--ceph-keyring", keyring, "--config", str(cfg)]
    (tmp_path / "g").mkdir()
    g = Lode(str(tmp_path / "g" / "data"), extra_env=MASTER, extra_args=args)
    g.start()
    try:
        assert g.proc.poll() is None
        s3 = make_client(g.endpoint)
        s3.create_bucket(Bucket="cxb")
        body = os.urandom(5 * MIB + 3)
        s3.put_object(Bucket="cxb", Key="big", Body=body)
        s3.put_object(Bucket="cxb", Key="small", Body=b"s")
        assert s3.get_object(Bucket="cxb", Key="big")["Body"].read() == body
        assert [o["Key"] for o in s3.list_objects_v2(Bucket="cxb")["Contents"]] == ["big", "small"]
        # Revoked: caps taken away (existing sessions keep theirs until cephx renews their
        # tickets, within auth_service_ticket_ttl) and the client cut off at once, as an
        # operator does it: the gateway's RADOS instances are blocklisted.
        ceph("auth", "caps", f"client.{user}", "mon", "allow r", "osd", "allow r pool=none-of-lodes")
        sessions = json.loads(ceph("tell", "mon.a", "sessions", "-f", "json").stdout)
        addrs = {f'{a["addr"]}/{a["nonce"]}' for x in sessions if x["entity_name"] == f"client.{user}"
                 for a in x["addrs"]["addrvec"]}
        assert addrs, sessions
        for a in addrs:
            ceph("osd", "blocklist", "add", a)
        # The OSDs refuse a blocklisted client once they hold the map that lists it; the mon
        # hands it out asynchronously (on a busy machine, a write can land in between).
        osds_have_map(json.loads(ceph("osd", "dump", "-f", "json").stdout)["epoch"])
        t0 = time.time()
        for key, n in (("after", 1000), ("after-big", 5 * MIB)):
            with pytest.raises(ClientError) as e:
                s3.put_object(Bucket="cxb", Key=key, Body=b"x" * n)
            assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503
        with pytest.raises(ClientError) as e:
            s3.get_object(Bucket="cxb", Key="big")["Body"].read()
        assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503
        assert time.time() - t0 < 3 * 3 + 5  # bounded by op_timeout_secs, never a hang
        log = open(g.log_path).read()
        assert "blocklisted" in log
        # Given back (caps, blocklist lifted): a restarted gateway serves, nothing was lost.
        ceph("auth", "caps", f"client.{user}", "mon", "allow r", "osd",
             f"allow rw pool={INDEX_POOL}, allow rw pool={DATA_POOL}")
        for a in addrs:
            ceph("osd", "blocklist", "rm", a)
        g.restart()
        s3 = make_client(g.endpoint)
        s3.put_object(Bucket="cxb", Key="after", Body=b"y")
        assert s3.get_object(Bucket="cxb", Key="small")["Body"].read() == b"s"
        assert s3.get_object(Bucket="cxb", Key="big")["Body"].read() == body
        assert "after-big" not in [o["Key"] for o in s3.list_objects_v2(Bucket="cxb")["Contents"]]
    finally:
        g.remove()
        ceph("auth", "rm", f"client.{user}")
    # A key the cluster does not know for the user.
    fake = subprocess.run(["ceph-authtool", "--gen-print-key"], check=True, capture_output=True, text=True).stdout.strip()
    bad = tmp_path / "bad.keyring"
    bad.write_text(f"[client.{user}]\n\tkey = {fake}\n")
    err = start_fails(tmp_path, [*cluster_args(ns), "--ceph-user", user, "--ceph-keyring", str(bad)])
    assert f"the cluster refused client.{user}" in err, err
    assert fake not in err
    # Caps on the index pool only: the data pool is named, with the cap it needs.
    other = "lode-half-" + uuid.uuid4().hex[:6]
    half = ceph_user(other, INDEX_POOL)
    try:
        err = start_fails(tmp_path, [*cluster_args(ns), "--ceph-user", other, "--ceph-keyring", half, "--config", str(cfg)])
        assert f"osd 'allow rw pool={DATA_POOL}'" in err, err
    finally:
        ceph("auth", "rm", f"client.{other}")


# Faults --------------------------------------------------------------------------------------
SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "ceph-dev.sh")


def run_load(endpoints, seconds, state, fault=None):
    """Runs the crash test's writers (PUT, overwrite, delete, multipart, append) against
    `endpoints` (three threads each) for `seconds`, calling `fault()` half way. Returns acks per
    endpoint."""
    import time

    from test_crash import KEYS_PER_THREAD, worker

    lock = threading.Lock()
    stop = threading.Event()
    per = {e: {"acked": 0} for e in endpoints}
    threads = []
    for n, e in enumerate(endpoints):
        for t in range(3):
            tid = n * 3 + t
            for i in range(KEYS_PER_THREAD):
                state.setdefault(f"k{tid}-{i}", {"acked": None, "inflight": None})
            threads.append(threading.Thread(target=worker, args=(e, tid, stop, state, lock, per[e])))
    for th in threads:
        th.start()
    time.sleep(seconds / 2)
    if fault:
        fault()
    time.sleep(seconds / 2)
    stop.set()
    for th in threads:
        th.join(timeout=120)
    return {e: c["acked"] for e, c in per.items()}


def check_state(s3, state):
    from test_crash import check_keys

    check_keys(s3, state)


@pytest.fixture
def crash_bucket(gateways):
    s3 = make_client(gateways[1].endpoint)
    s3.create_bucket(Bucket="crash")
    yield s3
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket="crash"):
        for o in page.get("Contents", []):
            s3.delete_object(Bucket="crash", Key=o["Key"])
    for u in s3.list_multipart_uploads(Bucket="crash").get("Uploads", []):
        s3.abort_multipart_upload(Bucket="crash", Key=u["Key"], UploadId=u["UploadId"])
    s3.delete_bucket(Bucket="crash")


def test_kill_9_of_a_gateway_under_load_the_other_keeps_serving(gateways, crash_bucket):
    a, b = gateways
    state = {}
    acked = run_load([a.endpoint, b.endpoint], 4, state, fault=lambda: a.proc.kill())
    a.proc.wait()
    # b kept acknowledging writes after a died (its writers ran the whole time).
    assert acked[b.endpoint] > 0
    check_state(crash_bucket, state)
    a.start()
    check_state(make_client(a.endpoint), state)


def test_kill_9_of_a_gateway_under_load_in_a_versioned_bucket(gateways):
    """The same in a versioned bucket: every acknowledged write is the current version through
    either gateway, overwrites and deletes kept what they replaced, and `lode fsck --cluster`
    finds every version's chunks in the pool (none was collected as released)."""
    import json

    a, b = gateways
    s3 = make_client(b.endpoint)
    s3.create_bucket(Bucket="crash")
    try:
        s3.put_bucket_versioning(Bucket="crash", VersioningConfiguration={"Status": "Enabled"})
        state = {}
        acked = run_load([a.endpoint, b.endpoint], 4, state, fault=lambda: a.proc.kill())
        a.proc.wait()
        assert acked[b.endpoint] > 0
        check_state(s3, state)
        a.start()
        check_state(make_client(a.endpoint), state)
        n = sum(len(p.get("Versions", [])) + len(p.get("DeleteMarkers", []))
                for p in s3.get_paginator("list_object_versions").paginate(Bucket="crash"))
        assert n > len(state), "overwrites kept their versions"
        env = dict(os.environ, RUST_LIB_BACKTRACE="0")
        p = subprocess.run([lode_bin(), "fsck", *cluster_args(a.namespace)], capture_output=True, env=env, timeout=300)
        rep = json.loads(p.stdout)
        assert rep["gaps"] == [], rep
        assert rep["noncurrent_versions"] > 0, rep
    finally:
        for page in s3.get_paginator("list_object_versions").paginate(Bucket="crash"):
            objs = [{"Key": v["Key"], "VersionId": v["VersionId"]}
                    for v in page.get("Versions", []) + page.get("DeleteMarkers", [])]
            if objs:
                s3.delete_objects(Bucket="crash", Delete={"Objects": objs})
        for u in s3.list_multipart_uploads(Bucket="crash").get("Uploads", []):
            s3.abort_multipart_upload(Bucket="crash", Key=u["Key"], UploadId=u["UploadId"])
        s3.delete_bucket(Bucket="crash")


def test_kill_9_of_an_osd_under_load_then_restart(gateways, crash_bucket):
    conf_dir = os.path.dirname(ceph_conf())
    state = {}
    acked = run_load(
        [g.endpoint for g in gateways], 6, state,
        fault=lambda: subprocess.run(["bash", SCRIPT, "kill-osd", conf_dir, "1"], check=True, capture_output=True),
    )
    assert sum(acked.values()) > 0
    check_state(crash_bucket, state)
    subprocess.run(["bash", SCRIPT, "start-osd", conf_dir, "1"], check=True, capture_output=True, timeout=120)
    check_state(make_client(gateways[0].endpoint), state)


def test_a_stopped_primary_osd_gives_slowdown_within_the_op_timeout_and_loses_nothing(tmp_path, gateways):
    """SIGSTOP of the OSD holding the primary of a bucket's index: requests answer 503 SlowDown
    once the op timeout passes (no hang), and after SIGCONT every acknowledged write is there."""
    import json
    import signal
    import time

    conf = ceph_conf()
    conf_dir = os.path.dirname(conf)
    ns = "stop-" + uuid.uuid4().hex[:8]
    cfg = tmp_path / "lode.toml"
    cfg.write_text('[[datapath.devices]]\npath = "dev0.img"\nsize = "64MiB"\n[cluster]\nop_timeout_secs = 4\n')
    g = Lode(str(tmp_path / "data"), extra_env=MASTER, extra_args=["--config", str(cfg), *cluster_args(ns)])
    g.start()
    try:
        s3 = make_client(g.endpoint)
        s3.create_bucket(Bucket="stopped")
        s3.put_object(Bucket="stopped", Key="before", Body=b"acked")
        m = subprocess.run(["ceph", "-c", conf, "osd", "map", INDEX_POOL, "lode.idx.stopped", ns, "--format", "json"],
                           capture_output=True, check=True)
        primary = json.loads(m.stdout)["acting_primary"]
        pid = int(open(os.path.join(conf_dir, "run", f"osd.{primary}.pid")).read())
        os.kill(pid, signal.SIGSTOP)
        try:
            t0 = time.monotonic()
            with pytest.raises(ClientError) as e:
                s3.put_object(Bucket="stopped", Key="during", Body=b"x")
            waited = time.monotonic() - t0
            assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503 and code(e) == "SlowDown"
            assert waited < 30, f"answered after {waited:.1f} s"
        finally:
            os.kill(pid, signal.SIGCONT)
        # Once the OSD is back (or marked down and its PGs re-peered), writes succeed again.
        deadline = time.monotonic() + 120
        while True:
            try:
                s3.put_object(Bucket="stopped", Key="after", Body=b"y")
                break
            except ClientError:
                assert time.monotonic() < deadline, "writes did not recover"
                time.sleep(1)
        assert s3.get_object(Bucket="stopped", Key="before")["Body"].read() == b"acked"
        assert s3.get_object(Bucket="stopped", Key="after")["Body"].read() == b"y"
        for k in ("before", "after", "during"):
            s3.delete_object(Bucket="stopped", Key=k)
        s3.delete_bucket(Bucket="stopped")
    finally:
        g.stop()


def test_fsck_cluster_finds_orphans_and_gaps_and_repairs_orphans(tmp_path):
    """`lode fsck --cluster ...` reconciles the index against the data pool both ways: an old
    chunk object no record names is an orphan (removed with --repair), a chunk a record names
    that the pool lacks is a gap; a clean namespace is clean."""
    import json

    conf = ceph_conf()
    ns = "fsck-" + uuid.uuid4().hex[:8]
    g = Lode(str(tmp_path / "data"), extra_env=MASTER, extra_args=cluster_args(ns))
    g.start()
    try:
        s3 = make_client(g.endpoint)
        s3.create_bucket(Bucket="fsk")
        s3.put_object(Bucket="fsk", Key="big", Body=os.urandom(9 * MIB))
        s3.put_object(Bucket="fsk", Key="small", Body=b"inline")
        up = s3.create_multipart_upload(Bucket="fsk", Key="open")["UploadId"]
        s3.upload_part(Bucket="fsk", Key="open", UploadId=up, PartNumber=1, Body=os.urandom(MIB))
    finally:
        g.stop()

    def fsck(*extra):
        env = dict(os.environ, RUST_LIB_BACKTRACE="0")
        p = subprocess.run([lode_bin(), "fsck", *cluster_args(ns), "--min-age-secs", "0", *extra], capture_output=True, env=env, timeout=120)
        return p.returncode, json.loads(p.stdout)

    rc, rep = fsck()
    assert rc == 0 and rep["orphans"] == [] and rep["gaps"] == [], rep
    assert rep["objects"] == 2 and rep["parts"] == 1 and rep["chunks_referenced"] == 4 == rep["chunks_in_pool"]
    rados = ["rados", "-c", conf, "-p", DATA_POOL, "-N", ns]
    chunks = subprocess.run([*rados, "ls"], capture_output=True, check=True).stdout.decode().split()
    orphan = "lode.c.00000001.0000000000100000"  # a chunk from 1970: old enough to judge
    src = tmp_path / "x"
    src.write_bytes(b"orphan")
    subprocess.run([*rados, "put", orphan, str(src)], check=True)
    gone = chunks[0]
    subprocess.run([*rados, "rm", gone], check=True)
    rc, rep = fsck()
    assert rc == 1 and rep["orphans"] == [orphan] and rep["gaps"] == [gone], rep
    rc, rep = fsck("--repair")
    assert rep["removed"] == 1 and rc == 1  # the gap cannot be repaired
    listed = subprocess.run([*rados, "ls"], capture_output=True, check=True).stdout.decode().split()
    assert orphan not in listed
    rc, rep = fsck()
    assert rep["orphans"] == [] and rep["gaps"] == [gone]


def test_released_chunks_of_a_killed_gateway_are_collected_by_the_other(tmp_path):
    """Overwritten and deleted objects release their chunks into the releasing gateway's GC
    queue (a log object in the index pool), not into its memory: after a kill -9 of that
    gateway, the other gateway's collector removes them once the grace is over, and fsck sees
    them as queued meanwhile (never as orphans) and as nothing at all after."""
    import json
    import time

    ns = "gc-" + uuid.uuid4().hex[:8]
    gws = gateway_pair(tmp_path, ns, "[cluster]\nrelease_grace_secs = 3\n")
    a, b = gws

    def fsck():
        env = dict(os.environ, RUST_LIB_BACKTRACE="0")
        p = subprocess.run([lode_bin(), "fsck", *cluster_args(ns), "--min-age-secs", "0"], capture_output=True, env=env, timeout=120)
        return json.loads(p.stdout)

    try:
        s3 = make_client(a.endpoint)
        s3.create_bucket(Bucket="gcb")
        for i in range(3):
            s3.put_object(Bucket="gcb", Key=f"k{i}", Body=os.urandom(5 * MIB))  # two chunks each
        s3.put_object(Bucket="gcb", Key="k0", Body=b"now inline")
        s3.delete_object(Bucket="gcb", Key="k1")
        deadline = time.time() + 30
        while (rep := fsck())["queued_for_gc"] < 4 and time.time() < deadline:
            time.sleep(0.2)
        assert rep["queued_for_gc"] == 4 and rep["orphans"] == [] and rep["chunks_referenced"] == 2, rep
        a.proc.kill()
        a.proc.wait()
        # k2 is untouched and readable through b; the released chunks go within the grace plus
        # a few collector passes (every second at this grace).
        assert make_client(b.endpoint).get_object(Bucket="gcb", Key="k2")["ContentLength"] == 5 * MIB
        deadline = time.time() + 30
        while (rep := fsck())["chunks_in_pool"] > 2 and time.time() < deadline:
            time.sleep(0.5)
        assert rep["chunks_in_pool"] == 2 == rep["chunks_referenced"], rep
        assert rep["queued_for_gc"] == 0 and rep["orphans"] == [] and rep["gaps"] == [], rep
    finally:
        b.stop()
        if a.proc.poll() is None:
            a.stop()


def test_rados_ops_per_s3_operation(tmp_path):
    """What each S3 operation costs in RADOS operations, from the gateway's own counters
    (bench/rados_ops.py prints the same table): a small PUT of a new key is one index write
    (no read: it is guarded on the key being absent), an overwrite one index read and one
    index write (after a few blind tries that missed), a GET or HEAD of a small object one
    index read, a chunked object adds one data op per chunk, a listing page is one index read.
    Background ops (users refresh, GC) are subtracted at their quiet rate; what refreshes with
    time while requests come shows as under one op per second of the requests. Measured on a gateway with the default partition size (the
    module's gateways split at 64 keys, whose counting and splitting would show here)."""
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
    from rados_ops import measure

    g = Lode(str(tmp_path / "data"), extra_env=MASTER, extra_args=cluster_args("ops-" + uuid.uuid4().hex[:8]))
    g.start()
    try:
        seconds = {}
        got = measure(make_client(g.endpoint), g.admin, seconds=seconds)
    finally:
        g.stop()

    def ops(name):
        d = got[name]
        return {k: round(v) for k, v in d.items() if v >= 0.005}, max(abs(v - round(v)) for v in d.values())

    want = {
        "PUT 1 KiB (inline)": {(INDEX_POOL, "write"): 1},
        # No bucket check (the gateway used the bucket a moment ago), then the commit writes.
        # Plus the mark in the run's intent journal (sent beside the last chunk); the chunks'
        # intent was journaled ahead, one append for 32 writes (a few hundredths here).
        "PUT 5 MiB (2 chunks)": {(INDEX_POOL, "write"): 2, (DATA_POOL, "write"): 2},
        "GET 1 KiB": {(INDEX_POOL, "read"): 1},
        "GET 5 MiB": {(INDEX_POOL, "read"): 1, (DATA_POOL, "read"): 2},
        "HEAD": {(INDEX_POOL, "read"): 1},
        "LIST page (120 keys)": {(INDEX_POOL, "read"): 1},
        "overwrite 1 KiB": {(INDEX_POOL, "read"): 1, (INDEX_POOL, "write"): 1},
        # The commit, then the released chunks' append to the GC queue (one for both chunks).
        "DELETE 5 MiB": {(INDEX_POOL, "read"): 1, (INDEX_POOL, "write"): 2},
    }
    for name, w in want.items():
        counted, noise = ops(name)
        counted = {k: v for k, v in counted.items() if v}
        # What refreshes as time passes while requests come (a bucket's settings every 2 s,
        # the master key versions every 10 s, ...) adds under one op a second of traffic:
        # on a slow machine, where a 5 MiB PUT took 0.25 s, a fifth of an op to each.
        allowed = max(0.2, 0.15 + seconds[name])
        assert counted == w and noise < allowed, (name, got[name], seconds[name])


def test_the_cluster_profile_adds_up_every_gateway(gateways):
    """Each gateway registers in the cluster with a lease and publishes its IO profile there;
    `/api/profile?scope=cluster` (and `lode profile --cluster`) on any gateway adds up every
    live gateway's. Writes through a, reads through b: a's own profile sees only the writes,
    the cluster profile on a sees both."""
    import time

    import requests

    a, b = gateways
    sa, sb = make_client(a.endpoint), make_client(b.endpoint)
    name = "prof-" + uuid.uuid4().hex[:8]
    sa.create_bucket(Bucket=name)

    def cluster():
        r = requests.get(a.admin + "/api/profile?scope=cluster", timeout=10)
        assert r.status_code == 200, r.text
        return r.json()

    def local():
        return requests.get(a.admin + "/api/profile", timeout=10).json()

    time.sleep(2.5)  # one publishing period: both gateways' snapshots are current
    c0, l0 = cluster(), local()
    for i in range(30):
        sa.put_object(Bucket=name, Key=f"k{i}", Body=b"x" * 1000)
    for i in range(30):
        assert sb.get_object(Bucket=name, Key=f"k{i}")["Body"].read() == b"x" * 1000
    # a's own profile: the writes, none of the reads.
    l1 = local()
    assert l1["total"]["write"]["ops"] - l0["total"]["write"]["ops"] == 30
    assert l1["total"]["read"]["ops"] == l0["total"]["read"]["ops"]
    # The cluster's, once b has published: both.
    deadline = time.time() + 15
    while True:
        c1 = cluster()
        reads = c1["total"]["read"]["ops"] - c0["total"]["read"]["ops"]
        writes = c1["total"]["write"]["ops"] - c0["total"]["write"]["ops"]
        if reads >= 30 or time.time() > deadline:
            break
        time.sleep(0.5)
    assert len(c1["gateways"]) >= 2, c1["gateways"]
    assert reads == 30 and writes == 30, (reads, writes)
    assert c1["buckets"][name]["read"][0] == 30 and c1["buckets"][name]["write"][0] == 30
    # The command line says the same.
    env = dict(os.environ, RUST_LIB_BACKTRACE="0")
    p = subprocess.run([lode_bin(), "profile", "--cluster", "--endpoint", a.admin], capture_output=True, env=env, timeout=60)
    assert p.returncode == 0 and b"gateway(s) added up" in p.stdout, p.stderr
    for i in range(30):
        sa.delete_object(Bucket=name, Key=f"k{i}")
    sa.delete_bucket(Bucket=name)


def test_mounts_on_two_gateways_see_each_others_changes(tmp_path):
    """Each of two gateways mounts the namespace. Writes, overwrites, deletes through S3 on
    B and a rename and a new file on B's mount are seen on A's mount (the change feed:
    RADOS notifies that drop A's kernel caches), and A's writes on its mount through S3 on B.
    Prints the cross-gateway visibility lag of `stat` after an S3 PUT (p50/p99, 40 rounds)."""
    import statistics
    import time

    if os.geteuid() != 0 or not os.path.exists("/dev/fuse"):
        pytest.skip("FUSE mounts need root and /dev/fuse here")
    ns = "mnt-" + uuid.uuid4().hex[:8]
    gws, mnts = [], []
    for n in ("a", "b"):
        mnt = str(tmp_path / f"mnt-{n}")
        mnts.append(mnt)
        gws.append(Lode(str(tmp_path / n / "data"), extra_env=MASTER, extra_args=[*cluster_args(ns), "--mount", mnt]))
    try:
        for g in gws:
            g.start()
        a, b = (make_client(g.endpoint) for g in gws)
        ma, mb = mnts
        bucket = "m-" + uuid.uuid4().hex[:8]
        b.create_bucket(Bucket=bucket)

        def until(cond, what, limit=10.0):
            t0 = time.monotonic()
            while not cond():
                if time.monotonic() - t0 > limit:
                    raise AssertionError(f"not seen on A's mount within {limit}s: {what}")
                time.sleep(0.001)
            return time.monotonic() - t0

        pa = os.path.join(ma, bucket)
        until(lambda: os.path.isdir(pa), "the bucket")
        # A's kernel knows the directory and a file before the changes come.
        b.put_object(Bucket=bucket, Key="d/f.txt", Body=b"one")
        until(lambda: os.path.exists(os.path.join(pa, "d/f.txt")), "a new file")
        assert open(os.path.join(pa, "d/f.txt"), "rb").read() == b"one"
        assert os.listdir(os.path.join(pa, "d")) == ["f.txt"]
        # Overwrite (other size): attributes and bytes.
        b.put_object(Bucket=bucket, Key="d/f.txt", Body=b"second version")
        until(lambda: os.stat(os.path.join(pa, "d/f.txt")).st_size == 14, "an overwrite's size")
        assert open(os.path.join(pa, "d/f.txt"), "rb").read() == b"second version"
        # A rename on B's mount, then a new file there.
        os.rename(os.path.join(mb, bucket, "d/f.txt"), os.path.join(mb, bucket, "d/g.txt"))
        until(lambda: os.listdir(os.path.join(pa, "d")) == ["g.txt"] and not os.path.exists(os.path.join(pa, "d/f.txt")),
              "a rename on the other mount")
        with open(os.path.join(mb, bucket, "d/new.bin"), "wb") as f:
            f.write(b"\x00" * 5000)
        until(lambda: os.path.exists(os.path.join(pa, "d/new.bin")), "a file written on the other mount")
        assert os.stat(os.path.join(pa, "d/new.bin")).st_size == 5000
        # Rewritten on the other mount: A's cached attributes go.
        with open(os.path.join(mb, bucket, "d/new.bin"), "wb") as f:
            f.write(b"\x01" * 7000)
        until(lambda: os.stat(os.path.join(pa, "d/new.bin")).st_size == 7000, "a rewrite on the other mount")
        assert open(os.path.join(pa, "d/new.bin"), "rb").read() == b"\x01" * 7000
        # Delete through S3.
        b.delete_object(Bucket=bucket, Key="d/g.txt")
        until(lambda: not os.path.exists(os.path.join(pa, "d/g.txt")), "a delete")
        # A directory renamed on the other mount (one announcement for the whole prefix), then
        # a mode changed there (metadata only, no new bytes).
        assert os.path.exists(os.path.join(pa, "d/new.bin"))
        os.rename(os.path.join(mb, bucket, "d"), os.path.join(mb, bucket, "e"))
        until(lambda: os.path.exists(os.path.join(pa, "e/new.bin")) and not os.path.exists(os.path.join(pa, "d")),
              "a directory renamed on the other mount")
        os.chmod(os.path.join(mb, bucket, "e/new.bin"), 0o600)
        until(lambda: os.stat(os.path.join(pa, "e/new.bin")).st_mode & 0o777 == 0o600, "a mode changed on the other mount")
        # The other way: A's mount, B's S3.
        with open(os.path.join(pa, "from-a"), "wb") as f:
            f.write(b"written on A")
        assert b.get_object(Bucket=bucket, Key="from-a")["Body"].read() == b"written on A"
        # The lag of stat after an S3 PUT on the other gateway (A's kernel looked the name up
        # as missing first, so a negative entry must be dropped too).
        lags = []
        for i in range(40):
            p = os.path.join(pa, f"lag-{i}")
            assert not os.path.exists(p)
            t0 = time.monotonic()
            b.put_object(Bucket=bucket, Key=f"lag-{i}", Body=b"x")
            acked = time.monotonic()
            until(lambda: os.path.exists(p), f"lag-{i}")
            lags.append((time.monotonic() - acked) * 1000)
            del t0
        lags.sort()
        p50, p99 = statistics.median(lags), lags[int(len(lags) * 0.99) - 1]
        print(f"\ncross-gateway visibility lag of stat after an S3 PUT (ms after the PUT's reply): p50 {p50:.1f} p99 {p99:.1f} max {lags[-1]:.1f}")
    finally:
        for g in gws:
            g.stop()
        for m in mnts:
            if os.path.ismount(m):
                subprocess.run(["umount", "-l", m], check=False)


def test_chunks_of_an_upload_cut_off_by_kill_9_are_swept_by_the_other_gateway(tmp_path):
    """A gateway killed in the middle of a large upload leaves chunks no record names. Its
    run's intent journal names them: once the run is silent for `gateway_dead_secs`, the
    other gateway's collector removes them, and fsck finds the pool clean (no orphan, no
    gap) with the finished objects whole."""
    import json
    import socket
    import time

    ns = "cut-" + uuid.uuid4().hex[:8]
    gws = gateway_pair(tmp_path, ns, "[cluster]\nrelease_grace_secs = 3\ngateway_dead_secs = 3\n")
    a, b = gws
    rados = ["rados", "-c", ceph_conf(), "-p", DATA_POOL, "-N", ns, "ls"]

    def chunks():
        return [c for c in subprocess.run(rados, capture_output=True, check=True, text=True).stdout.split() if c.startswith("lode.c.")]

    try:
        s3b = make_client(b.endpoint)
        s3b.create_bucket(Bucket="cut")
        whole = os.urandom(9 * MIB)
        s3b.put_object(Bucket="cut", Key="whole", Body=whole)
        before = set(chunks())
        # Through A: a PUT that declares 40 MiB and sends 14 MiB, then A is killed.
        url = make_client(a.endpoint).generate_presigned_url("put_object", Params={"Bucket": "cut", "Key": "partial"}, ExpiresIn=300)
        path = url.split(str(a.port), 1)[1]
        s = socket.create_connection(("127.0.0.1", a.port))
        s.sendall(f"PUT {path} HTTP/1.1\r\nHost: 127.0.0.1:{a.port}\r\nContent-Length: {40 * MIB}\r\n\r\n".encode())
        s.sendall(os.urandom(14 * MIB))
        deadline = time.monotonic() + 30
        while len(set(chunks()) - before) < 3:
            assert time.monotonic() < deadline, "the cut-off upload wrote no chunks"
            time.sleep(0.1)
        a.stop(hard=True)
        s.close()
        orphans = set(chunks()) - before
        assert len(orphans) >= 3
        # B's collector sweeps A's journal once A's run is silent for 3 s.
        deadline = time.monotonic() + 60
        while set(chunks()) & orphans:
            assert time.monotonic() < deadline, f"not swept: {sorted(set(chunks()) & orphans)}"
            time.sleep(0.5)
        env = dict(os.environ, RUST_LIB_BACKTRACE="0")
        p = subprocess.run([lode_bin(), "fsck", *cluster_args(ns), "--min-age-secs", "0"], capture_output=True, env=env, timeout=120)
        rep = json.loads(p.stdout)
        assert p.returncode == 0 and rep["orphans"] == [] and rep["gaps"] == [], rep
        assert s3b.get_object(Bucket="cut", Key="whole")["Body"].read() == whole
        with pytest.raises(ClientError) as e:
            s3b.head_object(Bucket="cut", Key="partial")
        assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
    finally:
        for g in gws:
            if g.proc.poll() is None:
                g.stop()


def test_healthz_and_statfs_report_the_data_pools_capacity(tmp_path):
    """/healthz, /metrics and statfs on the mount report the data pool's capacity as `ceph df`
    has it (the mgr's figures): free = the pool's MAX AVAIL (replication and the full ratio
    taken out), total = what it stores + MAX AVAIL (as CephFS reports a one-pool file system)."""
    import time
    import urllib.request

    if os.geteuid() != 0 or not os.path.exists("/dev/fuse"):
        pytest.skip("FUSE mounts need root and /dev/fuse here")
    conf = ceph_conf()
    mnt = str(tmp_path / "mnt")
    g = Lode(str(tmp_path / "data"), extra_env=MASTER,
             extra_args=[*cluster_args("cap-" + uuid.uuid4().hex[:8]), "--mount", mnt])
    g.start()
    try:
        def health():
            return json.loads(urllib.request.urlopen(g.admin + "/healthz", timeout=10).read())

        deadline = time.monotonic() + 60
        while health()["total_bytes"] == 0:
            assert time.monotonic() < deadline, f"no capacity after 60 s: {health()}"
            time.sleep(1)
        h = health()
        df = json.loads(subprocess.run(["ceph", "-c", conf, "df", "-f", "json"], check=True,
                                       capture_output=True, text=True).stdout)
        pool = next(p for p in df["pools"] if p["name"] == DATA_POOL)["stats"]
        # The figures move as the other tests write: within 5% of `ceph df` read just after.
        assert abs(h["free_bytes"] - pool["max_avail"]) <= 0.05 * pool["max_avail"], (h, pool)
        assert h["free_bytes"] <= h["total_bytes"]
        assert abs(h["total_bytes"] - (pool["stored"] + pool["max_avail"])) <= 0.05 * h["total_bytes"], (h, pool)
        # Three replicas: the pool's capacity is well under the raw bytes of its OSDs.
        assert h["total_bytes"] < df["stats"]["total_bytes"] / 2
        st = os.statvfs(mnt)
        assert abs(st.f_blocks * st.f_frsize - h["total_bytes"]) <= 0.05 * h["total_bytes"], (st, h)
        assert abs(st.f_bavail * st.f_frsize - h["free_bytes"]) <= 0.05 * h["total_bytes"], (st, h)
        metrics = urllib.request.urlopen(g.admin + "/metrics", timeout=10).read().decode()
        assert any(line.startswith("lode_") and "total_bytes" in line and not line.endswith(" 0")
                   for line in metrics.splitlines() if not line.startswith("#")), metrics[:2000]
    finally:
        g.stop()


def test_scrub_in_cluster_mode_one_gateway_at_a_time_finds_a_rewritten_chunk(tmp_path):
    """A chunk object rewritten in the data pool with other bytes (every replica alike, so
    Ceph's own deep scrub finds nothing) fails its GET; the background scrub, which one gateway
    of two runs at a time (a lease in the index), reports key, version and chunk; `lode scrub`
    against the namespace exits 1 naming it, and 0 on a clean namespace."""
    import time
    import urllib.request

    conf = ceph_conf()
    ns = "scrub-" + uuid.uuid4().hex[:8]
    a, b = gateway_pair(tmp_path, ns, '[scrub]\nenabled = true\nrate = "256MiB"\ninterval_secs = 3\nstart_delay_secs = 0\n')
    rados = ["rados", "-c", conf, "-p", DATA_POOL, "-N", ns]
    try:
        s3 = make_client(a.endpoint)
        s3.create_bucket(Bucket="scr")
        healthy = os.urandom(5 * MIB)
        s3.put_object(Bucket="scr", Key="healthy", Body=healthy)
        before = set(subprocess.run([*rados, "ls"], capture_output=True, check=True, text=True).stdout.split())
        vid = s3.put_object(Bucket="scr", Key="victim", Body=os.urandom(6 * MIB)).get("VersionId", "null")
        mine = sorted(set(subprocess.run([*rados, "ls"], capture_output=True, check=True, text=True).stdout.split()) - before)
        assert len(mine) == 2, mine
        victim = mine[0]
        blob = tmp_path / "chunk"
        subprocess.run([*rados, "get", victim, str(blob)], check=True)
        data = bytearray(blob.read_bytes())
        data[1234] ^= 0xFF
        blob.write_bytes(bytes(data))
        subprocess.run([*rados, "put", victim, str(blob)], check=True)
        try:
            got = make_client(b.endpoint).get_object(Bucket="scr", Key="victim")["Body"].read()
        except Exception:
            got = None
        assert got is None, "a chunk that fails its crc must not be served"
        assert s3.get_object(Bucket="scr", Key="healthy")["Body"].read() == healthy

        def scrub(g):
            return json.loads(urllib.request.urlopen(g.admin + "/api/scrub", timeout=10).read())

        deadline = time.monotonic() + 60
        while not any(scrub(g)["last_pass_bad"] for g in (a, b)):
            assert time.monotonic() < deadline, [scrub(g) for g in (a, b)]
            time.sleep(0.5)
        reps = [scrub(g) for g in (a, b)]
        bad = [x for r in reps for x in r["last_pass_bad"]]
        oid = lambda x: f"lode.c.{x['dev']:08x}.{x['offset']:016x}"
        assert [(x["bucket"], x["key"], x["version"], oid(x)) for x in bad] == [("scr", "victim", vid, victim)], reps
        # Passes are shared: about one per interval (3 s) between both gateways, where each on
        # its own would make one per interval (8 in 12 s).
        p0 = sum(scrub(g)["passes"] for g in (a, b))
        time.sleep(12)
        reps = [scrub(g) for g in (a, b)]
        passes = sum(r["passes"] for r in reps) - p0
        assert 1 <= passes <= 5, (passes, reps)
    finally:
        for g in (a, b):
            g.stop()

    def offline(namespace):
        p = subprocess.run([lode_bin(), "scrub", *cluster_args(namespace), "--data-dir", str(tmp_path / "off")],
                           capture_output=True, env=dict(os.environ, RUST_LIB_BACKTRACE="0"), timeout=120)
        return p.returncode, json.loads(p.stdout or b"{}"), p.stderr.decode()[-2000:]

    rc, out, err = offline(ns)
    assert rc == 1, err
    assert [(x["key"], oid(x)) for x in out["bad"]] == [("victim", victim)] and out["objects"] == 2, out
    subprocess.run([*rados, "rm", victim], check=True)
    clean = "scrubc-" + uuid.uuid4().hex[:8]
    g = Lode(str(tmp_path / "c" / "data"), extra_env=MASTER, extra_args=cluster_args(clean))
    g.start()
    try:
        make_client(g.endpoint).create_bucket(Bucket="okb")
        make_client(g.endpoint).put_object(Bucket="okb", Key="k", Body=os.urandom(5 * MIB))
    finally:
        g.stop()
    rc, out, err = offline(clean)
    assert rc == 0 and out["bad"] == [] and out["chunks"] == 2, (out, err)


# A full pool ---------------------------------------------------------------------------------


def pool_flags(pool):
    for p in json.loads(ceph("osd", "pool", "ls", "detail", "-f", "json").stdout):
        if p["pool_name"] == pool:
            return p.get("flags_names", "")
    return ""


def pool_stored(pool):
    for p in json.loads(ceph("df", "-f", "json").stdout)["pools"]:
        if p["name"] == pool:
            return p["stats"]["stored"]
    return 0


def wait_flag(pool, full, timeout=90):
    """Waits until the mon flags `pool` full (or not), and every OSD holds that map: until
    then an OSD still judges writes by its older map (a write lands on a pool the mon already
    flagged full)."""
    import time
    deadline = time.monotonic() + timeout
    while ("full_quota" in pool_flags(pool)) != full:
        assert time.monotonic() < deadline, f"{pool}: full_quota still {not full} after {timeout} s"
        time.sleep(0.5)
    osds_have_map(json.loads(ceph("osd", "dump", "-f", "json").stdout)["epoch"])


def test_a_full_data_pool_answers_507_at_once_and_deletes_still_free_space(tmp_path):
    """The data pool at its quota (the mon flags it full): a PUT answers 507
    InsufficientStorage at once, not after the op timeout, and leaves nothing visible; GETs
    and DELETEs go on, so space can be freed; once the pool has room again, PUTs succeed."""
    import time
    ns = "full-" + uuid.uuid4().hex[:8]
    # A data pool of its own, made by the gateway, removed at the end.
    FULL_POOL = "lode-ct-" + ns
    cfg = tmp_path / "lode.toml"
    cfg.write_text("[cluster]\nop_timeout_secs = 30\n")
    args = [*cluster_args(ns), "--config", str(cfg)]
    args[args.index("--data-pool") + 1] = FULL_POOL
    (tmp_path / "g").mkdir()
    g = Lode(str(tmp_path / "g" / "data"), extra_env=MASTER, extra_args=args)
    g.start()
    try:
        s3 = make_client(g.endpoint)
        s3.create_bucket(Bucket="full-b")
        # Room for about 8 MiB (the gateway's start probe left nothing).
        ceph("osd", "pool", "set-quota", FULL_POOL, "max_bytes", str(pool_stored(FULL_POOL) + 8 * MIB))
        kept = {}
        for i in range(12):
            body = os.urandom(MIB)
            try:
                s3.put_object(Bucket="full-b", Key=f"k{i}", Body=body)
                kept[f"k{i}"] = body
            except ClientError as e:
                assert e.response["ResponseMetadata"]["HTTPStatusCode"] == 507, e.response
        wait_flag(FULL_POOL, True)
        for key, n in (("small", 100 * 1024), ("big", 9 * MIB)):
            t0 = time.monotonic()
            with pytest.raises(ClientError) as e:
                s3.put_object(Bucket="full-b", Key=key, Body=os.urandom(n))
            assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 507
            assert code(e) == "InsufficientStorage"
            assert time.monotonic() - t0 < 10, "a full pool must answer at once, not at the op timeout"
            with pytest.raises(ClientError) as e:
                s3.head_object(Bucket="full-b", Key=key)
            assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 404
        # A body small enough to live inline in the index pool (16 KiB) takes nothing from the
        # data pool: it is stored.
        s3.put_object(Bucket="full-b", Key="inline", Body=b"i" * 1000)
        kept["inline"] = b"i" * 1000
        # A multipart part is refused the same way.
        up = s3.create_multipart_upload(Bucket="full-b", Key="mp")["UploadId"]
        with pytest.raises(ClientError) as e:
            s3.upload_part(Bucket="full-b", Key="mp", UploadId=up, PartNumber=1, Body=os.urandom(5 * MIB))
        assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 507
        s3.abort_multipart_upload(Bucket="full-b", Key="mp", UploadId=up)
        # Reads and deletes go on while it is full.
        assert kept, "the quota left room for no object at all"
        for key, body in kept.items():
            assert s3.get_object(Bucket="full-b", Key=key)["Body"].read() == body
        listed = [o["Key"] for o in s3.list_objects_v2(Bucket="full-b").get("Contents", [])]
        assert sorted(listed) == sorted(kept)
        t0 = time.monotonic()
        for key in list(kept)[: len(kept) // 2 + 1]:
            s3.delete_object(Bucket="full-b", Key=key)
            del kept[key]
        assert time.monotonic() - t0 < 20
        # Room again (the quota lifted): writes succeed, and nothing acknowledged was lost.
        ceph("osd", "pool", "set-quota", FULL_POOL, "max_bytes", "0")
        wait_flag(FULL_POOL, False)
        s3.put_object(Bucket="full-b", Key="after", Body=b"room again")
        assert s3.get_object(Bucket="full-b", Key="after")["Body"].read() == b"room again"
        for key, body in kept.items():
            assert s3.get_object(Bucket="full-b", Key=key)["Body"].read() == body
        assert "full" in open(g.log_path).read()
        for key in [*kept, "after"]:
            s3.delete_object(Bucket="full-b", Key=key)
        s3.delete_bucket(Bucket="full-b")
    finally:
        g.remove()
        ceph("osd", "pool", "rm", FULL_POOL, FULL_POOL, "--yes-i-really-really-mean-it")
