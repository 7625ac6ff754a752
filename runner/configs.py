"""The settings objects the entry points take, as t5x's `utils.DatasetConfig` and
`CheckpointConfig`: gin binds each once (gin/runs/*.gin) and `train`, `evaluate` and `infer`
receive them whole, so a setting is resolved in one place. The mesh and its rules are the
`partitioning.Partitioner`'s.
"""
import dataclasses
from typing import Any, Callable, Mapping, Sequence


@dataclasses.dataclass(frozen=True)
class DatasetConfig:
  """Which examples, how long and how many at a time.

  Attributes:
    mixture_or_task_name: a registered seqio task or mixture (None: batches come from elsewhere).
    task_feature_lengths: {'inputs': tokens, 'targets': tokens}.
    split: the split read.
    batch_size: rows of one global batch (every process's together).
    seed: the order training reads examples in.
    use_cached: read the task's cached dataset (seqio's cache) instead of its source.
  """
  mixture_or_task_name: str | None
  task_feature_lengths: Mapping[str, int] | None
  split: str
  batch_size: int
  seed: int = 0
  use_cached: bool = False


@dataclasses.dataclass(frozen=True)
class TrainingConfig:
  """What a training run optimises, for how long, and how it reports.

  Attributes:
    steps: the step the run stops at (TRAIN_STEPS; a resumed run counts from its checkpoint).
    objective: 'cross_entropy', or 'pairwise' / 'listwise' for a reward model
      (`trainer.OBJECTIVES`).
    optimizer: an optax transformation; None: `trainer.make_optimizer()` (Adafactor, 1e-3).
    accumulation_steps: microbatches per step.
    z_loss: the auxiliary loss on the softmax normaliser (t5x's 1e-4).
    seed: parameter initialisation and dropout.
    log_every: steps between progress lines (a tenth of a shorter run).
    device_memory_gib: what the preflight's memory plan checks against; None: what the device
      reports.
    compilation_cache_dir: compiled steps kept on disk (process-wide), so a restart skips compiling.
    normalize_reward_task: with a reward objective, a run that reaches `steps` also writes its
      reward model shifted so that this task's references score 0 on average to
      MODEL_DIR/normalized (Stiennon et al. 2020, §3.4).
    normalize_reward_split: the split of those references.
  """
  steps: int
  objective: str = "cross_entropy"
  optimizer: Any = None
  accumulation_steps: int = 1
  z_loss: float = 1e-4
  seed: int = 0
  log_every: int = 50
  device_memory_gib: float | None = None
  compilation_cache_dir: str | None = None
  normalize_reward_task: str | None = None
  normalize_reward_split: str = "train"


@dataclasses.dataclass(frozen=True)
class CheckpointConfig:
  """Where a run starts from and how often it saves (t5x's restore and save configs in one).

  Attributes:
    initial_checkpoint_path: a checkpoint a new run starts from (`checkpoints.load_params` reads
      every kind); None: random parameters. A run with checkpoints of its own resumes from them.
    every: steps between saves; the last step is always saved.
    keep: how many of the latest steps stay on disk.
  """
  initial_checkpoint_path: str | None = None
  every: int = 1000
  keep: int = 3


