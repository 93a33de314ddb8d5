"""Bucket event notifications: boto3's configuration calls and AWS's errors, and the events a
real webhook receiver (`webhook_receiver.py`, its own process) gets for every kind of change,
through the S3 door, the mount and the lifecycle worker; delivery across a kill -9 of the
server under load and across the receiver being down; the full-backlog policies; signatures.

In cluster mode (./test.sh's second pass) every test runs against cluster-mode gateways over
the Ceph cluster, each on a fresh RADOS namespace; one more test there kills a gateway right
after its writes were acknowledged and checks that another one delivers their events."""

import json
import os
import subprocess
import sys
import threading
import time

import pytest
import requests
from botocore.exceptions import ClientError

from conftest import ACCESS_KEY, CLUSTER_MODE, SECRET_KEY, Lode, cluster_gateways, lode_bin, make_client

HERE = os.path.dirname(os.path.abspath(__file__))
needs_fuse = pytest.mark.skipif(
    os.geteuid() != 0 or not os.path.exists("/dev/fuse"), reason="FUSE mounts need root and /dev/fuse here"
)


class Receiver:
    """The webhook receiver process; `stop()` and `start()` again keep its port."""

    def __init__(self, directory, secret_file=None, tls=None, name="events"):
        self.out = os.path.join(directory, f"{name}.jsonl")
        self.secret_file = secret_file
        self.tls = tls
        self.port = 0
        self.proc = None

    def start(self):
        if os.path.exists(self.out + ".port"):
            os.remove(self.out + ".port")
        args = [sys.executable, os.path.join(HERE, "webhook_receiver.py"), self.out, str(self.port)]
        if self.secret_file:
            args.append(self.secret_file)
        env = dict(os.environ)
        if self.tls:
            env["LODE_RECEIVER_TLS"] = ":".join(self.tls)
        self.proc = subprocess.Popen(args, env=env)
        for _ in range(200):
            if os.path.exists(self.out + ".port") and open(self.out + ".port").read():
                self.port = int(open(self.out + ".port").read())
                return self
            time.sleep(0.05)
        raise RuntimeError("the webhook receiver did not start")

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def messages(self):
        if not os.path.exists(self.out):
            return []
        with open(self.out) as f:
            return [json.loads(line) for line in f if line.strip()]

    def records(self, bucket=None):
        """Every event record received, in arrival order (test events left out)."""
        out = []
        for m in self.messages():
            for r in m["body"].get("Records", []):
                if bucket is None or r["s3"]["bucket"]["name"] == bucket:
                    out.append(r)
        return out

    def wait(self, pred, timeout=30, what="events"):
        deadline = time.time() + timeout
        while time.time() < deadline:
            got = pred()
            if got:
                return got
            time.sleep(0.1)
        raise AssertionError(f"timed out waiting for {what}; got {[(r['eventName'], r['s3']['object']['key']) for r in self.records()]}")


class _Dirs:
    """Directories under one test's tmp_path, as `cluster_gateways` asks them of a factory."""

    def __init__(self, base):
        self.base, self.n = base, 0

    def mktemp(self, name):
        self.n += 1
        p = self.base / f"{name}{self.n}"
        p.mkdir()
        return p


def start_server(tmp_path, extra_toml, extra_args=(), gateways=1):
    """One local server; in cluster mode, `gateways` cluster-mode gateways on a fresh namespace
    of the cluster (the first one gets `extra_args`). Returns the first; all are in `.peers`."""
    if CLUSTER_MODE:
        gws = cluster_gateways(_Dirs(tmp_path), n=gateways, first_args=extra_args, extra_toml=extra_toml)
        gws[0].peers = gws
        return gws[0]
    srv = Lode(str(tmp_path / "data"), extra_args=list(extra_args), extra_toml=extra_toml).start()
    srv.peers = [srv]
    return srv


def notify_toml(port, name="hook", **settings):
    lines = [f"[notify.{name}]", 'type = "webhook"', f'url = "http://127.0.0.1:{port}/events"']
    for k, v in settings.items():
        lines.append(f"{k} = {json.dumps(v)}")
    return "\n".join(lines) + "\n"


@pytest.fixture
def receiver(tmp_path):
    r = Receiver(str(tmp_path)).start()
    yield r
    r.stop()


@pytest.fixture
def server(tmp_path, receiver):
    srv = start_server(tmp_path, notify_toml(receiver.port))
    yield srv
    srv.remove()


def configure(s3, bucket, events=("s3:ObjectCreated:*", "s3:ObjectRemoved:*"), prefix=None, suffix=None,
              arn="arn:lode:sqs:::hook", rule_id="cfg1"):
    rules = []
    if prefix is not None:
        rules.append({"Name": "prefix", "Value": prefix})
    if suffix is not None:
        rules.append({"Name": "suffix", "Value": suffix})
    q = {"Id": rule_id, "QueueArn": arn, "Events": list(events)}
    if rules:
        q["Filter"] = {"Key": {"FilterRules": rules}}
    s3.put_bucket_notification_configuration(Bucket=bucket, NotificationConfiguration={"QueueConfigurations": [q]})


def names(records):
    return [(r["eventName"], r["s3"]["object"]["key"]) for r in records]


def code(e):
    return e.value.response["Error"]["Code"]


def test_an_unknown_destination_is_refused_and_an_empty_configuration_removes(s3, bucket):
    """The session's servers declare no destination: a configuration naming one is refused;
    an empty one (removing it) is fine."""
    with pytest.raises(ClientError) as e:
        configure(s3, bucket, arn="arn:lode:sqs:::nowhere")
    assert code(e) == "InvalidArgument"
    s3.put_bucket_notification_configuration(Bucket=bucket, NotificationConfiguration={})
    got = s3.get_bucket_notification_configuration(Bucket=bucket)
    assert "QueueConfigurations" not in got and "TopicConfigurations" not in got


