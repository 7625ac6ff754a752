r"""Prepares the project's TFDS datasets offline from released files (what `tfds build` would do).

  python -m scripts.build_tfds --manual_dir=../shared/data --data_dir=/data/tfds
  python -m scripts.build_tfds --manual_dir=/data --data_dir=/data/tfds \
      --datasets=asq,heap_comparisons/av

Builds every builder of `t5_tasks/sources/tfds_builders.py` (each HEAP criterion is one config of
`heap_comparisons`) whose files lie under --manual_dir, searched recursively; the others are listed
as skipped. A dataset named in --datasets must have its files there. A dataset already prepared in
--data_dir is kept. The `<task>_tfds` tasks read the result with TFDS_DATA_DIR=<data_dir>.

`tfds build t5_tasks/sources/tfds_builders.py` does not serve: it builds one builder per file, and
its command line imports Apache Beam, which this project does not install.
"""
from typing import Sequence

from absl import app
from absl import flags

from scripts import console
from scripts import gin_cli

# TensorFlow (tfds, the builders) is imported inside the functions, once absl has started: imported
# at the top of this file, its GPU probe would run in app.run with stderr open, printing `failed call
# to cuInit` on a CPU machine (as scripts/analyze.py explains).


def dataset_names() -> list[str]:
  """Every buildable dataset: `name`, or `name/config` for each config of a builder that has them."""
  from t5_tasks.sources import tfds_builders  # pylint: disable=g-import-not-at-top
  return [f"{b.name}/{c.name}" if c else b.name
          for b in tfds_builders.manual_builders() for c in b.BUILDER_CONFIGS or [None]]


def _expand(requested: Sequence[str]) -> list[str]:
  """Requested names with a configured builder's bare name expanded to all its configs."""
  known = dataset_names()
  names = []
  for name in requested:
    matches = [k for k in known if k == name or k.startswith(name + "/")]
    if not matches:
      raise ValueError(f"--datasets: unknown dataset {name!r}; choose from {', '.join(known)}")
    names += matches
  return names


def build(manual_dir: str, data_dir: str | None = None,
          datasets: Sequence[str] = ()) -> dict[str, dict[str, int]]:
  """Prepares the datasets found under manual_dir (those named, if any) in data_dir.

  Returns {dataset: {split: examples}} of the prepared ones. Without `datasets`, a dataset
  with no files under manual_dir is skipped; a named one is an error (FileNotFoundError).
  """
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  from t5_tasks.sources import tfds_builders  # pylint: disable=g-import-not-at-top,unused-import  # registers them
  prepared = {}
  for name in _expand(datasets) if datasets else dataset_names():
    builder = tfds.builder(name, data_dir=data_dir)
    if not builder.found_files(manual_dir):
      if datasets:
        raise FileNotFoundError(
            f"{name}: no files under {manual_dir}. {builder.MANUAL_DOWNLOAD_INSTRUCTIONS}")
      print(f"{name}: skipped, no files under {manual_dir}", flush=True)
      continue
    builder.download_and_prepare(download_config=tfds.download.DownloadConfig(manual_dir=manual_dir))
    prepared[name] = {split: info.num_examples for split, info in builder.info.splits.items()}
    sizes = ", ".join(f"{split} {count}" for split, count in prepared[name].items())
    print(f"{name}: {sizes} -> {builder.data_dir}", flush=True)
  return prepared


def main(argv: Sequence[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  args = flags.FLAGS
  console.quiet_libraries()  # TFDS logs each file it writes at INFO
  import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  tfds.disable_progress_bar()  # one summary line per dataset instead
  prepared = build(args.manual_dir, args.data_dir, args.datasets)
  if not prepared:
    raise FileNotFoundError(f"no dataset's files found under {args.manual_dir}")


if __name__ == "__main__":
  flags.DEFINE_string("manual_dir", None, "Folder holding the released files (searched recursively).",
                      required=True)
  flags.DEFINE_string("data_dir", None, "TFDS data dir to prepare into (default: TFDS's, $TFDS_DATA_DIR or "
                      "~/tensorflow_datasets).")
  flags.DEFINE_list("datasets", [], "Only these: builder names of t5_tasks/sources/tfds_builders.py (asq, "
                    "timedial, ...; a wrong one is named with the list) or heap_comparisons/<criterion> (its "
                    "abbreviation in lower case, e.g. av).")
  console.run(gin_cli.one_line_errors(main))  # an unknown dataset, no files: one line
