#!/usr/bin/env python3
"""merge_mixed_price.py NEW_JSON COMMITTED_JSON — put a new bench/gpu-mixed-price.sh result into
the committed bench/results/gpu_mixed_price.json without losing the committed figures the new
call did not measure (a call that leaves rows out to fit its time limit).

The new document replaces the committed one. Every "derived" key of the committed one that the new
one lacks is kept, and so is every missing key one level down in a key both have (e.g.
long_decode_bs64_us.long_min_splits_2). The kept keys are listed under derived
"kept_from_earlier_run" with the committed run's git_sha, gpu and date (a key kept twice keeps
its first provenance: the earlier list is carried over). Refused (exit 1, the committed file
unchanged): a document that is not gpu-mixed-price output, or runs on different GPUs (figures
of two cards in one file would read as one run's)."""
import json
import os
import sys


def load(path):
    with open(path) as f:
        try:
            d = json.load(f)
        except ValueError as e:
            raise ValueError("%s: %s" % (path, e))
    if not isinstance(d, dict) or d.get("bench") != "gpu-mixed-price" or \
            not isinstance(d.get("derived"), dict):
        raise ValueError("%s: not bench/gpu-mixed-price.sh output" % path)
    return d


def merge(new, old):
    nd, od = new["derived"], old["derived"]
    kept = []
    for k, v in od.items():
        if k == "kept_from_earlier_run":
            continue
        if k not in nd:
            nd[k] = v
            kept.append(k)
        elif isinstance(v, dict) and isinstance(nd[k], dict):
            for sk, sv in v.items():
                if sk not in nd[k]:
                    nd[k][sk] = sv
                    kept.append("%s.%s" % (k, sk))
    prov = list(od.get("kept_from_earlier_run") or [])
    carried = {k for p in prov for k in p.get("keys", [])}
    own = sorted(k for k in kept if k not in carried)
    if own:
        prov.append({"git_sha": old.get("git_sha"), "gpu": old.get("gpu"), "date": old.get("date"),
                     "keys": own})
    if prov:
        nd["kept_from_earlier_run"] = prov
    return kept


def main():
    if len(sys.argv) != 3:
        sys.stderr.write("usage: merge_mixed_price.py NEW_JSON COMMITTED_JSON\n")
        return 2
    try:
        new, old = load(sys.argv[1]), load(sys.argv[2])
    except (OSError, ValueError) as e:
        sys.stderr.write("merge_mixed_price: %s\n" % e)
        return 1
    if new.get("gpu") != old.get("gpu"):
        sys.stderr.write("merge_mixed_price: refused: the new run is on %r, the committed one on "
                         "%r\n" % (new.get("gpu"), old.get("gpu")))
        return 1
    kept = merge(new, old)
    tmp = sys.argv[2] + ".tmp"
    with open(tmp, "w") as f:
        json.dump(new, f, indent=1)
        f.write("\n")
    os.replace(tmp, sys.argv[2])
    print("merge_mixed_price: kept %d key(s) of %s: %s" % (len(kept), old.get("git_sha"),
                                                           ", ".join(sorted(kept)) or "none"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
