"""Speed of the Flickr8k data steps: ``import_flickr8k`` (caption file + split lists + photo
check) and ``prepare_dataset`` (vocabulary, encoded captions, CIDEr-D document frequencies).

The unit tests ``tests/data/test_importers.py::test_flickr8k_real`` and
``tests/data/test_prepare.py::test_prepare_real_flickr8k`` check what these steps produce on the
real Flickr8k; how long they take is measured here instead (a time bound in a unit test fails
on a busy machine and says nothing about the result).

Usage (from the repository root)::

    python benchmarks/flickr8k_data.py [--repeats 3] [--flickr8k ../shared/data/flickr8k]

Prints a Markdown table of the median wall time of each step (fresh output folder per run).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

from catcap.data.importers import import_flickr8k, write_dataset_json  # noqa: E402
from catcap.data.prepare import prepare_dataset  # noqa: E402

DEFAULT = Path(__file__).resolve().parents[2] / "shared" / "data" / "flickr8k"


def one_run(flickr8k: Path, work: Path) -> tuple[float, float]:
    """(import seconds, prepare seconds) of one run into ``work``."""
    start = time.perf_counter()
    splits = {"train": flickr8k / "Flickr_8k.trainImages.txt", "val": flickr8k / "Flickr_8k.devImages.txt"}
    data = import_flickr8k(flickr8k / "Flickr8k.token.txt", splits, flickr8k / "images")
    path = write_dataset_json(work / "dataset_flickr8k.json", data)
    imported = time.perf_counter() - start
    start = time.perf_counter()
    prepare_dataset(path, work / "prepared")
    return imported, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--flickr8k", type=Path, default=DEFAULT)
    args = parser.parse_args()
    if not (args.flickr8k / "Flickr8k.token.txt").exists():
        raise SystemExit(f"no Flickr8k at {args.flickr8k} (expected Flickr8k.token.txt and the split lists)")
    runs = []
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory(prefix="catcap-bench-") as tmp:
            runs.append(one_run(args.flickr8k, Path(tmp)))
    imports, prepares = zip(*runs)
    print(f"Python {platform.python_version()}, {os.cpu_count()} CPUs, {args.repeats} runs, medians\n")
    print("| step | median s | min s | max s |\n|---|---:|---:|---:|")
    for name, times in (("import flickr8k (35,000 captions, photo check)", imports),
                        ("prepare (vocabulary, captions, df)", prepares)):
        print(f"| {name} | {statistics.median(times):.2f} | {min(times):.2f} | {max(times):.2f} |")


if __name__ == "__main__":
    main()
