"""How long `gpudoctor why` takes to read and compare flight-recorder dumps, by size: a dump of
N entries (each in a process group of its own, the worst case for the comparison) per rank,
decoded by the strict decoder, summed up and compared across ranks.

    python benchmarks/flightrec_scale.py [--ranks 4] [--entries 2000 20000] [--json]

Target: linear in the dumps' size; 20,000 groups per rank over 4 ranks in a few seconds (before
the decoder and the comparison were bounded in work, the comparison alone ran past 45 s).
"""

from __future__ import annotations

import argparse
import json
import pickle
import time

from gpudoctor.why import flightrec


def _dump(entries: int, rank: int) -> bytes:
    return pickle.dumps({"version": "2.10", "pg_status": {}, "entries": [
        {"collective_seq_id": 5 + (rank == 0 and pg == entries - 1), "pg_id": pg, "state": "completed",
         "profiling_name": "nccl:all_reduce", "input_sizes": [[1024]], "is_p2p": False,
         "frames": [{"name": "step", "filename": "/w/train.py", "line": 30}]} for pg in range(entries)]})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--entries", type=int, nargs="+", default=[2000, 20000])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = []
    for entries in args.entries:
        data = [_dump(entries, rank) for rank in range(args.ranks)]
        start = time.perf_counter()
        dumps = [flightrec.summarise(flightrec.loads(d), rank) for rank, d in enumerate(data)]
        read = time.perf_counter() - start
        start = time.perf_counter()
        late = flightrec.behind(dumps)
        compared = time.perf_counter() - start
        rows.append({"entries": entries, "ranks": args.ranks, "bytes_per_dump": len(data[0]),
                     "read_s": round(read, 3), "compare_s": round(compared, 3),
                     "behind": late["behind"] if late else None})
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for row in rows:
            print(f"{row['entries']:>6} entries x {row['ranks']} ranks ({row['bytes_per_dump'] / 1e6:.1f} MB each): "
                  f"read {row['read_s']:.2f} s, compared {row['compare_s']:.3f} s, behind {row['behind']}")


if __name__ == "__main__":
    main()
