"""A situation without `created_utc` (the leaderboard API sends none) becomes the same model input
on any day: dated UNDATED_CREATED_UTC, February 14, 2020, as a training input is dated by its post."""
import datetime

import seqio

from scripts import generate


def test_an_undated_situation_is_dated_february_14_2020_whatever_the_clock_says(monkeypatch):
  assert datetime.datetime.fromtimestamp(generate.UNDATED_CREATED_UTC, datetime.timezone.utc) == (
      datetime.datetime(2020, 2, 14, tzinfo=datetime.timezone.utc))
  situation = {"title": "Should I quit?", "selftext": "My boss yells.", "subreddit": "careerguidance"}
  format_inputs = generate.situation_formatter(seqio.ByteVocabulary(extra_ids=100), 512)
  today = format_inputs(situation)
  # A year on, the same request is the same input (time.time() no longer dates it).
  monkeypatch.setattr("time.time", lambda: 1e10)
  assert format_inputs(situation) == today == (
      "Subreddit: r/careerguidance\nDate: February 14, 2020\nTitle: Should I quit?\nSituation: My boss yells.")
  assert format_inputs({**situation, "created_utc": 1546300800}).startswith(  # its own date, as in training
      "Subreddit: r/careerguidance\nDate: January 1, 2019\n")
