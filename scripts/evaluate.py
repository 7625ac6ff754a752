r"""Evaluates a checkpoint offline with gin, on the command line t5x uses.

  python -m scripts.evaluate --gin_file=gin/models/t5_1_1/tiny.gin --gin_file=gin/runs/eval.gin \
      --gin_file=gin/mixtures/quickstart.gin --gin.CHECKPOINT_PATH="'/tmp/run'" \
      --gin.EVAL_OUTPUT_DIR="'/tmp/run/eval'"

Writes EVAL_OUTPUT_DIR/predictions.jsonl, metrics.json and report.html, and prints the metrics.
Started as several processes (scripts/launch_local.py, a pod slice), they score as one program and
process 0 writes and prints them.
Ctrl-C (SIGINT) or SIGTERM stops after the batch being scored: the items scored so far are
kept, no metrics or report are written, one line says how far it got, and the exit code is 130
or 143 (as scripts/train.py's). Rerunning the same command resumes; an EVAL_OUTPUT_DIR holding
another checkpoint's or other data's predictions is refused. Importing t5_tasks registers every
task and mixture. Evaluating HEAP criteria also writes their averages
(`t5_tasks.metrics.heap_metric_groups`).
"""
from typing import Sequence

import gin
import jax

from runner import checkpoints
from runner import evaluate as evaluate_lib
from runner import report
from scripts import gin_cli  # the shared gin command line
from scripts import recorded_inputs


# Feature lengths of a checkpoint that records none (an imported one), where none are bound.
DEFAULT_LENGTHS = {"inputs": 512, "targets": 128}


def format_metrics(metrics) -> str:
  """One line per task and metric: value and 95% interval (a group's average: what its bounds are)."""
  return "\n".join(report.metric_line(task, name, e)
                   for task, by_name in metrics.items() for name, e in by_name.items())


def main(argv: Sequence[str]) -> None:
  gin_cli.start(argv)
  checkpoint_path = recorded_inputs.macro_value("CHECKPOINT_PATH")
  checkpoints.check_checkpoint(checkpoint_path, "CHECKPOINT_PATH")  # before any data is prepared
  recorded_inputs.follow(checkpoint_path, f"CHECKPOINT_PATH {checkpoint_path}", DEFAULT_LENGTHS)
  import seqio  # pylint: disable=g-import-not-at-top  # registered by t5_tasks in `start`
  from t5_tasks import references  # pylint: disable=g-import-not-at-top  # after absl starts
  # Every task's reference figures: the evaluation uses those of the tasks it scored (a mixture gin
  # binds may be a reference to register_mixture, whose tasks are known only once it is called).
  metrics = gin.get_configurable(evaluate_lib.evaluate)(
      run_config=gin.config_str(), references=references.for_tasks(seqio.TaskRegistry.names()))
  if jax.process_index() == 0:  # the one process that wrote them
    print(format_metrics(metrics))
    output_dir = gin.query_parameter("%EVAL_OUTPUT_DIR")
    if isinstance(output_dir, gin.config.ConfigurableReference):  # e.g. @run_dir.eval_dir()
      output_dir = output_dir.scoped_configurable_fn()
    print(f"report: {output_dir}/report.html", flush=True)


if __name__ == "__main__":
  gin_cli.run(main)