def test_configuration_calls_and_aws_errors(server, receiver):
    s3 = make_client(server.endpoint)
    s3.create_bucket(Bucket="cfg")
    s3.put_bucket_notification_configuration(Bucket="cfg", NotificationConfiguration={
        "QueueConfigurations": [{"Id": "q", "QueueArn": "arn:lode:sqs:::hook", "Events": ["s3:ObjectCreated:*"],
                                 "Filter": {"Key": {"FilterRules": [{"Name": "prefix", "Value": "in/"},
                                                                    {"Name": "suffix", "Value": ".jpg"}]}}}],
        "TopicConfigurations": [{"TopicArn": "arn:lode:sns:::hook", "Events": ["s3:ObjectRemoved:Delete"]}],
    })
    got = s3.get_bucket_notification_configuration(Bucket="cfg")
    q, = got["QueueConfigurations"]
    assert q["Id"] == "q" and q["QueueArn"] == "arn:lode:sqs:::hook" and q["Events"] == ["s3:ObjectCreated:*"]
    assert sorted((r["Name"], r["Value"]) for r in q["Filter"]["Key"]["FilterRules"]) == [("prefix", "in/"), ("suffix", ".jpg")]
    t, = got["TopicConfigurations"]
    assert t["TopicArn"] == "arn:lode:sns:::hook" and t["Id"]  # an id is made up when none is given
    # AWS sends s3:TestEvent to the destination when a configuration is set.
    receiver.wait(lambda: [m for m in receiver.messages() if m["body"].get("Event") == "s3:TestEvent"
                           and m["body"]["Bucket"] == "cfg"], what="the test event")

    bad = [
        {"QueueConfigurations": [{"QueueArn": "arn:lode:sqs:::hook", "Events": ["s3:ObjectCreated:Bogus"]}]},
        {"QueueConfigurations": [{"QueueArn": "arn:lode:sqs:::nope", "Events": ["s3:ObjectCreated:*"]}]},
        # A queue configuration naming a topic ARN.
        {"QueueConfigurations": [{"QueueArn": "arn:lode:sns:::hook", "Events": ["s3:ObjectCreated:*"]}]},
        {"LambdaFunctionConfigurations": [{"LambdaFunctionArn": "arn:aws:lambda:us-east-1:1:function:f",
                                           "Events": ["s3:ObjectCreated:*"]}]},
        {"QueueConfigurations": [{"QueueArn": "arn:lode:sqs:::hook", "Events": ["s3:ObjectCreated:*"],
                                  "Filter": {"Key": {"FilterRules": [{"Name": "prefix", "Value": "a"},
                                                                     {"Name": "prefix", "Value": "b"}]}}}]},
        # Overlapping: the same event type and prefixes one of which starts the other.
        {"QueueConfigurations": [
            {"QueueArn": "arn:lode:sqs:::hook", "Events": ["s3:ObjectCreated:*"],
             "Filter": {"Key": {"FilterRules": [{"Name": "prefix", "Value": "in/"}]}}},
            {"QueueArn": "arn:lode:sqs:::hook", "Events": ["s3:ObjectCreated:Put"],
             "Filter": {"Key": {"FilterRules": [{"Name": "prefix", "Value": "in/a"}]}}}]},
    ]
    for doc in bad:
        with pytest.raises(ClientError) as e:
            s3.put_bucket_notification_configuration(Bucket="cfg", NotificationConfiguration=doc)
        assert code(e) == "InvalidArgument", doc
        assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
    # Nothing refused changed what is stored.
    assert s3.get_bucket_notification_configuration(Bucket="cfg")["QueueConfigurations"] == [q]
    with pytest.raises(ClientError) as e:
        s3.get_bucket_notification_configuration(Bucket="no-such-bucket-here")
    assert code(e) == "NoSuchBucket"


def test_every_s3_change_makes_exactly_its_event(server, receiver):
    s3 = make_client(server.endpoint)
    s3.create_bucket(Bucket="evs")
    s3.put_bucket_notification_configuration(Bucket="evs", NotificationConfiguration={"QueueConfigurations": [
        {"Id": "all", "QueueArn": "arn:lode:sqs:::hook",
         "Events": ["s3:ObjectCreated:*", "s3:ObjectRemoved:*", "s3:ObjectTagging:*", "s3:ObjectAcl:Put"],
         "Filter": {"Key": {"FilterRules": [{"Name": "prefix", "Value": "in/"}]}}},
        {"Id": "jpg", "QueueArn": "arn:lode:sqs:::hook", "Events": ["s3:ObjectCreated:Put"],
         "Filter": {"Key": {"FilterRules": [{"Name": "prefix", "Value": "pics/"}, {"Name": "suffix", "Value": ".jpg"}]}}},
    ]})
    put = s3.put_object(Bucket="evs", Key="in/red flower+1.jpg", Body=b"hello")
    s3.put_object(Bucket="evs", Key="out/ignored", Body=b"x")          # no rule's prefix
    s3.put_object(Bucket="evs", Key="pics/cat.png", Body=b"x")         # suffix does not match
    s3.put_object(Bucket="evs", Key="pics/cat.jpg", Body=b"x" * 70_000)
    s3.copy_object(Bucket="evs", Key="in/copy", CopySource="evs/in/red flower+1.jpg")
    up = s3.create_multipart_upload(Bucket="evs", Key="in/mpu")["UploadId"]
    p1 = s3.upload_part(Bucket="evs", Key="in/mpu", UploadId=up, PartNumber=1, Body=b"a" * (5 << 20))
    p2 = s3.upload_part(Bucket="evs", Key="in/mpu", UploadId=up, PartNumber=2, Body=b"b")
    mpu = s3.complete_multipart_upload(Bucket="evs", Key="in/mpu", UploadId=up, MultipartUpload={"Parts": [
        {"PartNumber": 1, "ETag": p1["ETag"]}, {"PartNumber": 2, "ETag": p2["ETag"]}]})
    s3.put_object_tagging(Bucket="evs", Key="in/copy", Tagging={"TagSet": [{"Key": "k", "Value": "v"}]})
    s3.delete_object_tagging(Bucket="evs", Key="in/copy")
    s3.put_object_acl(Bucket="evs", Key="in/copy", ACL="private")
    s3.delete_object(Bucket="evs", Key="in/copy")
    s3.delete_object(Bucket="evs", Key="in/never-there")                # nothing removed: no event
    s3.delete_objects(Bucket="evs", Delete={"Objects": [{"Key": "in/mpu"}, {"Key": "out/ignored"}]})
    # A browser form upload (POST) is ObjectCreated:Post.
    post = s3.generate_presigned_post("evs", "in/form")
    r = requests.post(post["url"], data=post["fields"], files={"file": ("f", b"posted")})
    assert r.status_code == 204, r.text

    want = [
        ("ObjectCreated:Put", "in%2Fred+flower%2B1.jpg"),
        ("ObjectCreated:Put", "pics%2Fcat.jpg"),
        ("ObjectCreated:Copy", "in%2Fcopy"),
        ("ObjectCreated:CompleteMultipartUpload", "in%2Fmpu"),
        ("ObjectTagging:Put", "in%2Fcopy"),
        ("ObjectTagging:Delete", "in%2Fcopy"),
        ("ObjectAcl:Put", "in%2Fcopy"),
        ("ObjectRemoved:Delete", "in%2Fcopy"),
        ("ObjectRemoved:Delete", "in%2Fmpu"),
        ("ObjectCreated:Post", "in%2Fform"),
    ]
    recs = receiver.wait(lambda: (r := receiver.records("evs")) and len(r) >= len(want) and r, what="ten events")
    time.sleep(1)  # anything extra would have arrived by now (delivery is in commit order)
    recs = receiver.records("evs")
    assert names(recs) == want
    first = recs[0]
    assert first["eventVersion"] == "2.1" and first["eventSource"] == "lode:s3"
    assert first["awsRegion"] == "us-east-1"
    assert first["userIdentity"]["principalId"] == "root"
    assert first["requestParameters"]["sourceIPAddress"] == "127.0.0.1"
    assert first["s3"]["configurationId"] == "all"
    assert first["s3"]["bucket"]["name"] == "evs" and first["s3"]["bucket"]["arn"] == "arn:aws:s3:::evs"
    o = first["s3"]["object"]
    assert o["size"] == 5 and o["eTag"] == put["ETag"].strip('"') and "versionId" not in o
    assert first["lode"]["door"] == "s3"
    assert first["responseElements"]["x-amz-request-id"] == put["ResponseMetadata"]["RequestId"]
    assert recs[1]["s3"]["configurationId"] == "jpg" and recs[1]["s3"]["object"]["size"] == 70_000
    assert recs[3]["s3"]["object"]["eTag"] == mpu["ETag"].strip('"')
    assert recs[4]["eventVersion"] == "2.3"  # tagging and ACL events are AWS's version 2.3
    # The events of one key come in sequencer order.
    copy = [int(r["s3"]["object"]["sequencer"], 16) for r in recs if r["s3"]["object"]["key"] == "in%2Fcopy"]
    assert copy == sorted(copy) and len(set(copy)) == len(copy)
    # Removing the configuration stops the events.
    s3.put_bucket_notification_configuration(Bucket="evs", NotificationConfiguration={})
    s3.put_object(Bucket="evs", Key="in/after", Body=b"x")
    s3.put_bucket_notification_configuration(Bucket="evs", NotificationConfiguration={"QueueConfigurations": [
        {"Id": "all", "QueueArn": "arn:lode:sqs:::hook", "Events": ["s3:ObjectCreated:*"]}]})
    s3.put_object(Bucket="evs", Key="in/marker", Body=b"x")
    receiver.wait(lambda: any(r["s3"]["object"]["key"] == "in%2Fmarker" for r in receiver.records("evs")))
    assert not any(r["s3"]["object"]["key"] == "in%2Fafter" for r in receiver.records("evs"))


