"""How each family's records become model inputs: pure text functions and the seqio steps.

The text functions are plain Python (tested directly); the seqio preprocessors run them
inside tf.data through `tf.numpy_function`, with the task's vocabulary and the run's
`sequence_length` when they need to count tokens. Each step that maps one example to one
example is written per example and mapped by `seqio.map_over_dataset`, which also passes
`sequence_length` and `output_features` to the steps that name them.
"""
import datetime
import re
from typing import Callable, Mapping, Sequence

import gin
import seqio
import tensorflow as tf

# The T5 sentinels around TimeDial's masked span: the first replaces <MASK> in the dialog; the
# tasks' vocabulary (t5_tasks.vocab) encodes each as its one sentinel id.
SENTINEL = "<extra_id_0>"
END_SENTINEL = "<extra_id_1>"
MASK = "<MASK>"
TIMEDIAL_SCOPES = ("full", "local", "target")
TIMEDIAL_TARGET_FORMATS = ("span_corruption", "plain")


def _text(value) -> str:
  return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def token_counter(vocabulary: seqio.Vocabulary) -> Callable[[str], int]:
  return lambda text: len(vocabulary.encode(text))


def split_paragraphs(text: str) -> tuple[list[str], str]:
  """Paragraphs (blank-line separated, else lines) and the separator to join them back."""
  paragraphs = [p.strip() for p in re.split(r"\n\s*\n", text.strip()) if p.strip()]
  if len(paragraphs) >= 3:
    return paragraphs, "\n\n"
  return [line.strip() for line in text.strip().split("\n") if line.strip()], "\n"


# A text longer than this many characters per token of the budget is taken not to fit, so it is
# not tokenized whole first: T5's SentencePiece averages about 4 characters a token on English,
# bytes at most 1. It only orders the search (a text that fits all the same is found to), and it
# bounds what a long input costs before the search: at most this many characters a budget token.
_MOST_CHARS_PER_TOKEN_TRIED_WHOLE = 16


def _fewest_drops(most: int, size: Callable[[int], int], fits: Callable[[int], bool],
                  max_tokens: int) -> int | None:
  """The fewest drops `k` in 0..`most` whose candidate fits in `max_tokens`, else None.

  Candidate `k` is what is left of a text after its first `k` drops in the protocol's order;
  it holds candidate `k + 1`, and cutting text away never adds tokens (bytes, whitespace words,
  SentencePiece pieces, which do not cross spaces), so `fits` is monotone in `k`: the first `k`
  that fits, which a drop-one-and-recount loop returns in time quadratic in the input, is found
  by search. (Were a counter not monotone, the result would still fit and, with one item more,
  would not; but it might keep fewer items than such a loop.) `size(k)`: candidate `k`'s length
  in characters, cheap; it only schedules the probes.
  """
  unfit = -1  # fits(unfit) is false, unfit < fit; -1 while no candidate is known not to fit
  if size(0) <= _MOST_CHARS_PER_TOKEN_TRIED_WHOLE * max_tokens:
    if fits(0):
      return 0  # the usual case, in one tokenization
    unfit = 0
  if unfit == most or not fits(most):
    return None
  fit = most
  # From the shortest candidate, each probe at least twice as long as the last that fit: a long
  # input with a short budget costs a few candidates about the budget's size, and these probes
  # together cost about twice the last one.
  while fit - unfit > 1:
    probe = fit - 1
    while probe > unfit + 1 and size(probe) <= 2 * size(fit):
      probe -= 1
    if not fits(probe):
      unfit = probe
      break
    fit = probe
  # Bisection between: log(items) probes, none longer than the first that did not fit.
  while fit - unfit > 1:
    middle = (fit + unfit) // 2
    if fits(middle):
      fit = middle
    else:
      unfit = middle
  return fit


