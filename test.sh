#!/usr/bin/env bash
# Runs every test: the Rust workspace (unit, conformance and integration tests; real RocksDB,
# the real io_uring datapath, and a real single-host Ceph cluster for the cluster-mode crates)
# and the compat suite (real aws-cli and boto3 from PyPI against a real `lode serve` process).
# Installs what it needs first.
LODE_EXTRA_APT="chromium nats-server rabbitmq-server fio"
source "$(dirname "$0")/scripts/setup.sh"
build_lode

echo "==> layers (scripts/check-layers.py: no boundary or service crate reaches an engine or a backend)"
(cd "$ROOT" && python3 scripts/check-layers.py --self-test) || { echo "layering check failed" >&2; exit 1; }

# One Ceph cluster for the whole run (1 mon + 3 BlueStore OSDs on loopback), stopped and
# removed at exit. LODE_CEPH_DIR names its directory (default: a fresh one under /tmp).
echo "==> Ceph test cluster (scripts/ceph-dev.sh)"
CEPH_DIR="${LODE_CEPH_DIR:-$(mktemp -d /tmp/lode-ceph.XXXXXX)}"
stop_ceph() { "$ROOT/scripts/ceph-dev.sh" stop "$CEPH_DIR" --purge >/dev/null 2>&1 || true; }
trap stop_ceph EXIT
# 8 GiB per OSD (sparse; the block files grow with what is written): the cluster-mode suite
# writes a few GiB under 3 replicas, and a nearly full OSD pauses writes.
CEPH_DEV_BLOCK_SIZE="${CEPH_DEV_BLOCK_SIZE:-8G}" "$ROOT/scripts/ceph-dev.sh" start "$CEPH_DIR"
export LODE_CEPH_CONF="$CEPH_DIR/ceph.conf"

echo "==> Rust tests"
rust_rc=0
(cd "$ROOT" && cargo test --release --locked --workspace) >"$CARGO_TARGET_DIR/rust-tests.log" 2>&1 || rust_rc=$?
grep -E "^(test result|running|error|failures:|---- )|panicked|FAILED" "$CARGO_TARGET_DIR/rust-tests.log" || true
if [ "$rust_rc" != 0 ]; then
    echo "Rust tests failed (full log: $CARGO_TARGET_DIR/rust-tests.log)" >&2
    tail -60 "$CARGO_TARGET_DIR/rust-tests.log" >&2
    exit "$rust_rc"
fi
passed=$(grep -Eo "test result: ok. [0-9]+ passed" "$CARGO_TARGET_DIR/rust-tests.log" | awk '{s+=$4} END {print s+0}')
echo "Rust: $passed passed, 0 failed"

echo "==> compat tests (aws-cli, boto3, s3torchconnector + torch, chromium)"
VENV="${LODE_VENV:-$HOME/.cache/lode-venv}"
if [ ! -x "$VENV/bin/pytest" ]; then
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q --upgrade pip
fi
"$VENV/bin/pip" install -q --upgrade -r "$ROOT/compat-tests/requirements.txt"
"$VENV/bin/python" -c "import boto3, botocore, awscli; print('boto3', boto3.__version__, 'botocore', botocore.__version__, 'awscli', awscli.__version__)"
cd "$ROOT/compat-tests"
compat_rc=0
"$VENV/bin/pytest" -q -p no:cacheprovider "$@" || compat_rc=$?
if [ $# -eq 0 ]; then
    # The S3 modules, the POSIX door, the training loaders and the bench again, against
    # cluster-mode gateways over the same Ceph cluster (two for the S3 modules, each request to
    # the next in turn; the training set goes in through one and out through the other and its
    # mount), partitions splitting at 64 keys (conftest.py).
    echo "==> compat tests in cluster mode (two gateways, requests spread over both)"
    LODE_COMPAT_MODE=cluster "$VENV/bin/pytest" -q -p no:cacheprovider \
        test_objects.py test_tagging.py test_lifecycle.py test_versioning.py test_list.py test_multipart.py test_buckets.py test_aws_parity.py \
        test_semantics.py test_bad_input.py test_auth.py test_cli.py test_users.py test_policy.py test_acl.py test_cors.py test_connections.py test_sse.py \
        test_posix.py test_training.py test_bench.py test_soak.py test_events.py \
        || compat_rc=$?
fi
exit "$compat_rc"