def test_versioned_deletes_name_their_versions(server, receiver):
    s3 = make_client(server.endpoint)
    s3.create_bucket(Bucket="ver")
    s3.put_bucket_versioning(Bucket="ver", VersioningConfiguration={"Status": "Enabled"})
    configure(s3, "ver")
    v1 = s3.put_object(Bucket="ver", Key="k", Body=b"one")["VersionId"]
    v2 = s3.put_object(Bucket="ver", Key="k", Body=b"two")["VersionId"]
    marker = s3.delete_object(Bucket="ver", Key="k")["VersionId"]
    s3.delete_object(Bucket="ver", Key="k", VersionId=v1)
    recs = receiver.wait(lambda: (r := receiver.records("ver")) and len(r) >= 4 and r)
    assert names(recs) == [("ObjectCreated:Put", "k"), ("ObjectCreated:Put", "k"),
                           ("ObjectRemoved:DeleteMarkerCreated", "k"), ("ObjectRemoved:Delete", "k")]
    assert [r["s3"]["object"].get("versionId") for r in recs] == [v1, v2, marker, v1]


def test_lifecycle_expiry_is_its_own_event(server, receiver):
    s3 = make_client(server.endpoint)
    s3.create_bucket(Bucket="life")
    configure(s3, "life", events=["s3:LifecycleExpiration:*", "s3:ObjectRemoved:*"])
    s3.put_object(Bucket="life", Key="old/a", Body=b"x")
    s3.put_bucket_lifecycle_configuration(Bucket="life", LifecycleConfiguration={"Rules": [
        {"ID": "x", "Status": "Enabled", "Filter": {"Prefix": "old/"}, "Expiration": {"Days": 1}}]})
    recs = receiver.wait(lambda: receiver.records("life"), timeout=60, what="the expiry")
    assert names(recs) == [("LifecycleExpiration:Delete", "old%2Fa")]
    assert recs[0]["lode"]["door"] == "lifecycle" and recs[0]["eventVersion"] == "2.3"


@needs_fuse
def test_mount_changes_make_the_same_events(tmp_path, receiver):
    mnt = str(tmp_path / "mnt")
    srv = start_server(tmp_path, notify_toml(receiver.port), ["--mount", mnt])
    try:
        s3 = make_client(srv.endpoint)
        s3.create_bucket(Bucket="fsev")
        configure(s3, "fsev")
        d = os.path.join(mnt, "fsev")
        with open(os.path.join(d, "a.txt"), "wb") as f:
            f.write(b"from the mount")
        os.rename(os.path.join(d, "a.txt"), os.path.join(d, "b.txt"))
        os.unlink(os.path.join(d, "b.txt"))
        recs = receiver.wait(lambda: (r := receiver.records("fsev")) and len(r) >= 4 and r)
        time.sleep(0.5)
        recs = receiver.records("fsev")
        assert names(recs) == [("ObjectCreated:Put", "a.txt"), ("ObjectRemoved:Delete", "a.txt"),
                               ("ObjectCreated:Put", "b.txt"), ("ObjectRemoved:Delete", "b.txt")]
        assert {r["lode"]["door"] for r in recs} == {"posix"}
        assert recs[0]["s3"]["object"]["size"] == len(b"from the mount")
        assert recs[1]["lode"].get("rename") and recs[2]["lode"].get("rename")
        assert recs[0]["userIdentity"]["principalId"] == "root"
    finally:
        srv.remove()
        subprocess.run(["umount", "-l", mnt], capture_output=True)


def writers(endpoint, bucket, prefix, n_threads, stop, acked):
    def run(t):
        c = make_client(endpoint)
        i = 0
        while not stop.is_set():
            k = f"{prefix}{t}-{i}"
            try:
                c.put_object(Bucket=bucket, Key=k, Body=b"x" * (i % 3000))
                acked.append(k)
            except Exception:  # the server was killed: this one was not acknowledged
                return
            i += 1
    ts = [threading.Thread(target=run, args=(t,)) for t in range(n_threads)]
    for t in ts:
        t.start()
    return ts


def test_kill_9_under_load_loses_no_acknowledged_event(server, receiver):
    s3 = make_client(server.endpoint)
    s3.create_bucket(Bucket="crash")
    configure(s3, "crash")
    for round_ in range(2):
        stop, acked = threading.Event(), []
        ts = writers(server.endpoint, "crash", f"r{round_}-", 4, stop, acked)
        # Kill once writes are being acknowledged (after the restart, a split that the killed
        # run left sealed holds part of the keys for up to its sealed lease, 5 s).
        deadline = time.time() + 60
        while len(acked) < 200 and time.time() < deadline and any(t.is_alive() for t in ts):
            time.sleep(0.05)
        server.proc.kill()  # kill -9 in the middle of the writes
        stop.set()
        for t in ts:
            t.join()
        assert len(acked) > 50
        server.start()
        want = {k.replace("/", "%2F") for k in acked}
        receiver.wait(lambda: want <= {r["s3"]["object"]["key"] for r in receiver.records("crash")},
                      timeout=60, what=f"the events of {len(want)} acknowledged PUTs")
    # Delivered at least once; every event is for a key that really was written.
    got = {r["s3"]["object"]["key"] for r in receiver.records("crash")}
    listed = set()
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket="crash"):
        listed |= {o["Key"] for o in page.get("Contents", [])}
    assert got <= listed


def acknowledged_while_down(gw, receiver, bucket, keys):
    """Through gateway `gw`: `bucket` made and configured (its test event delivered), then the
    receiver stopped and a PUT of each of `keys` acknowledged. Returns the S3 client."""
    s3 = make_client(gw.endpoint)
    s3.create_bucket(Bucket=bucket)
    configure(s3, bucket)
    receiver.wait(lambda: receiver.messages(), what="the test event")
    receiver.stop()
    for k in keys:
        s3.put_object(Bucket=bucket, Key=k, Body=b"x")
    return s3


