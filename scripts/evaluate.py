r"""Evaluates a checkpoint offline with gin, on the command line t5x uses.

  python -m scripts.evaluate --gin_file=gin/models/t5_1_1/tiny.gin --gin_file=gin/runs/eval.gin \
      --gin_file=gin/mixtures/quickstart.gin --gin.CHECKPOINT_PATH="'/tmp/run'" \
      --gin.EVAL_OUTPUT_DIR="'/tmp/run/eval'"

Writes EVAL_OUTPUT_DIR/predictions.jsonl, metrics.json and report.html, and prints the metrics.
Ctrl-C (SIGINT) or SIGTERM stops after the batch being scored: the items scored so far are
kept, no metrics or report are written, one line says how far it got, and the exit code is 130
or 143 (as scripts/train.py's). Rerunning the same command resumes; an EVAL_OUTPUT_DIR holding
another checkpoint's or other data's predictions is refused. Importing t5_tasks registers every
task and mixture.
"""
from typing import Sequence

import gin
from absl import app
from absl import flags

from runner import evaluate as evaluate_lib
from scripts import train as train_script  # the shared gin command line


def format_metrics(metrics) -> str:
  """One line per task and metric: value and 95% interval."""
  return "\n".join(f"{task:40s} {name:28s} {e['value']:.4f}  [{e['low']:.4f}, {e['high']:.4f}]"
                   for task, by_name in metrics.items() for name, e in by_name.items())


def main(argv: Sequence[str]) -> None:
  train_script.start(argv)
  metrics = gin.get_configurable(evaluate_lib.evaluate)(run_config=gin.config_str())
  print(format_metrics(metrics))
  print(f"report: {gin.query_parameter('%EVAL_OUTPUT_DIR')}/report.html", flush=True)


if __name__ == "__main__":
  train_script.define_flags()
  app.run(train_script.one_line_errors(main),
          flags_parser=lambda argv: flags.FLAGS(train_script.rewrite_gin_args(argv)))
