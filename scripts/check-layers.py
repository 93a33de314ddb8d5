#!/usr/bin/env python3
"""Fails if a crate depends (at build time, directly or through others) on a crate its layer may
not see (README "Crates": boundaries name no engine, the object service sees the boundaries
only, one backend never borrows another's types), or if a crate's modules import each other in
a circle (a module that extends the service with operations sits above it, not beside it).

Usage: scripts/check-layers.py [--self-test]
Exit 0 and one line per crate checked; exit 1 with each forbidden path otherwise. --self-test
also checks that the check fails when a forbidden edge (objects -> datapath, through a crate in
between) is added to the real graph."""
import json
import os
import re
import subprocess
import sys

# Storage engines and backends, by crate name.
ENGINES = {"rocksdb", "librocksdb-sys", "io-uring", "lode-rados"}
BACKENDS = {"lode-metadata-rocks", "lode-catalog-kv", "lode-datapath", "lode-blob-rados", "lode-catalog-rados"}
DOOR_CRATES = {"lode-door", "lode-s3", "lode-posix"}
DOORS = {"s3s", "hyper", "fuser", "lode-gateway"} | DOOR_CRATES
# What a door crate may not name directly (it goes through lode-objects, which re-exports
# the records and errors it hands out).
STORES = {"lode-catalog", "lode-metadata", "lode-blob", "lode-rados"} | {"lode-catalog-kv", "lode-metadata-rocks", "lode-datapath", "lode-blob-rados", "lode-catalog-rados"}

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
    # The KV catalog sees the MetadataStore boundary only: RocksDB is chosen by the wiring.
    "lode-catalog-kv": (BACKENDS - {"lode-catalog-kv"}) | ENGINES | DOORS,
    "lode-datapath": (BACKENDS - {"lode-datapath"}) | {"rocksdb", "librocksdb-sys", "lode-rados"} | DOORS,
    "lode-blob-rados": (BACKENDS - {"lode-blob-rados"}) | {"rocksdb", "librocksdb-sys", "io-uring"} | DOORS,
    "lode-catalog-rados": (BACKENDS - {"lode-catalog-rados"}) | {"rocksdb", "librocksdb-sys", "io-uring"} | DOORS,
    "lode-rados": BACKENDS | {"rocksdb", "librocksdb-sys", "io-uring"} | DOORS,
    # The doors see the object service (and, for the two doors, their shared layer) only;
    # neither door reaches the other.
    "lode-door": ENGINES | BACKENDS | {"lode-gateway", "lode-s3", "lode-posix", "fuser"},
    "lode-s3": ENGINES | BACKENDS | {"lode-gateway", "lode-posix", "fuser"},
    "lode-posix": ENGINES | BACKENDS | {"lode-gateway", "lode-s3"},
    # The load generator drives servers over HTTP only.
    # (It carries a bare FUSE passthrough for `lode bench-ceiling`, so fuser is allowed.)
    "lode-bench": BACKENDS | ENGINES | DOOR_CRATES | {"lode-objects", "lode-catalog", "lode-metadata", "lode-blob", "s3s", "lode-gateway"},
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


def module_graph(src):
    """A crate's modules (the files and directories under `src`, tests and comments left out)
    and the modules each one names: `crate::m`, `use crate::{m, ...}`, or a name the crate root
    re-exports from `m` (`pub use m::{A, B}`)."""
    def code(path):
        text = open(path).read()
        cut = text.find("#[cfg(test)]\nmod tests")
        text = text[:cut] if cut >= 0 else text
        return re.sub(r"//[^\n]*", "", text)
    mods = {}
    for entry in sorted(os.listdir(src)):
        path = os.path.join(src, entry)
        if entry.endswith(".rs") and entry not in ("lib.rs", "main.rs"):
            mods[entry[:-3]] = [path]
        elif os.path.isdir(path):
            mods[entry] = [os.path.join(dp, f) for dp, _, fs in os.walk(path) for f in fs if f.endswith(".rs")]
    owner = {}
    for root in ("lib.rs", "main.rs"):
        if os.path.exists(os.path.join(src, root)):
            for m, names in re.findall(r"pub use (\w+)::\{?([\w\s,:]*)\}?;", code(os.path.join(src, root))):
                for n in names.split(","):
                    n = n.strip().split("::")[-1]
                    if m in mods and n:
                        owner[n] = m
    graph = {}
    for m, files in mods.items():
        refs = set()
        for f in files:
            t = code(f)
            refs |= set(re.findall(r"crate::(\w+)", t))
            for group in re.findall(r"use crate::\{([^}]*)\}", t):
                refs |= {i.strip().split("::")[0] for i in group.split(",")}
        graph[m] = {owner.get(r, r) for r in refs} & set(mods) - {m}
    return graph