@pytest.mark.skipif(not CLUSTER_MODE, reason="two gateways over one cluster")
def test_a_gateway_killed_after_acknowledging_has_its_events_delivered_by_another(tmp_path, receiver):
    """Gateway A acknowledges writes while the receiver is down (so it cannot have delivered
    them), then is killed -9. Gateway B adopts A's outbox once A's lease has run out and
    delivers every event, each key's in order."""
    a = start_server(tmp_path, notify_toml(receiver.port), gateways=2)
    b = a.peers[1]
    try:
        keys = [f"k{i:03d}" for i in range(40)]
        s3a = acknowledged_while_down(a, receiver, "adopt", keys)
        s3a.delete_object(Bucket="adopt", Key="k000")
        a.proc.kill()  # kill -9 right after the last acknowledgement
        a.proc.wait()
        receiver.start()
        recs = receiver.wait(lambda: (r := receiver.records("adopt")) and len(r) >= 41 and r, timeout=90,
                             what="the dead gateway's 41 events")
        want = [("ObjectCreated:Put", k) for k in keys] + [("ObjectRemoved:Delete", "k000")]
        assert sorted(set(names(recs))) == sorted(want)
        k0 = [r["eventName"] for r in recs if r["s3"]["object"]["key"] == "k000"]
        assert k0.index("ObjectRemoved:Delete") > k0.index("ObjectCreated:Put")
        assert metric(b, "lode_events_delivered_total") >= 41
    finally:
        for g in a.peers:
            g.remove()


@pytest.mark.skipif(not CLUSTER_MODE, reason="two gateways over one cluster")
def test_a_gateway_stopped_gracefully_hands_its_events_to_another_at_once(tmp_path, receiver):
    """Gateway A acknowledges writes while the receiver is down, then stops gracefully
    (SIGTERM, as in a rolling restart). It hands its outbox off as it stops, so gateway B
    adopts it at its next upkeep tick (every 5 s), not once A's 20 s lease has run out, and
    delivers every event. (Without the hand-off none could arrive before the lease: A renewed
    it until it stopped.)"""
    a = start_server(tmp_path, notify_toml(receiver.port), gateways=2)
    b = a.peers[1]
    try:
        keys = [f"k{i:03d}" for i in range(20)]
        acknowledged_while_down(a, receiver, "handoff", keys)
        a.stop()  # (the receiver is still down: A cannot deliver any of them itself)
        stopped = time.monotonic()
        receiver.start()
        recs = receiver.wait(lambda: (r := receiver.records("handoff")) and len(r) >= 20 and r, timeout=90,
                             what="the stopped gateway's 20 events")
        took = time.monotonic() - stopped
        print(f"the stopped gateway's events arrived {took:.1f} s after its stop")
        assert sorted({r["s3"]["object"]["key"] for r in recs}) == keys
        assert metric(b, "lode_events_delivered_total") >= 20
        # A tick (5 s) plus delivery, well inside the lease (20 s) the hand-off skips.
        assert took < 15, f"the events came {took:.1f} s after the stop: adopted only after the lease?"
    finally:
        for g in a.peers:
            g.remove()


def sns_client(endpoint):
    import boto3
    from botocore.config import Config
    return boto3.client("sns", endpoint_url=endpoint, aws_access_key_id=ACCESS_KEY,
                        aws_secret_access_key=SECRET_KEY, region_name="us-east-1",
                        config=Config(retries={"max_attempts": 1}))


def test_rgw_style_topics_through_boto3s_sns_client(tmp_path, receiver):
    """RGW's topic API: boto3's `sns` client makes a topic with a push-endpoint (no [notify] in
    the configuration), lists it, reads and changes its attributes (a password never shown),
    and a bucket's TopicConfiguration names it; its events arrive. In cluster mode the topic is
    made through one gateway and used through the other. Bad topics get SNS's errors."""
    srv = start_server(tmp_path, "", gateways=2)
    other = srv.peers[-1]
    try:
        sns = sns_client(srv.endpoint)
        url = f"http://127.0.0.1:{receiver.port}/events"
        arn = sns.create_topic(Name="jobs", Attributes={"push-endpoint": url, "OpaqueData": "od"})["TopicArn"]
        assert arn == "arn:aws:sns:us-east-1::jobs"
        assert [t["TopicArn"] for t in sns.list_topics()["Topics"]] == [arn]
        attrs = sns.get_topic_attributes(TopicArn=arn)["Attributes"]
        assert attrs["push-endpoint"] == url and attrs["OpaqueData"] == "od" and attrs["TopicArn"] == arn
        sns.set_topic_attributes(TopicArn=arn, AttributeName="OpaqueData", AttributeValue="od2")
        assert sns.get_topic_attributes(TopicArn=arn)["Attributes"]["OpaqueData"] == "od2"
        # A password in an endpoint is kept, never shown.
        amqp = sns.create_topic(Name="mq", Attributes={"push-endpoint": "amqp://lode:s3cr3t-pw@127.0.0.1:5672/",
                                                       "amqp-exchange": "ex"})["TopicArn"]
        shown = sns.get_topic_attributes(TopicArn=amqp)["Attributes"]["push-endpoint"]
        assert "s3cr3t-pw" not in shown and shown.startswith("amqp://lode:")
        sns.delete_topic(TopicArn=amqp)
        # A userinfo of one part (a NATS token) is a secret too.
        tok = sns.create_topic(Name="tok", Attributes={"push-endpoint": "nats://s3cr3t-token@127.0.0.1:4222"})["TopicArn"]
        shown = sns.get_topic_attributes(TopicArn=tok)["Attributes"]["push-endpoint"]
        assert "s3cr3t-token" not in shown and shown.startswith("nats://"), shown
        sns.delete_topic(TopicArn=tok)
        for bad, code_ in [({"Name": "bad.name"}, "InvalidParameter"),
                           ({"Name": "k", "Attributes": {"push-endpoint": "kafka://127.0.0.1:9092"}}, "InvalidParameter"),
                           ({"Name": "v", "Attributes": {"push-endpoint": url, "verify-ssl": "false"}}, "InvalidParameter")]:
            with pytest.raises(ClientError) as e:
                sns.create_topic(**bad)
            assert code(e) == code_ and e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400, bad
        with pytest.raises(ClientError) as e:
            sns.get_topic_attributes(TopicArn="arn:aws:sns:us-east-1::nope")
        assert code(e) == "NotFound"
        # A wrong signature, and a user who is not root, are refused.
        import boto3
        forged = boto3.client("sns", endpoint_url=srv.endpoint, aws_access_key_id=ACCESS_KEY,
                              aws_secret_access_key="not-the-secret", region_name="us-east-1")
        with pytest.raises(ClientError) as e:
            forged.list_topics()
        assert code(e) == "SignatureDoesNotMatch" and e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
        p = subprocess.run([lode_bin(), "admin", "--admin-url", srv.admin, "user", "add", "dana"], capture_output=True,
                           env=dict(os.environ, LODE_SECRET_KEY=SECRET_KEY), timeout=30, check=True)
        dana = json.loads(p.stdout)
        as_dana = boto3.client("sns", endpoint_url=srv.endpoint, aws_access_key_id=dana["access_key"],
                               aws_secret_access_key=dana["secret_key"], region_name="us-east-1")
        assert [t["TopicArn"] for t in as_dana.list_topics()["Topics"]] == [arn]
        with pytest.raises(ClientError) as e:
            as_dana.create_topic(Name="mine", Attributes={"push-endpoint": url})
        assert code(e) == "AuthorizationError" and e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 403
        with pytest.raises(ClientError) as e:
            as_dana.delete_topic(TopicArn=arn)
        assert code(e) == "AuthorizationError"
        # The bucket is configured through the other gateway, which learns the topic by itself.
        s3o = make_client(other.endpoint)
        s3o.create_bucket(Bucket="topics")
        deadline = time.time() + 15
        while True:
            try:
                s3o.put_bucket_notification_configuration(Bucket="topics", NotificationConfiguration={
                    "TopicConfigurations": [{"Id": "t", "TopicArn": arn, "Events": ["s3:ObjectCreated:*"]}]})
                break
            except ClientError as e:
                assert e.response["Error"]["Code"] == "InvalidArgument" and time.time() < deadline, e
                time.sleep(0.5)
        s3o.put_object(Bucket="topics", Key="a", Body=b"x")
        recs = receiver.wait(lambda: receiver.records("topics"), what="the topic's event")
        assert names(recs) == [("ObjectCreated:Put", "a")] and recs[0]["s3"]["configurationId"] == "t"
        # Gone: no more topic, and a configuration naming it is refused.
        sns.delete_topic(TopicArn=arn)
        assert sns.list_topics()["Topics"] == []
        with pytest.raises(ClientError) as e:
            make_client(srv.endpoint).put_bucket_notification_configuration(
                Bucket="topics", NotificationConfiguration={
                    "TopicConfigurations": [{"TopicArn": arn, "Events": ["s3:ObjectCreated:*"]}]})
        assert code(e) == "InvalidArgument"
    finally:
        for g in srv.peers:
            g.remove()


