"""The fault table: each fault a user of preemptible pods meets, how it is injected, what must
happen, and the tests that inject it (issue 35). The tests live beside the code they exercise;
this table keeps the list whole: a guard renamed or removed fails `test_every_fault_has_its_guards`.

`python -m tests.test_faults` reruns every guard and prints the table with each fault's outcome
(survived: all its guards pass), the figure an issue's note reports.
"""
import ast
import pathlib
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]

# (kind, fault, what must happen, guards: "file::test" node ids without parameters)
FAULTS = [
    ("fault", "SIGKILL during training (twice while a checkpoint is written)",
     "the rerun resumes to the parameters of an uninterrupted run",
     ["tests/runner/test_train_entry.py::test_killed_run_resumes_to_the_parameters_of_an_uninterrupted_run"]),
    ("fault", "SIGTERM / SIGINT during training", "the step is saved; exit 143 / 130",
     ["tests/runner/test_train_entry.py::test_sigterm_saves_at_the_current_step_and_returns",
      "tests/runner/test_train_entry.py::test_scripts_train_saves_on_a_signal_and_exits_with_its_code"]),
    ("fault", "a non-finite loss", "stops naming the last good checkpoint, saves nothing",
     ["tests/runner/test_train_entry.py::test_non_finite_update_stops_with_the_last_good_checkpoint",
      "tests/scripts/test_gin_fuzz.py::test_a_diverged_run_ends_in_one_line"]),
    ("fault", "a missing or truncated checkpoint file", "the step is named, set aside; training resumes before it",
     ["tests/runner/test_checkpoint_damage.py::test_loading_a_damaged_step_names_the_step_and_the_file",
      "tests/runner/test_checkpoint_damage.py::test_training_resumes_from_the_previous_step_when_the_latest_is_damaged",
      "tests/runner/test_checkpoint_damage.py::test_training_stops_when_no_step_reads",
      "tests/runner/test_checkpoint_damage.py::test_when_every_step_is_damaged_the_error_names_each_step_and_its_damage"]),
    ("fault", "a same-size bit flip in a checkpoint file", "found by the step's checksums on every load",
     ["tests/runner/test_train_entry.py::"
      "test_a_flipped_bit_in_a_checkpoint_file_is_found_and_the_run_resumes_from_the_step_before",
      "tests/runner/test_checkpoint_damage.py::test_evaluation_inference_and_serving_refuse_a_step_whose_values_changed",
      "tests/runner/test_checkpoint_damage.py::test_the_best_checkpoint_is_verified_too"]),
    ("fault", "a full disk", "one line; no partial step or file; earlier steps intact",
     ["tests/runner/test_disk_full.py::test_a_step_that_cannot_fit_is_refused_before_a_file_is_written",
      "tests/runner/test_disk_full.py::test_a_disk_that_fills_while_orbax_writes_leaves_no_partial_step",
      "tests/scripts/test_gin_fuzz.py::test_a_full_disk_ends_the_run_in_one_line_naming_the_file"]),
    ("fault", "a rerun with another model size or a bad setting", "refused in one line before the run changes",
     ["tests/runner/test_train_entry.py::test_a_refused_resume_leaves_the_run_as_it_was"]),
    ("fault", "SIGINT / SIGKILL during evaluation", "the same command resumes; scored batches are kept",
     ["tests/runner/test_interrupts.py::test_evaluation_stops_on_ctrl_c_and_the_same_command_resumes",
      "tests/runner/test_evaluate.py::test_interrupted_evaluation_resumes_to_the_same_outputs"]),
    ("fault", "SIGTERM during generation", "stops with the inputs sampled so far",
     ["tests/runner/test_interrupts.py::test_generation_stops_on_sigterm_with_the_inputs_sampled_so_far"]),
    ("fault", "SIGTERM to one process of a two-process run", "both save the same step",
     ["tests/runner/test_multi_process.py::test_sigterm_to_one_process_makes_both_save_the_same_step"]),
    ("fault", "SIGKILL of one process of a two-process run", "the other stops within 30 s in one line naming it",
     ["tests/runner/test_multi_process.py::test_sigkill_of_one_process_stops_the_other_naming_it",
      "tests/runner/test_lost_host.py::test_a_survivor_of_the_lost_coordinator_prints_one_line_and_stops",
      "tests/runner/test_partitioning.py::"
      "test_a_lost_host_is_declared_after_20_seconds_unless_the_environment_says_otherwise"]),
    ("fault", "resuming a two-process checkpoint on another process count and mesh", "restores exactly",
     ["tests/runner/test_multi_process.py::"
      "test_a_two_process_checkpoint_restores_with_one_and_with_four_processes_on_another_mesh"]),
    ("fault", "two trainings into one MODEL_DIR at once (a relaunch while the old job runs), local or a bucket",
     "the second exits 1 in one line naming the first; the first's checkpoints equal an undisturbed run's",
     ["tests/runner/test_lease.py::test_two_trainings_into_one_folder_the_second_stops_and_the_first_is_undisturbed",
      "tests/runner/test_lease.py::test_two_trainings_into_one_bucket_run_the_second_stops_and_the_first_is_undisturbed",
      "tests/runner/test_lease.py::test_a_second_run_is_refused_in_one_line_naming_the_holder",
      "tests/runner/test_lease.py::test_a_run_whose_lease_was_taken_over_stops_before_writing_and_leaves_the_new_lease"]),
    ("fault", "a run killed or its host lost, leaving its lease", "taken over with a line (at once on the same host)",
     ["tests/runner/test_train_entry.py::test_killed_run_resumes_to_the_parameters_of_an_uninterrupted_run",
      "tests/runner/test_lease.py::test_a_lease_not_renewed_in_time_is_taken_over_with_a_line",
      "tests/runner/test_lease.py::test_a_lease_of_a_process_of_this_host_that_is_gone_is_taken_over_at_once"]),
    ("fault", "a disk that fills, or a bucket that stops answering, while a step is written in the background",
     "the run stops at its next step in one line naming that step and the path",
     ["tests/runner/test_disk_full.py::test_a_write_that_fails_in_the_background_is_named_by_its_own_step",
      "tests/runner/test_disk_full.py::"
      "test_a_bucket_that_stops_answering_mid_write_is_one_line_naming_the_step_and_the_path"]),
    ("fault", "a loss that diverges before the first checkpoint", "one line saying no checkpoint was saved",
     ["tests/runner/test_train_entry.py::test_a_run_diverged_before_its_first_checkpoint_says_none_was_saved"]),
    ("fault", "SIGTERM to launch_local", "every process saves; an orderly stop, said as one; exit 143",
     ["tests/scripts/test_launch_local_console.py::test_an_orderly_stop_on_sigterm_is_not_called_a_failure"]),
    ("fault", "the emulator: a port another holds, SIGTERMs while it starts, its parent killed",
     "one line naming the port; no server left running",
     ["tests/scripts/test_gcs_emulator.py::test_a_port_in_use_is_refused_in_one_line_naming_it",
      "tests/scripts/test_gcs_emulator.py::test_two_emulators_started_at_once_serve_on_their_own_ports_their_own_buckets",
      "tests/scripts/test_gcs_emulator.py::test_ten_sigterms_while_it_starts_leave_no_server",
      "tests/scripts/test_gcs_emulator.py::test_sigterm_right_after_the_two_lines_exits_0_and_ends_the_server",
      "tests/scripts/test_parent_death.py::test_the_emulators_server_ends_when_its_parent_is_killed"]),
    ("fault", "SIGINT / SIGTERM to the server (a generation outliving the grace)", "exits 0",
     ["tests/scripts/test_serve_shutdown.py::test_ctrl_c_stops_the_server_after_the_request_in_flight",
      "tests/scripts/test_serve_shutdown.py::test_sigterm_abandons_a_generation_that_outlives_the_grace_and_exits_0"]),
    ("bad input", "a 20 MB dialog turn, a 900 KB situation of short paragraphs", "trimmed in linear work",
     ["tests/t5_tasks/test_preprocessors.py::test_trimming_tokenizes_about_linearly_more_for_a_longer_input",
      "tests/t5_tasks/test_preprocessors.py::test_dialog_context_returns_what_dropping_one_at_a_time_returned"]),
    ("bad input", "server: an oversized body, too many situations, malformed JSON",
     "413/400 with a reason while other clients are served",
     ["tests/scripts/test_serve.py::test_oversized_body_is_refused_from_its_length_while_others_are_served",
      "tests/scripts/test_serve.py::test_bad_requests_get_clear_errors_and_serving_goes_on",
      "tests/scripts/test_serve.py::test_hundred_requests_from_eight_clients_a_quarter_malformed"]),
    ("bad input", "server: a stalled or trickling client, a generation past the deadline",
     "503 at the request's deadline; others served",
     ["tests/scripts/test_serve.py::test_a_stalled_client_does_not_hold_the_server",
      "tests/scripts/test_serve.py::test_a_client_that_trickles_its_body_is_refused_at_the_deadline",
      "tests/scripts/test_serve.py::test_deadline_refuses_a_long_generation_and_the_requests_behind_it"]),
    ("bad input", "server: another path or method, an empty request", "404/405/400 in JSON; GET /health",
     ["tests/scripts/test_serve.py::test_other_paths_and_methods_get_json_404_or_405",
      "tests/scripts/test_serve.py::test_health_answers_while_idle"]),
    ("bad input", "an unbalanced bracket in a gin binding or file", "one line naming the binding or file and line",
     ["tests/scripts/test_gin_fuzz.py::test_an_unclosed_bracket_is_named_with_the_line_it_opens_on",
      "tests/scripts/test_gin_fuzz.py::test_a_wrong_binding_is_refused_in_one_paragraph_or_the_run_starts"]),
    ("bad input", "checkpoint_every 'ten' or 0; zero steps", "one line before compiling",
     ["tests/runner/test_train_entry.py::test_a_refused_resume_leaves_the_run_as_it_was",
      "tests/runner/test_train_entry.py::test_scripts_train_refuses_zero_steps_in_one_line_and_names_a_misspelled_macro"]),
    ("bad input", "a truncated or malformed Hugging Face checkpoint", "one line naming the file",
     ["tests/models/test_checkpoint_import.py::test_a_config_json_cut_short_is_one_line_naming_the_file",
      "tests/models/test_checkpoint_import.py::test_missing_tensor_is_named",
      "tests/models/test_checkpoint_import.py::test_misshaped_tensor_is_named",
      "tests/models/test_checkpoint_import.py::test_a_safetensors_file_cut_short_or_not_safetensors_is_one_line_naming_the_file",
      "tests/scripts/test_one_line_refusals.py::test_a_truncated_safetensors_file_is_one_line_naming_the_file"]),
    ("bad input", "a checkpoint folder that is missing, a file or never trained (evaluate, generate, serve, "
     "INITIAL_CHECKPOINT_PATH); a MODEL_DIR that is a file", "one line naming the path, before any data",
     ["tests/scripts/test_one_line_refusals.py::test_serve_refuses_a_missing_checkpoint_folder_in_one_line",
      "tests/scripts/test_one_line_refusals.py::"
      "test_evaluate_and_generate_refuse_a_checkpoint_that_is_a_file_or_never_trained_before_any_data",
      "tests/runner/test_checkpoints.py::test_check_checkpoint_names_the_macro_the_path_and_what_is_missing",
      "tests/runner/test_train_entry.py::test_a_missing_initial_checkpoint_is_refused_before_the_run_prepares_anything",
      "tests/runner/test_train_entry.py::test_a_model_dir_that_is_a_file_is_refused_in_one_line_before_anything"]),
    ("bad input", "a flag naming a missing folder; --help", "one line (usage only for a usage error); --help exits 0",
     ["tests/scripts/test_one_line_refusals.py::test_a_flag_naming_a_missing_folder_is_one_line_and_usage_is_for_usage_errors",
      "tests/scripts/test_help.py::test_help_exits_0",
      "tests/scripts/test_help.py::test_help_variants_exit_0_and_an_unknown_flag_is_two_lines"]),
    ("bad input", "a predictions file cut short or corrupt in the middle", "the partial line dropped; corruption named",
     ["tests/runner/test_outputs.py::test_resume_discards_a_truncated_last_line",
      "tests/runner/test_outputs.py::test_resume_refuses_a_corrupt_middle_line"]),
    ("bad input", "a batch size the devices do not divide", "refused before any work",
     ["tests/runner/test_partitioning.py::test_a_batch_size_the_row_blocks_do_not_divide_is_refused_before_any_work"]),
]


