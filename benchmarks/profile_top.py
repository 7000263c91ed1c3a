"""The top entries of the cProfile stats `benchmarks.scale --profile DIR` wrote, merged per service.

    .venv/bin/python -m benchmarks.profile_top DIR [--top 25] [--sort tottime|cumulative]
"""

from __future__ import annotations

import argparse
import io
import pstats
import sys
from collections import defaultdict
from pathlib import Path


def top(directory: Path, n: int = 25, sort: str = "tottime") -> str:
    groups: dict[str, list[Path]] = defaultdict(list)
    for path in sorted(directory.glob("*.prof")):
        groups[path.name.split("-")[0] + "-" + path.name.split("-")[1]].append(path)
    out = io.StringIO()
    for label, paths in sorted(groups.items()):
        stats = pstats.Stats(*(str(p) for p in paths), stream=out)
        out.write(f"\n== {label}: {len(paths)} profiled windows, {stats.total_tt:.3f} s profiled CPU ==\n")
        stats.sort_stats(sort).print_stats(n)
    return out.getvalue()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("directory", type=Path)
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--sort", default="tottime")
    args = p.parse_args(argv)
    print(top(args.directory, args.top, args.sort))
    return 0


if __name__ == "__main__":
    sys.exit(main())
