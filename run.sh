#!/usr/bin/env bash
# Builds Lode and runs `lode serve` on the embedded defaults: S3 on 127.0.0.1:9000, data in
# ./lode-data, credentials generated on first start (printed with ready-to-paste exports).
# Extra arguments go to `lode serve`, e.g. ./run.sh --listen 127.0.0.1:9100 --data-dir /srv/lode
source "$(dirname "$0")/scripts/setup.sh"
build_lode
exec "$LODE_BIN" serve "$@"