def _kept_around(left: int, right: int, drops: int) -> tuple[int, int]:
  """How many items stay left and right of the centre after `drops` drops from the ends, each
  from the end farther from the centre (the left one when as far), from `left` and `right`.

  The farther end shrinks alone until both are as far; then they alternate, the left first, so
  the left keeps the smaller half.
  """
  remaining = left + right - drops
  kept_left = min(left, max(remaining // 2, remaining - right))
  return kept_left, remaining - kept_left


def trim_middle_paragraphs(text: str, build: Callable[[str], str],
                           count_tokens: Callable[[str], int], max_tokens: int | None) -> str:
  """`build(text)`, dropping whole paragraphs of `text` from its middle until it fits.

  The first and last paragraphs always stay; if they alone do not fit, the result is
  longer than `max_tokens` and the pipeline's final truncation cuts its end.
  """
  if max_tokens is None:
    return build(text)
  paragraphs, separator = split_paragraphs(text)
  total = len(paragraphs)
  starts = [0]  # starts[i]: characters in paragraphs[:i], for the probes' sizes
  for paragraph in paragraphs:
    starts.append(starts[-1] + len(paragraph) + len(separator))

  def kept(drops):
    # Dropping index n // 2 of n paragraphs, over and over, drops a block from the middle: what
    # stays of n = total - drops is the first ceil(n / 2) and the last floor(n / 2).
    n = total - drops
    return n - n // 2, total - n // 2

  def joined(drops):
    head, tail = kept(drops)
    return build(separator.join(paragraphs[:head] + paragraphs[tail:]))
  # The text as given while whole; split and joined once a paragraph goes.
  candidate = lambda drops: joined(drops) if drops else build(text)

  def size(drops):
    head, tail = kept(drops)
    return starts[head] + starts[total] - starts[tail]

  most = max(total - 2, 0)
  drops = _fewest_drops(most, size, lambda k: count_tokens(candidate(k)) <= max_tokens,
                        max_tokens)
  # None: the first and last paragraphs alone do not fit (or the text has no more), joined.
  return joined(most) if drops is None else candidate(drops)


def format_date(created_utc: int) -> str:
  moment = datetime.datetime.fromtimestamp(int(created_utc), tz=datetime.timezone.utc)
  return f"{moment:%B} {moment.day}, {moment.year}"


def advice_inputs_text(subreddit: str, created_utc: int, title: str, situation: str,
                       count_tokens: Callable[[str], int], max_tokens: int | None) -> str:
  """Named fields in order subreddit, date, title, situation; the situation trimmed to fit."""
  head = f"Subreddit: r/{subreddit}\nDate: {format_date(created_utc)}\nTitle: {title}\n"
  return trim_middle_paragraphs(situation, lambda body: f"{head}Situation: {body}",
                                count_tokens, max_tokens)


def dialog_context(conversation: Sequence[str], mask_turn: int, scope: str,
                   count_tokens: Callable[[str], int] | None = None,
                   max_tokens: int | None = None) -> str:
  """The dialog text a TimeDial model sees, with <MASK> turned into the sentinel.

  full: every turn; local: the turns just before and after the masked turn, and it;
  target: the masked turn only (TimeDial §4.2). A context longer than `max_tokens` loses whole
  turns, the one farthest from the masked turn first (the earlier of two as far), so that the
  end-of-input truncation never cuts the masked span away; a masked turn too long alone loses
  words from its ends, the end farther from the mask first.
  """
  if scope not in TIMEDIAL_SCOPES:
    raise ValueError(f"unknown TimeDial scope {scope!r}; expected one of {TIMEDIAL_SCOPES}")
  if not 0 <= mask_turn < len(conversation) or MASK not in conversation[mask_turn]:
    raise ValueError(f"turn {mask_turn} of a {len(conversation)}-turn dialog holds no {MASK}")
  first, last = {"full": (0, len(conversation) - 1),
                 "local": (max(0, mask_turn - 1), min(len(conversation) - 1, mask_turn + 1)),
                 "target": (mask_turn, mask_turn)}[scope]
  # Turn by turn: <MASK> has no newline, so no <MASK> spans the newlines joining turns.
  turns = [turn.replace(MASK, SENTINEL) for turn in conversation[first:last + 1]]
  if max_tokens is None:
    return "\n".join(turns)
  # The candidates, longest first: the turns in scope, then ever fewer of them, the one farther
  # from the masked turn first; then ever fewer words of the masked turn alone, the end farther
  # from the mask first. After k drops of either, those kept either side are _kept_around's.
  centre = mask_turn - first
  turns_around = (centre, len(turns) - 1 - centre)
  turn_drops = sum(turns_around)
  turn_starts = [0]  # turn_starts[i]: characters in turns[:i], for the probes' sizes
  for turn in turns:
    turn_starts.append(turn_starts[-1] + len(turn) + 1)

  def kept_turns(drops):
    before, after = _kept_around(*turns_around, drops)
    return centre - before, centre + after + 1

  masked = turns[centre]

  def word_end(at):  # the word holding masked[at] ends at the next space, or at the turn's end
    space = masked.find(" ", at)
    return len(masked) if space < 0 else space
  # The i-th word left (right) of the mask's starts (ends) at word_starts[i] (word_ends[i]):
  # lists that grow only as far as the probes reach, so a huge turn is never split into words.
  mask_at = masked.index(SENTINEL)
  word_starts, word_ends = [masked.rfind(" ", 0, mask_at) + 1], [word_end(mask_at)]
  words_around = (masked.count(" ", 0, word_starts[0]), masked.count(" ", word_ends[0]))

  def kept_words(drops):  # where the candidate starts and ends in the masked turn
    before, after = _kept_around(*words_around, drops - turn_drops)
    while len(word_starts) <= before:
      word_starts.append(masked.rfind(" ", 0, word_starts[-1] - 1) + 1)
    while len(word_ends) <= after:
      word_ends.append(word_end(word_ends[-1] + 1))
    return word_starts[before], word_ends[after]

  def candidate(drops):
    if drops <= turn_drops:
      return "\n".join(turns[slice(*kept_turns(drops))])
    return masked[slice(*kept_words(drops))]

  def size(drops):
    if drops <= turn_drops:
      head, tail = kept_turns(drops)
      return turn_starts[tail] - turn_starts[head]
    start, end = kept_words(drops)
    return end - start

  most = turn_drops + sum(words_around)
  drops = _fewest_drops(most, size, lambda k: count_tokens(candidate(k)) <= max_tokens,
                        max_tokens)
  return candidate(most if drops is None else drops)


NEWS_FORMATS = ("supervised", "transfer")


@gin.configurable
def news_format(setting: str = "supervised") -> str:
  """How a CNN/DM article (a record without subreddit) is queried; Stiennon et al. Table 4 (B.2).

  'supervised': `Article: {article}\n\nTL;DR:`, the format of a model trained on CNN/DM;
  'transfer': `{article}\n\nTL;DR:`, a TL;DR model applied to news. Asked when a dataset is
  built, as `vocab.get_vocabulary`: the tasks register at import, before gin parses.
  """
  if setting not in NEWS_FORMATS:
    raise ValueError(f"news_format.setting must be one of {NEWS_FORMATS}, got {setting!r}")
  return setting


def summary_inputs_text(subreddit: str, title: str, post: str,
                        count_tokens: Callable[[str], int], max_tokens: int | None,
                        news: str = "supervised") -> str:
  """Stiennon et al.'s query (Table 4, B.2), the post cut at its last newline (else word) that fits.

  A Reddit post: `SUBREDDIT: r/{subreddit}\n\nTITLE: {title}\n\nPOST: {post}\n\nTL;DR:`;
  a news article (no subreddit) in the `news` format of `news_format`.
  """
  def build(body):
    if not subreddit:
      return f"{'Article: ' if news == 'supervised' else ''}{body}\n\nTL;DR:"
    fields = [("SUBREDDIT", f"r/{subreddit}"), ("TITLE", title), ("POST", body)]
    return "".join(f"{name}: {value}\n\n" for name, value in fields if value) + "TL;DR:"
  post = post.strip()
  if max_tokens is None or count_tokens(build(post)) <= max_tokens:
    return build(post)

  def fits(cut):
    return count_tokens(build(post[:cut].rstrip())) <= max_tokens

  for separator in ("\n", " "):
    cuts = [m.start() for m in re.finditer(re.escape(separator), post)]
    # A longer prefix never has fewer tokens: the last cut that fits is found by bisection, in
    # log(cuts) tokenizations instead of one per cut (a long post at a short length took seconds).
    low, high = 0, len(cuts)  # cuts[:low] fit, cuts[high:] do not
    while low < high:
      middle = (low + high) // 2
      if fits(cuts[middle]):
        low = middle + 1
      else:
        high = middle
    if low:
      return build(post[:cuts[low - 1]].rstrip())
  return build("")


def _max_text_tokens(sequence_length, key="inputs") -> int | None:
  if not sequence_length or sequence_length.get(key) is None:
    return None
  return sequence_length[key] - 1  # room for EOS


def _py_string(fn, inputs) -> tf.Tensor:
  out = tf.numpy_function(lambda *args: fn(*args).encode("utf-8"), inputs, tf.string,
                          stateful=False)
  out.set_shape([])
  return out


@seqio.map_over_dataset
def advice_inputs(ex, sequence_length, output_features):
  """seqio step: RedditAdvice fields -> `inputs`, trimmed by paragraphs to the inputs length."""
  count = token_counter(output_features["inputs"].vocabulary)
  max_tokens = _max_text_tokens(sequence_length)

  def fn(subreddit, created_utc, title, selftext):
    return advice_inputs_text(_text(subreddit), int(created_utc), _text(title), _text(selftext),
                              count, max_tokens)
  return {**ex, "inputs": _py_string(fn, [ex["subreddit"], ex["created_utc"], ex["title"],
                                          ex["selftext"]])}


@gin.configurable
def timedial_target_format(target_format: str = "span_corruption") -> str:
  """How TimeDial candidates are written; read when a dataset is built (tasks register first).

  TimeDial §4.1.3 scores the masked span with T5, normalised by the span's length. With
  'span_corruption' each candidate is laid out as T5's pre-training targets:
  `<extra_id_0>{span}<extra_id_1>`, i.e. [sentinel 0, span tokens, sentinel 1, EOS] once
  tokenized, and the scorer reads the tokens strictly between the two sentinels. 'plain' is
  the span text alone, then EOS.
  """
  if target_format not in TIMEDIAL_TARGET_FORMATS:
    raise ValueError(f"unknown TimeDial target format {target_format!r}; expected one of "
                     f"{TIMEDIAL_TARGET_FORMATS}")
  return target_format


@seqio.map_over_dataset
def timedial_inputs(ex, scope: str, sequence_length, output_features):
  """seqio step: a masked dialog -> `inputs` in the given scope (turns far from the mask dropped
  to fit the inputs length), candidates in the configured `timedial_target_format`, `targets`
  the first correct one."""
  dialog_context([MASK], 0, scope)  # runs when the map is traced: a bad scope fails at once
  count = token_counter(output_features["inputs"].vocabulary)
  max_tokens = _max_text_tokens(sequence_length)
  candidates = tf.strings.strip(ex["candidates"])  # as the reader does, for prepared TFDS data
  if timedial_target_format() == "span_corruption":
    candidates = tf.strings.join([SENTINEL, candidates, END_SENTINEL])

  def fn(conversation, mask_turn):
    return dialog_context([_text(t) for t in conversation], int(mask_turn), scope, count, max_tokens)
  ex = {**ex, "candidates": candidates}
  return {**ex, "inputs": _py_string(fn, [ex["conversation"], ex["mask_turn"]]),
          "targets": first_correct(ex)}


@seqio.map_over_dataset
def summary_inputs(ex, sequence_length, output_features):
  """seqio step: a summarize-from-feedback post -> the `SUBREDDIT: … TL;DR:` query."""
  count = token_counter(output_features["inputs"].vocabulary)
  max_tokens = _max_text_tokens(sequence_length)
  news = news_format()  # the gin setting, as the dataset is built

  def fn(subreddit, title, post):
    return summary_inputs_text(_text(subreddit), _text(title), _text(post), count, max_tokens, news)
  return {**ex, "inputs": _py_string(fn, [ex["subreddit"], ex["title"], ex["post"]]),
          "targets": first_correct(ex)}


@seqio.map_over_dataset
def cloze_targets(ex):
  """seqio step for items whose `inputs` is already text: `targets` a correct candidate."""
  return {**ex, "targets": first_correct(ex)}


def first_correct(ex: Mapping[str, tf.Tensor]) -> tf.Tensor:
  """The text of the first candidate labelled 1, so a cloze task can also train token CE."""
  return tf.gather(ex["candidates"], tf.argmax(ex["candidate_labels"], output_type=tf.int32))


@seqio.map_over_dataset
def tokenize(ex, output_features, copy_pretokenized: bool = True):
  """seqio.preprocessors.tokenize that also handles rank-2 (candidate list) string features.

  Each candidate is encoded on its own: ByteVocabulary's encode_tf needs equal-length
  strings when given a vector, and the tasks' vocabulary reads sentinel markup in scalars.
  """
  ex = dict(ex)
  for key, feature in output_features.items():
    if key not in ex or isinstance(feature.vocabulary, seqio.PassThroughVocabulary):
      continue
    if copy_pretokenized:
      ex[f"{key}_pretokenized"] = ex[key]
    vocabulary = feature.vocabulary
    if feature.rank == 2:
      ex[key] = tf.map_fn(vocabulary.encode_tf, ex[key],
                          fn_output_signature=tf.RaggedTensorSpec([None], tf.int32))
    else:
      ex[key] = vocabulary.encode_tf(ex[key])
  return ex


def append_eos_after_trim(dataset, output_features, sequence_length=None):
  """seqio's append_eos_after_trim; each candidate is trimmed to the `candidates` length.

  Without a `candidates` length, candidates take the `targets` length (they are decoded like
  targets). seqio's final trim reads an int length of a rank-2 feature as the number of
  candidates, so a `candidates` length must not be below the largest number of candidates.
  """
  lengths = dict(sequence_length or {})
  if "candidates" in output_features and lengths.get("candidates") is None:
    lengths["candidates"] = lengths.get("targets")
  return seqio.preprocessors.append_eos_after_trim(dataset, output_features, lengths or None)
