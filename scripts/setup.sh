# Sourced by run.sh and test.sh: installs what a fresh Debian machine lacks, and sets the
# build's target dir outside the clone (so CI and later runs on one machine reuse the build).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/lode-target}"
LODE_BIN="$CARGO_TARGET_DIR/release/lode"
export LODE_BIN

need_apt=()
# fuse3: fusermount3 and the FUSE tools (the POSIX door mounts directly as root, through
# fusermount3 otherwise). librados-dev: the lode binary links librados (cluster mode).
# LODE_EXTRA_APT: what only the test command needs (chromium for the dashboard test).
for pkg in libclang-dev build-essential pkg-config fuse3 librados-dev ${LODE_EXTRA_APT:-}; do
    dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
# A Python with venv support (Debian's python3 lacks it without python3-venv).
python3 -m venv --help >/dev/null 2>&1 || need_apt+=(python3-venv)
if ((${#need_apt[@]})); then
    echo "==> installing Debian packages: ${need_apt[*]}"
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
if ! command -v cargo >/dev/null; then
    echo "cargo not found: install the Rust toolchain (rustup) first" >&2
    exit 1
fi

build_lode() {
    echo "==> cargo build --release (target dir: $CARGO_TARGET_DIR)"
    (cd "$ROOT" && cargo build --release --locked)
}
