"""heap: each HEAP criterion's comparisons in the released files, and §3's 80/10/10 split of them."""
import collections
import json
import os

from absl import app

from runner import report
from scripts.analyses.common import print_table
import storage


def _relative(path: str, folder: str) -> str:
  """`path` as found under `folder` (a local folder or a `gs://` prefix), relative to it."""
  if storage.is_bucket(folder):
    return path[len(folder.rstrip("/")) + 1:] if path.startswith(folder.rstrip("/") + "/") else path
  return os.path.relpath(path, folder)


def analyze(args) -> dict:
  """Prints each HEAP criterion's comparisons from the released files under --data_dir, and how
  §3's random 80/10/10 split divides them; writes JSON to --output."""
  from t5_tasks import heap  # pylint: disable=g-import-not-at-top
  if not args.data_dir:
    raise app.UsageError("heap needs --data_dir, a folder of HEAP's released files")
  if not storage.is_dir(args.data_dir):
    raise FileNotFoundError(f"--data_dir {args.data_dir}: no such folder (HEAP's released files)")
  counts, reports = {}, {}
  for abbreviation, criterion in heap.HEAP_CRITERIA.items():
    paths = heap.find_source_files(args.data_dir, criterion.source)
    entry = {"name": criterion.name, "source": criterion.source, "files": paths, "comparisons": None}
    if paths:
      splits = collections.Counter()
      for path in paths:
        comparisons, read = heap.read_heap_comparisons(abbreviation, path)
        splits.update(heap.split_comparisons(comparisons, "paper", seed=0).values())
        if read.normalised:
          reports[path] = read.summary()
      entry.update(comparisons=sum(splits.values()), **{s: splits[s] for s in ("train", "validation", "test")})
    counts[abbreviation] = entry
  for line in reports.values():
    print(f"NOTE: {line}")
  print_table(report.Table(
      f"HEAP comparisons under {args.data_dir} (split: §3's random 80/10/10, seed 0)",
      ("criterion", "name", "comparisons", "train", "validation", "test", "file"),
      [(a, e["name"], e["comparisons"] if e["files"] else "bring your own file",
        *(e.get(s, "") for s in ("train", "validation", "test")),
        ", ".join(_relative(p, args.data_dir) for p in e["files"])) for a, e in counts.items()]))
  total = sum(e["comparisons"] or 0 for e in counts.values())
  print(f"\n{sum(bool(e['files']) for e in counts.values())} of {len(counts)} criteria have a file here; "
        f"{total} comparisons")
  if args.output:
    storage.write_text(args.output, json.dumps(counts, indent=2) + "\n")
    print(f"wrote {args.output}")
  return counts


WRITES_REPORT = False  # prints, and writes JSON to --output