def _defines(path: pathlib.Path, name: str) -> bool:
  tree = ast.parse(path.read_text())
  return any(isinstance(node, ast.FunctionDef) and node.name == name for node in tree.body)


def test_every_fault_has_its_guards():
  missing = [guard for *_, guards in FAULTS for guard in guards
             if not (ROOT / guard.split("::")[0]).is_file()
             or not _defines(ROOT / guard.split("::")[0], guard.split("::")[1])]
  assert not missing, f"fault table guards that no longer exist: {missing}"


class _Outcomes:
  """A pytest plugin recording each test's outcome by its node id without parameters."""

  def __init__(self):
    self.failed, self.ran = set(), set()

  def pytest_runtest_logreport(self, report):
    guard = report.nodeid.split("[")[0]
    if report.when == "call" or report.outcome != "passed":
      self.ran.add(guard)
      if report.outcome == "failed":
        self.failed.add(guard)
      elif report.outcome == "skipped":
        self.failed.add(guard)  # not shown to survive here


def main() -> int:
  guards = sorted({guard for *_, guards in FAULTS for guard in guards})
  outcomes = _Outcomes()
  pytest.main(["-q", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadfile", *guards], plugins=[outcomes])
  print(f"\n{'kind':9}  {'survived':8}  fault -> what must happen")
  counts = {}
  for kind, fault, outcome, fault_guards in FAULTS:
    survived = all(g in outcomes.ran and g not in outcomes.failed for g in fault_guards)
    counts.setdefault(kind, [0, 0])
    counts[kind][0] += survived
    counts[kind][1] += 1
    print(f"{kind:9}  {'yes' if survived else 'NO':8}  {fault} -> {outcome}")
  print("; ".join(f"{kind}: {done}/{tried} handled" for kind, (done, tried) in counts.items()))
  return 0 if all(done == tried for done, tried in counts.values()) else 1


if __name__ == "__main__":
  sys.exit(main())
