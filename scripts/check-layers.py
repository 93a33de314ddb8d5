#!/usr/bin/env python3
"""Fails if a crate depends (at build time, directly or through others) on a crate its layer may
not see (README "Crates": boundaries name no engine, the object service sees the boundaries
only, one backend never borrows another's types).

Usage: scripts/check-layers.py [--self-test]
Exit 0 and one line per crate checked; exit 1 with each forbidden path otherwise. --self-test
also checks that the check fails when a forbidden edge (objects -> datapath, through a crate in
between) is added to the real graph."""
import json
import subprocess
import sys

# Storage engines and backends, by crate name.
ENGINES = {"rocksdb", "librocksdb-sys", "io-uring", "lode-rados"}
BACKENDS = {"lode-metadata-rocks", "lode-datapath", "lode-blob-rados", "lode-catalog-rados"}
DOORS = {"s3s", "hyper", "fuser", "lode-gateway"}

# crate -> what it must never reach (normal dependencies, transitively).
RULES = {
    # Boundaries: a trait, its model and its memory backend; no engine, no backend, no door.
    "lode-metadata": ENGINES | BACKENDS | DOORS,
    "lode-catalog": ENGINES | BACKENDS | DOORS,
    "lode-blob": ENGINES | BACKENDS | DOORS,
    # The object service sees the boundaries only.
    "lode-objects": ENGINES | BACKENDS | DOORS,
    # Backends implement a boundary and borrow nothing from another backend or a door.
    "lode-metadata-rocks": (BACKENDS - {"lode-metadata-rocks"}) | {"io-uring", "lode-rados"} | DOORS,
    "lode-datapath": (BACKENDS - {"lode-datapath"}) | {"rocksdb", "librocksdb-sys", "lode-rados"} | DOORS,
    "lode-blob-rados": (BACKENDS - {"lode-blob-rados"}) | {"rocksdb", "librocksdb-sys", "io-uring"} | DOORS,
    "lode-catalog-rados": (BACKENDS - {"lode-catalog-rados"}) | {"rocksdb", "librocksdb-sys", "io-uring"} | DOORS,
    "lode-rados": BACKENDS | {"rocksdb", "librocksdb-sys", "io-uring"} | DOORS,
    # The load generator drives servers over HTTP only.
    # (It carries a bare FUSE passthrough for `lode bench-ceiling`, so fuser is allowed.)
    "lode-bench": BACKENDS | ENGINES | {"lode-objects", "lode-catalog", "lode-metadata", "lode-blob", "s3s", "lode-gateway"},
}


def load():
    out = subprocess.run(
        ["cargo", "metadata", "--format-version", "1", "--offline",
         "--filter-platform", "x86_64-unknown-linux-gnu"],
        check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def check(meta, quiet=False):
    name = {p["id"]: p["name"] for p in meta["packages"]}
    # Build-time (normal) edges only: dev-dependencies are the tests' business.
    edges = {}
    for node in meta["resolve"]["nodes"]:
        edges[node["id"]] = [d["pkg"] for d in node["deps"]
                             if any(k["kind"] is None for k in d["dep_kinds"])]
    by_name = {}
    for pid in edges:
        by_name.setdefault(name[pid], pid)
    bad = []
    for crate, forbidden in sorted(RULES.items()):
        root = by_name.get(crate)
        if root is None:
            bad.append(f"{crate}: not in the workspace (update scripts/check-layers.py)")
            continue
        # Breadth-first, remembering how each crate was reached.
        via = {root: None}
        queue = [root]
        while queue:
            cur = queue.pop(0)
            for nxt in edges.get(cur, []):
                if nxt not in via:
                    via[nxt] = cur
                    queue.append(nxt)
        hits = sorted(p for p in via if p != root and name[p] in forbidden)
        for h in hits:
            path, p = [], h
            while p is not None:
                path.append(name[p])
                p = via[p]
            bad.append(f"{crate} must not depend on {name[h]}: " + " -> ".join(reversed(path)))
        if not hits and not quiet:
            print(f"ok  {crate}: none of {', '.join(sorted(forbidden & set(name.values())))}")
    return bad


def main(argv):
    meta = load()
    bad = check(meta)
    for b in bad:
        print("BAD " + b)
    if "--self-test" in argv:
        # lode-objects -> lode-catalog -> lode-datapath: found, with its path.
        ids = {p["name"]: p["id"] for p in meta["packages"]}
        for node in meta["resolve"]["nodes"]:
            if node["id"] == ids["lode-catalog"]:
                node["deps"].append({"pkg": ids["lode-datapath"], "dep_kinds": [{"kind": None}]})
        found = check(meta, quiet=True)
        want = "lode-objects must not depend on lode-datapath: lode-objects -> lode-catalog -> lode-datapath"
        if want not in found:
            print("BAD the self-test's forbidden edge was not reported: " + "; ".join(found))
            return 1
        print("ok  self-test: an added edge objects -> catalog -> datapath is reported")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