def circles(graph):
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def check_direct(meta, quiet=False):
    """A door crate names no store crate among its own (normal) dependencies."""
    name = {p["id"]: p["name"] for p in meta["packages"]}
    bad = []
    for node in meta["resolve"]["nodes"]:
        crate = name[node["id"]]
        if crate not in DOOR_CRATES:
            continue
        direct = {name[d["pkg"]] for d in node["deps"] if any(k["kind"] is None for k in d["dep_kinds"])}
        hits = sorted(direct & STORES)
        for h in hits:
            bad.append(f"{crate} (a door) depends on {h} itself: go through lode-objects")
        if not hits and not quiet:
            print(f"ok  {crate}: depends on no store crate itself")
    return bad


def check_circles(meta):
    bad = []
    root = meta["workspace_root"]
    for p in meta["packages"]:
        if not p["name"].startswith("lode"):
            continue
        src = os.path.join(os.path.dirname(p["manifest_path"]), "src")
        if not os.path.isdir(src) or not os.path.dirname(p["manifest_path"]).startswith(root):
            continue
        found = circles(module_graph(src))
        for c in found:
            bad.append(f"{p['name']}: modules import each other in a circle: {' <-> '.join(c)}")
        if not found:
            print(f"ok  {p['name']}: no import circle among its modules")
    return bad


# The gateway's modules that are not doors or admin: the wiring (server; cluster: the change
# feed and the IO profile on RADOS), the offline checks of the single-node store, and the fuzz
# harness. Every other module sees the object service only.
WIRING = {"server", "cluster", "fsck", "fuzzing"}
STORE_CRATES = r"lode_(?:catalog_rados|catalog|metadata_rocks|metadata|blob_rados|blob|datapath|rados)\b"


def check_doors(meta):
    bad = []
    for p in meta["packages"]:
        if p["name"] in DOOR_CRATES | {"lode-gateway"}:
            bad += check_door_modules(p)
    return bad


def check_door_modules(pkg):
    """Every module of a door crate, and the binary's modules but its wiring, name no store
    crate in their code."""
    crate = pkg["name"]
    src = os.path.join(os.path.dirname(pkg["manifest_path"]), "src")
    wiring = WIRING if crate == "lode-gateway" else set()
    bad = []
    for entry in sorted(os.listdir(src)):
        path = os.path.join(src, entry)
        if not entry.endswith(".rs") and not os.path.isdir(path):
            continue
        m = entry[:-3] if entry.endswith(".rs") else entry
        if m in wiring or (m == "main" and crate == "lode-gateway"):
            continue
        files = [path] if entry.endswith(".rs") else [
            os.path.join(dp, f) for dp, _, fs in os.walk(path) for f in fs if f.endswith(".rs")]
        names = set()
        for f in files:
            text = open(f).read()
            cut = text.find("#[cfg(test)]\nmod tests")
            text = text[:cut] if cut >= 0 else text
            text = re.sub(r"//[^\n]*", "", text)
            text = re.sub(r'"(?:[^"\\\n]|\\.)*"', '""', text)
            names |= set(re.findall(STORE_CRATES, text))
        if not names:
            print(f"ok  {crate}::{m}: sees the object service only")
        else:
            bad.append(f"{crate}::{m} (a door or admin module) names {', '.join(sorted(names))}: go through lode_objects")
    return bad


def main(argv):
    meta = load()
    bad = check(meta) + check_direct(meta) + check_circles(meta) + check_doors(meta)
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
        if circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) != [["a", "b", "c"]]:
            print("BAD the self-test's circle a -> b -> c -> a was not reported")
            return 1
        print("ok  self-test: a circle a -> b -> c -> a is reported")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
