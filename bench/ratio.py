#!/usr/bin/env python3
"""Lode against a reference, class by class, from two `lode bench --json` files:

    bench/ratio.py LODE.json OTHER.json LABEL

prints one line per op class both have: ops/s and the ratio, p50 and p99 of each."""
import json
import sys

try:
    a, b = (json.load(open(p)) for p in sys.argv[1:3])
except Exception as e:  # a run that failed left no file
    sys.exit(print(f"{sys.argv[3]}: no result ({e})"))
for cls, x in a["classes"].items():
    y = b["classes"].get(cls)
    if y:
        print(f"{sys.argv[3]} {cls:<10} ops/s {x['ops_per_sec']:8.0f} vs {y['ops_per_sec']:8.0f} = "
              f"{x['ops_per_sec'] / max(y['ops_per_sec'], 1e-9):5.2f}x   p50 {x['p50_ms']:7.2f} vs "
              f"{y['p50_ms']:7.2f} ms   p99 {x['p99_ms']:8.2f} vs {y['p99_ms']:8.2f} ms")