def admin_status(srv):
    r = requests.get(srv.admin + "/api/notify", headers={"Authorization": f"Bearer {SECRET_KEY}"}, timeout=10)
    r.raise_for_status()
    return {d["name"]: d for d in r.json()["destinations"]}


def metric(srv, name, dest="hook"):
    for line in requests.get(srv.admin + "/metrics", timeout=10).text.splitlines():
        if line.startswith(f'{name}{{destination="{dest}"}} '):
            return float(line.split()[-1])
    raise AssertionError(f"no {name} for {dest}")


def test_a_receiver_down_for_30_s_gets_the_backlog_in_order_after(server, receiver):
    s3 = make_client(server.endpoint)
    s3.create_bucket(Bucket="down")
    configure(s3, "down")
    receiver.wait(lambda: receiver.messages(), what="the test event")
    receiver.stop()
    t0 = time.time()
    keys = [f"k{i:03d}" for i in range(60)]
    for k in keys:
        s3.put_object(Bucket="down", Key=k, Body=b"x")
    # Writes go on while the receiver is down; the backlog says so.
    deadline = time.time() + 10
    while metric(server, "lode_events_failed_total") < 2 and time.time() < deadline:
        time.sleep(0.2)
    assert metric(server, "lode_events_backlog") >= 60
    st = admin_status(server)["hook"]
    assert st["failed"] >= 2 and st["last_error"] and st["queue_arn"] == "arn:lode:sqs:::hook"
    p = subprocess.run([lode_bin(), "admin", "--admin-url", server.admin, "notify", "status"], capture_output=True,
                       env=dict(os.environ, LODE_SECRET_KEY=SECRET_KEY), timeout=30)
    assert p.returncode == 0 and json.loads(p.stdout)["destinations"][0]["backlog"] >= 60
    time.sleep(max(0, 30 - (time.time() - t0)))
    receiver.start()
    recs = receiver.wait(lambda: (r := receiver.records("down")) and len(r) >= 60 and r, timeout=60)
    assert [r["s3"]["object"]["key"] for r in recs] == keys  # in order, none lost
    deadline = time.time() + 10
    while metric(server, "lode_events_backlog") != 0 and time.time() < deadline:
        time.sleep(0.2)
    assert metric(server, "lode_events_backlog") == 0
    assert metric(server, "lode_events_delivered_total") >= 61
    assert metric(server, "lode_events_dropped_total") == 0


def test_a_full_backlog_drops_the_oldest_or_refuses_writes(tmp_path, receiver):
    toml = notify_toml(receiver.port, "drop", max_backlog=5) + notify_toml(receiver.port, "refuse", max_backlog=5, when_full="refuse")
    srv = start_server(tmp_path, toml)
    try:
        s3 = make_client(srv.endpoint)
        receiver.stop()
        s3.create_bucket(Bucket="drop")
        configure(s3, "drop", arn="arn:lode:sqs:::drop")
        for i in range(12):
            s3.put_object(Bucket="drop", Key=f"d{i:02d}", Body=b"x")
        deadline = time.time() + 20
        while metric(srv, "lode_events_dropped_total", "drop") < 8 and time.time() < deadline:
            time.sleep(0.2)
        # 13 entries (the test event and 12 PUTs) for a backlog of 5: the 8 oldest went.
        assert metric(srv, "lode_events_dropped_total", "drop") == 8

        s3.create_bucket(Bucket="refuse")
        configure(s3, "refuse", arn="arn:lode:sqs:::refuse")
        refused = 0
        for i in range(8):
            try:
                s3.put_object(Bucket="refuse", Key=f"r{i}", Body=b"x")
            except ClientError as e:
                assert e.response["Error"]["Code"] == "SlowDown"
                assert e.response["ResponseMetadata"]["HTTPStatusCode"] == 503
                refused += 1
        assert refused == 4  # the test event and 4 PUTs fill it
        with pytest.raises(ClientError):
            s3.head_object(Bucket="refuse", Key="r7")  # a refused write left nothing
        receiver.start()
        recs = receiver.wait(lambda: (r := receiver.records()) and len(r) >= 9 and r, timeout=60)
        assert [r["s3"]["object"]["key"] for r in recs if r["s3"]["bucket"]["name"] == "drop"] == [f"d{i:02d}" for i in range(7, 12)]
        assert [r["s3"]["object"]["key"] for r in recs if r["s3"]["bucket"]["name"] == "refuse"] == [f"r{i}" for i in range(4)]
    finally:
        srv.remove()


def test_signed_deliveries_and_the_secret_stays_secret(tmp_path):
    secret = "evt-hmac-" + os.urandom(8).hex()
    sf = tmp_path / "hook.secret"
    sf.write_text(secret + "\n")
    rec = Receiver(str(tmp_path), secret_file=str(sf)).start()
    srv = start_server(tmp_path, notify_toml(rec.port, hmac_secret_file=str(sf)))
    try:
        s3 = make_client(srv.endpoint)
        s3.create_bucket(Bucket="sig")
        configure(s3, "sig")
        s3.put_object(Bucket="sig", Key="a", Body=b"x")
        rec.wait(lambda: rec.records("sig"))
        msgs = rec.messages()
        assert msgs and all(m["verified"] is True for m in msgs)
        shown = json.dumps(admin_status(srv)) + requests.get(srv.admin + "/metrics", timeout=10).text
        srv.stop()
        assert secret not in shown
        assert secret not in open(srv.log_path, errors="replace").read()
        srv.start()
    finally:
        srv.remove()
        rec.stop()


def test_a_slow_receiver_does_not_hold_writes(tmp_path, receiver):
    """Delivery is apart from the write path: with the receiver stopped (every send fails after
    its timeout) a burst of PUTs is acknowledged as fast as without events; bound: the 40 PUTs
    finish within one delivery timeout (3 s)."""
    srv = start_server(tmp_path, notify_toml(receiver.port, timeout_secs=3))
    try:
        s3 = make_client(srv.endpoint)
        s3.create_bucket(Bucket="slow")
        configure(s3, "slow")
        receiver.stop()
        # A receiver that accepts connections and never answers.
        import socket
        hang = socket.socket()
        hang.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        hang.bind(("127.0.0.1", receiver.port))
        hang.listen(100)
        t0 = time.time()
        for i in range(40):
            s3.put_object(Bucket="slow", Key=f"s{i}", Body=b"x")
        took = time.time() - t0
        assert took < 3, f"40 PUTs took {took:.1f} s behind a hanging receiver"
        hang.close()
        receiver.start()
        receiver.wait(lambda: len(receiver.records("slow")) >= 40, timeout=60)
    finally:
        srv.remove()