@dataclasses.dataclass(frozen=True)
class EvaluationConfig:
  """How items are scored and summed up: offline evaluation's, and evaluation during training's.

  Attributes:
    scorer: 'likelihood' or 'reward' (`scorers.SCORERS`); during training the objective decides.
    normalization: a likelihood's normalisation (`models.scoring.NORMALIZATIONS`).
    metric_groups: {group: [task names]} averaged too, or a function of the evaluated task names
      returning it (HEAP's clusters: `t5_tasks.metrics.heap_metric_groups`).
    bucket_by_length: offline evaluation batches items of alike lengths together.
    every: during training, steps between evaluations (and one at the end); 0: none.
    mixture_or_task_name: what training evaluates; None: what it trains on. Offline evaluation
      reads its DatasetConfig's.
    split: the split training evaluates.
    best_metric: '<task or group>/<metric>' by which training keeps its best checkpoint in
      MODEL_DIR/best; None: none kept.
    best_mode: 'max' or 'min' (a tie keeps the earlier step).
    truncated_candidates: candidates longer than their feature length (EOS included): 'score'
      scores them cut, counted and reported; 'refuse' stops before scoring, naming the task
      (`truncation.POLICIES`). Inputs that are cut are counted and reported either way.
  """
  scorer: str = "likelihood"
  normalization: str = "token"
  metric_groups: Mapping[str, Sequence[str]] | Callable | None = None
  bucket_by_length: bool = True
  every: int = 0
  mixture_or_task_name: str | None = None
  split: str = "validation"
  best_metric: str | None = None
  best_mode: str = "max"
  truncated_candidates: str = "score"


@dataclasses.dataclass(frozen=True)
class SamplingConfig:
  """How inference samples (gin/runs/infer.gin: NUM_SAMPLES, TOP_P, TEMPERATURE, SEED,
  REWARD_CHECKPOINT_PATH).

  Attributes:
    num_samples: samples per input.
    top_p: nucleus sampling's threshold (1.0: none; 0: greedy).
    temperature: the logits are divided by it before sampling.
    seed: batch i samples with fold_in(PRNGKey(seed), i).
    reward_checkpoint_path: a reward model; each input then gets best-of-`num_samples`
      (Stiennon et al. 2020, §4.1). None: every sample is kept.
  """
  num_samples: int = 1
  top_p: float = 0.95
  temperature: float = 1.0
  seed: int = 0
  reward_checkpoint_path: str | None = None


@dataclasses.dataclass(frozen=True)
class PPOConfig:
  """Reinforcement learning against a reward model (runner/ppo.py; Stiennon et al. 2020, appendix
  B.1; gin/runs/ppo.gin's macros).

  Attributes:
    policy_checkpoint_path: the supervised policy: the policy starts from it, and the KL penalty
      is measured from it (it stays frozen).
    reward_checkpoint_path: the reward model (normalised: scripts.normalize_reward or a reward
      run's MODEL_DIR/normalized). None only with a programmatic reward handed to `ppo.train`.
    value_checkpoint_path: where the value function starts; None: the reward model (B.1), or,
      without one, the policy's network with a new head.
    kl_coefficient: beta, the KL penalty's weight per token (B.1: 0.05); the start value when
      `kl_target` is set.
    kl_target: None keeps beta fixed (the paper's runs); a number of nats adapts beta towards it
      (Ziegler et al. 2019's controller) over `kl_horizon` episodes.
    kl_horizon: episodes over which the adaptive controller closes the gap.
    epochs: optimisation passes over each batch of rollouts (B.1: 4).
    minibatches: minibatches per epoch (1: each pass is one step on the whole batch).
    gamma, lam: generalised advantage estimation's discount and lambda (B.1: 1 and 0.95).
    clip_range: PPO's ratio clip; value_clip_range: the value's clip around its rollout value.
    value_coefficient: the value loss's weight beside the policy loss.
    temperature: the rollouts' sampling temperature; log-probabilities, ratios and KL are those of
      the logits divided by it.
    best_of_n_max: the largest N of the best-of-N the end-of-run comparison draws.
  """
  policy_checkpoint_path: str
  reward_checkpoint_path: str | None = None
  value_checkpoint_path: str | None = None
  kl_coefficient: float = 0.05
  kl_target: float | None = None
  kl_horizon: int = 10000
  epochs: int = 4
  minibatches: int = 1
  gamma: float = 1.0
  lam: float = 0.95
  clip_range: float = 0.2
  value_clip_range: float = 0.2
  value_coefficient: float = 0.1
  temperature: float = 0.7
  best_of_n_max: int = 64
