"""Detection start-up at scale: opening a large COCO training split the first time and the next time.

    python benchmarks/detection_data_startup.py /tmp/detscale/s20k --images 20000 --before /tmp/old/src

Writes the built-in `shapes` (96 px) in COCO layout into DIR if it is not there, then opens its
training split as `attnkit train detection --data DIR` does (`open_split`), in a fresh process
under `/usr/bin/time -v`, without and with `--skip-bad-images`: "first" with the caches beside
the data removed (the annotation index and the decode check are made), "second" right after
(both found). With --before, the same opening by another source tree (`git archive` of an older
commit, through PYTHONPATH) comes first in each group, so that the arms alternate under one load.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

OPEN = """
import sys, time
from pathlib import Path
from attnkit.detection.layouts import find_layout
from attnkit.detection.sources import open_split
start = time.perf_counter()
open_split(find_layout(Path(sys.argv[1])).source("train"), None, for_evaluation=False, skip_bad=sys.argv[2] == "1")
print(f"opened in {time.perf_counter() - start:.3f} s", file=sys.stderr)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("data", type=Path)
    parser.add_argument("--images", type=int, default=20000)
    parser.add_argument("--before", type=Path, help="a source folder (src/) of the code to compare with")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    if not (args.data / "annotations" / "instances_train.json").is_file():
        from attnkit.detection.shapes import ShapesConfig, write_shapes

        write_shapes(args.data, ShapesConfig(image_size=96, train_images=args.images, val_images=200))
    arms = ([("before", args.before)] if args.before else []) + [("first", None), ("second", None)]
    print("| round | --skip-bad-images | code, run | open the split (s) | process wall (s) | peak RSS (MB) |")
    print("|---|---|---|---|---|---|")
    for round_ in range(1, args.rounds + 1):
        for skip in (False, True):
            for name, source in arms:
                if name == "first":
                    for cache in list(args.data.rglob(".attnkit-cache")):
                        shutil.rmtree(cache)
                opened, wall, peak = timed(args.data, skip, source)
                print(f"| {round_} | {'yes' if skip else 'no'} | {name} | {opened:.2f} | {wall:.1f} | {peak:.0f} |",
                      flush=True)


def timed(data: Path, skip: bool, source: Path | None) -> tuple[float, float, float]:
    """(seconds to open the split, the process's wall seconds, its peak resident MB) in a fresh process."""
    environment = {**os.environ, **({"PYTHONPATH": str(source)} if source else {})}
    result = subprocess.run(["/usr/bin/time", "-v", sys.executable, "-c", OPEN, str(data), "1" if skip else "0"],
                            capture_output=True, text=True, env=environment)
    log = result.stderr
    opened = re.search(r"opened in ([\d.]+) s", log)
    if result.returncode != 0 or opened is None:
        raise SystemExit(f"opening {data} failed:\n{log[-3000:]}")
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (?:(\d+):)?(\d+):([\d.]+)", log)
    seconds = int(wall.group(1) or 0) * 3600 + int(wall.group(2)) * 60 + float(wall.group(3)) if wall else float("nan")
    peak = re.search(r"Maximum resident set size \(kbytes\): (\d+)", log)
    return float(opened.group(1)), seconds, int(peak.group(1)) / 1000 if peak else float("nan")


if __name__ == "__main__":
    main()