def test_the_readme_pipeline_sync_then_a_job_per_new_object(tmp_path):
    """README "Pipelines and events", as written: examples/on_new_object.py runs a job per new
    object; `aws s3 sync` ingests a directory; every file's job runs once, with its key."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    done = tmp_path / "jobs.txt"
    consumer = subprocess.Popen([sys.executable, os.path.join(HERE, "..", "examples", "on_new_object.py"),
                                 "--port", str(port), "--", "sh", "-c", f'echo "{{bucket}} {{key}}" >> {done}'],
                                stdout=subprocess.PIPE)
    assert b"listening" in consumer.stdout.readline()
    srv = start_server(tmp_path, notify_toml(port, name="jobs"))
    try:
        s3 = make_client(srv.endpoint)
        s3.create_bucket(Bucket="ingest")
        configure(s3, "ingest", events=["s3:ObjectCreated:*"], arn="arn:lode:sqs:::jobs", prefix="raw/")
        src = tmp_path / "dataset"
        names_ = [f"shard {i:02d}.bin" for i in range(20)] + ["sub/dir/x+y.txt"]
        for n in names_:
            p = src / n
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(os.urandom(100 + len(n)))
        env = dict(os.environ, AWS_ACCESS_KEY_ID=ACCESS_KEY, AWS_SECRET_ACCESS_KEY=SECRET_KEY,
                   AWS_DEFAULT_REGION="us-east-1", AWS_ENDPOINT_URL=srv.endpoint,
                   AWS_CONFIG_FILE=str(tmp_path / "none"), AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"))
        aws = os.path.join(os.path.dirname(sys.executable), "aws")
        subprocess.run([aws, "s3", "sync", str(src), "s3://ingest/raw/"], env=env, check=True, capture_output=True)
        want = sorted(f"ingest raw/{n}" for n in names_)
        deadline = time.time() + 30
        while time.time() < deadline and (not done.exists() or len(done.read_text().splitlines()) < len(want)):
            time.sleep(0.1)
        time.sleep(0.5)
        assert sorted(done.read_text().splitlines()) == want
    finally:
        srv.remove()
        consumer.kill()


class NatsServer:
    """Debian's nats-server, with JetStream, as its own process; `stop()`/`start()` keep its
    port and its store."""

    def __init__(self, directory, tls=None):
        import socket
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.store = os.path.join(directory, "nats-store")
        self.tls = tls  # (cert, key) PEM files: TLS only
        self.proc = None

    def start(self):
        import socket
        exe = "/usr/sbin/nats-server" if os.path.exists("/usr/sbin/nats-server") else "nats-server"
        args = [exe, "-a", "127.0.0.1", "-p", str(self.port), "-js", "-sd", self.store]
        if self.tls:
            args += ["--tls", "--tlscert", self.tls[0], "--tlskey", self.tls[1]]
        self.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                return self
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("nats-server did not start")

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    @property
    def url(self):
        return f"{'tls' if self.tls else 'nats'}://127.0.0.1:{self.port}"


def nats_run(coro):
    import asyncio
    return asyncio.run(coro)


async def nats_stream(url, name, subject, tls=None):
    import nats
    nc = await nats.connect(url, tls=tls)
    js = nc.jetstream()
    await js.add_stream(name=name, subjects=[subject])
    await nc.close()


async def nats_stored(url, name, tls=None):
    """Every message of stream `name`, in order, as parsed JSON."""
    import nats
    nc = await nats.connect(url, tls=tls)
    js = nc.jetstream()
    info = await js.stream_info(name)
    out = []
    # An empty stream reports first_seq 0, which get_msg refuses (400): nothing to read yet.
    for seq in range(max(info.state.first_seq, 1), info.state.last_seq + 1):
        m = await js.get_msg(name, seq)
        out.append(json.loads(m.data))
    await nc.close()
    return out


def survives_an_outage(srv, s3, bucket, dest, broker, n, seen_keys):
    """The broker goes away (kill -9); `n` PUTs go on meanwhile, and their events wait (the
    backlog says so once a delivery failed); it comes back: every event arrives, at least once
    (a publish whose ack or confirm was lost at the cut may arrive twice), the first arrivals
    in commit order after the key `a` the test wrote before. The broker stays away 30 s."""
    broker.stop()
    down_at = time.time()
    keys = [f"k{i:02d}" for i in range(n)]
    for k in keys:
        s3.put_object(Bucket=bucket, Key=k, Body=b"x")
    deadline = time.time() + 30
    while metric(srv, "lode_events_failed_total", dest) < 1 and time.time() < deadline:
        time.sleep(0.2)
    assert metric(srv, "lode_events_failed_total", dest) >= 1
    assert metric(srv, "lode_events_backlog", dest) >= n
    time.sleep(max(0.0, 30 - (time.time() - down_at)))
    broker.start()
    deadline = time.time() + 90
    while time.time() < deadline and len(set(seen_keys())) < n + 1:
        time.sleep(0.5)
    seen = seen_keys()
    assert [k for i, k in enumerate(seen) if k not in seen[:i]] == ["a"] + keys


needs_nats = pytest.mark.skipif(
    not (os.path.exists("/usr/sbin/nats-server") or subprocess.run(["which", "nats-server"], capture_output=True).returncode == 0),
    reason="nats-server is not installed (./test.sh installs it)")


@needs_nats
def test_nats_jetstream_gets_every_event_across_a_broker_outage(tmp_path):
    ns = NatsServer(str(tmp_path)).start()
    toml = ('[notify.stream]\ntype = "nats"\nurl = "%s"\nsubject = "lode.events"\njetstream = true\n'
            'timeout_secs = 2\n' % ns.url)
    srv = start_server(tmp_path, toml)
    try:
        nats_run(nats_stream(ns.url, "LODE", "lode.events"))
        s3 = make_client(srv.endpoint)
        s3.create_bucket(Bucket="natsb")
        s3.put_bucket_notification_configuration(Bucket="natsb", NotificationConfiguration={"TopicConfigurations": [
                {"Id": "n1", "TopicArn": "arn:lode:sns:::stream", "Events": ["s3:ObjectCreated:*", "s3:ObjectRemoved:*"]}]})
        s3.put_object(Bucket="natsb", Key="a", Body=b"x")
        s3.delete_object(Bucket="natsb", Key="a")

        def records():
            return [r for m in nats_run(nats_stored(ns.url, "LODE")) for r in m.get("Records", [])]

        deadline = time.time() + 30
        while time.time() < deadline and len(records()) < 2:
            time.sleep(0.2)
        assert names(records()) == [("ObjectCreated:Put", "a"), ("ObjectRemoved:Delete", "a")]
        # The broker goes away with its store and comes back: nothing lost.
        survives_an_outage(srv, s3, "natsb", "stream", ns, 20,
                           lambda: [r["s3"]["object"]["key"] for r in records()])
        assert records()[0]["s3"]["configurationId"] == "n1"
    finally:
        srv.remove()
        ns.stop()


@needs_nats
def test_core_nats_subscribers_get_events(tmp_path):
    import asyncio
    ns = NatsServer(str(tmp_path)).start()
    toml = '[notify.core]\ntype = "nats"\nurl = "%s"\nsubject = "lode.core"\n' % ns.url
    srv = start_server(tmp_path, toml)
    try:
        async def run():
            import nats
            nc = await nats.connect(ns.url)
            sub = await nc.subscribe("lode.core")
            await nc.flush()
            s3 = make_client(srv.endpoint)
            s3.create_bucket(Bucket="coreb")
            configure(s3, "coreb", arn="arn:lode:sqs:::core")
            await asyncio.get_running_loop().run_in_executor(None, lambda: s3.put_object(Bucket="coreb", Key="x y", Body=b"1"))
            got = []
            while len(got) < 2:  # the test event, then the PUT's
                m = await sub.next_msg(timeout=20)
                got.append(json.loads(m.data))
            await nc.close()
            return got
        got = nats_run(run())
        assert got[0]["Event"] == "s3:TestEvent"
        assert names(got[1]["Records"]) == [("ObjectCreated:Put", "x+y")]
    finally:
        srv.remove()
        ns.stop()


def rabbit_definitions(queues):
    """Definitions with the default vhost and guest user (an import at boot replaces their
    creation) and the durable `queues`."""
    import base64
    import hashlib
    salt = os.urandom(4)
    pw = base64.b64encode(salt + hashlib.sha256(salt + b"guest").digest()).decode()
    return {
        "vhosts": [{"name": "/"}],
        "users": [{"name": "guest", "password_hash": pw, "hashing_algorithm": "rabbit_password_hashing_sha256",
                   "tags": ["administrator"]}],
        "permissions": [{"user": "guest", "vhost": "/", "configure": ".*", "write": ".*", "read": ".*"}],
        "queues": [{"name": q, "vhost": "/", "durable": True, "auto_delete": False, "arguments": {}}
                   for q in queues],
    }


class RabbitServer:
    """Debian's rabbitmq-server as its own node (own port, data and logs under `directory`);
    `stop()`/`start()` keep its data, so durable queues and persistent messages stay."""

    def __init__(self, directory, tls=None, queues=()):
        import socket
        with socket.socket() as s, socket.socket() as d, socket.socket() as t:
            s.bind(("127.0.0.1", 0))
            d.bind(("127.0.0.1", 0))
            t.bind(("127.0.0.1", 0))
            self.port, self.dist_port = s.getsockname()[1], d.getsockname()[1]
            self.tls_port = t.getsockname()[1]
        self.dir = os.path.join(directory, "rabbit")
        os.makedirs(self.dir, exist_ok=True)
        with open(os.path.join(self.dir, "enabled_plugins"), "w") as f:
            f.write("[].\n")
        # tls: (ca, cert, key) PEM files; the broker then also listens for amqps on tls_port.
        self.config = os.path.join(self.dir, "rabbitmq.conf")
        # Durable queues the test needs are broker definitions, imported at every boot (as a
        # deployment declares them): a node killed with SIGKILL a moment after a client declared
        # a queue has come back without it (Mnesia had not written it yet; seen once in CI).
        defs = os.path.join(self.dir, "definitions.json")
        with open(defs, "w") as f:
            json.dump(rabbit_definitions(queues), f)
        with open(self.config, "w") as f:
            f.write(f"load_definitions = {defs}\n")
            if tls:
                f.write(f"listeners.ssl.default = 127.0.0.1:{self.tls_port}\n"
                        f"ssl_options.cacertfile = {tls[0]}\nssl_options.certfile = {tls[1]}\n"
                        f"ssl_options.keyfile = {tls[2]}\nssl_options.verify = verify_none\n"
                        "ssl_options.fail_if_no_peer_cert = false\n")
        self.proc = None

    def start(self):
        import socket
        env = dict(os.environ, HOME=self.dir, RABBITMQ_NODENAME=f"lodetest{self.port}@localhost",
                   RABBITMQ_NODE_PORT=str(self.port), RABBITMQ_DIST_PORT=str(self.dist_port),
                   RABBITMQ_MNESIA_BASE=os.path.join(self.dir, "mnesia"), RABBITMQ_LOG_BASE=os.path.join(self.dir, "log"),
                   RABBITMQ_ENABLED_PLUGINS_FILE=os.path.join(self.dir, "enabled_plugins"),
                   RABBITMQ_CONFIG_FILE=self.config)
        self.proc = subprocess.Popen(["/usr/lib/rabbitmq/bin/rabbitmq-server"], env=env, start_new_session=True,
                                     stdout=open(os.path.join(self.dir, "out.log"), "ab"), stderr=subprocess.STDOUT)
        import pika
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                # The listener opens before the broker takes connections: ready once one opens.
                conn, _ = self.channel()
                conn.close()
                return self
            except (OSError, pika.exceptions.AMQPError):
                time.sleep(0.3)
        raise RuntimeError("rabbitmq-server did not start: " + open(os.path.join(self.dir, "out.log")).read()[-2000:])

    def stop(self):
        import signal as sig
        import socket
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, sig.SIGKILL)  # the node and its helpers (not the shared epmd)
            self.proc.wait()
        # Its Erlang VM (started with `-home <our dir>`) may outlive the script: kill it too,
        # and wait until its port is free.
        subprocess.run(["pkill", "-9", "-f", f"-home {self.dir}"], capture_output=True)
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                time.sleep(0.1)
            except OSError:
                break

    @property
    def url(self):
        return f"amqp://guest:guest@127.0.0.1:{self.port}/"

    def channel(self):
        import pika
        conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", self.port))
        return conn, conn.channel()


needs_rabbit = pytest.mark.skipif(not os.path.exists("/usr/lib/rabbitmq/bin/rabbitmq-server"),
                                  reason="rabbitmq-server is not installed (./test.sh installs it)")


@needs_rabbit
def test_amqp_queue_gets_every_event_across_a_broker_outage(tmp_path):
    mq = RabbitServer(str(tmp_path), queues=["lode-events"]).start()
    toml = ('[notify.mq]\ntype = "amqp"\nurl = "%s"\nrouting_key = "lode-events"\ntimeout_secs = 3\n' % mq.url)
    srv = start_server(tmp_path, toml)
    try:
        conn, ch = mq.channel()
        ch.queue_declare("lode-events", durable=True)
        conn.close()
        s3 = make_client(srv.endpoint)
        s3.create_bucket(Bucket="amqpb")
        configure(s3, "amqpb", arn="arn:lode:sqs:::mq")
        s3.put_object(Bucket="amqpb", Key="a", Body=b"x")

        got = []

        def drain():
            conn, ch = mq.channel()
            while True:
                method, props, body = ch.basic_get("lode-events", auto_ack=True)
                if method is None:
                    break
                assert props.delivery_mode == 2 and props.content_type == "application/json"
                got.append(json.loads(body))
            conn.close()
            return [r for m in got for r in m.get("Records", [])]

        deadline = time.time() + 30
        while time.time() < deadline and len(drain()) < 1:
            time.sleep(0.2)
        assert got[0]["Event"] == "s3:TestEvent"
        assert names(drain()) == [("ObjectCreated:Put", "a")]
        # The broker goes away and comes back with its durable queue: nothing lost. (A broker
        # killed with SIGKILL also forgets recent consumer acks and hands those back.)
        survives_an_outage(srv, s3, "amqpb", "mq", mq, 15,
                           lambda: [r["s3"]["object"]["key"] for r in drain()])
    finally:
        srv.remove()
        mq.stop()
        # The Erlang port mapper the node started (it outlives its nodes).
        subprocess.run(["epmd", "-kill"], capture_output=True)


from test_dashboard import CHROMIUM, chromium  # noqa: E402,F401 (the fixture)


def make_certs(d):
    """A CA, a server certificate it signed for 127.0.0.1 and localhost, and a second CA that
    signed nothing here: PEM files under `d`, made with openssl."""
    def run(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True)
    for ca in ("ca", "other-ca"):
        run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN=lode test {ca}",
            "-keyout", str(d / f"{ca}.key"), "-out", str(d / f"{ca}.pem"))
    run("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost",
        "-keyout", str(d / "server.key"), "-out", str(d / "server.csr"))
    (d / "san.ext").write_text("subjectAltName = IP:127.0.0.1, DNS:localhost\n")
    run("x509", "-req", "-in", str(d / "server.csr"), "-CA", str(d / "ca.pem"), "-CAkey", str(d / "ca.key"),
        "-CAcreateserial", "-days", "2", "-extfile", str(d / "san.ext"), "-out", str(d / "server.pem"))
    return str(d / "ca.pem"), str(d / "other-ca.pem"), str(d / "server.pem"), str(d / "server.key")


@needs_rabbit
def test_tls_destinations_deliver_and_check_the_certificate(tmp_path):
    """An https webhook, NATS over TLS and amqps, each trusting the CA of its `ca_file`, get
    their events; an https webhook whose ca_file is another CA gets none (the certificate is
    refused, and the error says so)."""
    import ssl
    ca, other_ca, cert, key = make_certs(tmp_path)
    hook = Receiver(str(tmp_path), tls=(cert, key), name="https").start()
    nats_srv = NatsServer(str(tmp_path), tls=(cert, key)).start()
    rabbit = RabbitServer(str(tmp_path), tls=(ca, cert, key)).start()
    ctx = ssl.create_default_context(cafile=ca)
    srv = None
    try:
        nats_run(nats_stream(nats_srv.url, "TLSEV", "tlsev", tls=ctx))
        conn, ch = rabbit.channel()
        ch.queue_declare(queue="tls-events", durable=True)
        conn.close()
        toml = (notify_toml(hook.port, "hook", ca_file=ca).replace("http://", "https://")
                + notify_toml(hook.port, "wrong", ca_file=other_ca).replace("http://", "https://")
                + f'[notify.nq]\ntype = "nats"\nurl = "{nats_srv.url}"\nsubject = "tlsev"\njetstream = true\n'
                + f'ca_file = "{ca}"\n'
                + f'[notify.rq]\ntype = "amqp"\nurl = "amqps://guest:guest@127.0.0.1:{rabbit.tls_port}/"\n'
                + f'routing_key = "tls-events"\nca_file = "{ca}"\n')
        srv = start_server(tmp_path, toml)
        s3 = make_client(srv.endpoint)
        s3.create_bucket(Bucket="tls")
        s3.put_bucket_notification_configuration(Bucket="tls", NotificationConfiguration={"QueueConfigurations": [
            {"Id": dest, "QueueArn": f"arn:lode:sqs:::{dest}", "Events": ["s3:ObjectCreated:*"],
             "Filter": {"Key": {"FilterRules": [{"Name": "prefix", "Value": f"{dest}/"}]}}}
            for dest in ("hook", "wrong", "nq", "rq")]})
        for dest in ("hook", "wrong", "nq", "rq"):
            s3.put_object(Bucket="tls", Key=f"{dest}/obj", Body=b"x")
        hook.wait(lambda: [r for r in hook.records("tls") if r["s3"]["object"]["key"] == "hook%2Fobj"],
                  what="the https event")
        deadline = time.time() + 30
        got = []
        while time.time() < deadline and not any(r["s3"]["object"]["key"] == "nq%2Fobj" for r in got):
            got = [r for m in nats_run(nats_stored(nats_srv.url, "TLSEV", tls=ctx)) for r in m.get("Records", [])]
            time.sleep(0.2)
        assert [r["s3"]["object"]["key"] for r in got] == ["nq%2Fobj"]
        conn, ch = rabbit.channel()
        amqp_keys = []
        deadline = time.time() + 30
        while not amqp_keys and time.time() < deadline:
            _, _, body = ch.basic_get("tls-events", auto_ack=True)
            if body is None:
                time.sleep(0.2)
                continue
            amqp_keys += [r["s3"]["object"]["key"] for r in json.loads(body).get("Records", [])]
        conn.close()
        assert amqp_keys == ["rq%2Fobj"]
        # The wrong CA: never delivered, and the error names the certificate.
        deadline = time.time() + 20
        while metric(srv, "lode_events_failed_total", "wrong") < 1 and time.time() < deadline:
            time.sleep(0.2)
        st = admin_status(srv)["wrong"]
        assert st["failed"] >= 1 and "certificate" in st["last_error"].lower(), st
        assert not [r for r in hook.records("tls") if r["s3"]["object"]["key"] == "wrong%2Fobj"]
        assert metric(srv, "lode_events_delivered_total", "wrong") == 0
    finally:
        if srv:
            srv.remove()
        hook.stop()
        nats_srv.stop()
        rabbit.stop()
        subprocess.run(["epmd", "-kill"], capture_output=True)


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (setup.sh installs it)")
def test_the_dashboard_shows_the_destinations(tmp_path, receiver, chromium):  # noqa: F811
    srv = start_server(tmp_path, notify_toml(receiver.port))
    try:
        s3 = make_client(srv.endpoint)
        s3.create_bucket(Bucket="dash")
        configure(s3, "dash")
        receiver.wait(lambda: receiver.messages(), what="the test event")
        # The receiver writes the event down before it answers: stopped in between, Lode sees
        # the send fail and keeps the test event (CI met that once). Stop it once Lode counted
        # the delivery.
        receiver.wait(lambda: metric(srv, "lode_events_delivered_total") >= 1, timeout=10,
                      what="Lode to count the test event delivered")
        receiver.stop()
        for i in range(7):
            s3.put_object(Bucket="dash", Key=f"k{i}", Body=b"x")
        receiver.wait(lambda: metric(srv, "lode_events_failed_total") >= 1, timeout=10,
                      what="a failed delivery counted with the receiver stopped")
        dt = chromium
        for domain in ("Runtime", "Log", "Network", "Page"):
            dt.call(domain + ".enable")
        dt.call("Page.navigate", url=srv.admin + "/dashboard")
        deadline = time.time() + 30
        while (dt.evaluate("Number(document.body && document.body.dataset.rendered || 0)") or 0) < 1:
            assert time.time() < deadline, dt.problems() or dt.evaluate("document.body.innerText")
            time.sleep(0.2)
        row = dt.evaluate("""(() => {
          const r = document.querySelector('#events tr[data-destination=hook]');
          return r && !document.getElementById('events-table').hidden ? [...r.cells].map(c => c.textContent) : null;
        })()""")
        assert row is not None, dt.evaluate("document.body.innerText")
        assert row[0] == "hook" and row[1] == "webhook"
        assert int(row[2]) >= 7 and int(row[3]) == 1 and int(row[5]) >= 1 and row[7]
        assert dt.problems() == []
    finally:
        srv.remove()
