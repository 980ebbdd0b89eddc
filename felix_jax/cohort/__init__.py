"""The cohort engine: vectorized local training and evaluation of many clients."""

from .buckets import Bucket, executed_work, ladder_ceil, next_pow2, padding_waste, plan_buckets
from .config import LocalEvalConfig, LocalTrainConfig
from .engine import CohortEngine, CohortEvalOutput, CohortTrainOutput
from .evaluate import HeldOutMetrics, evaluate, evaluate_hits, evaluate_many, evaluate_weighted
from .local import EvalResult, TrainResult, local_eval, local_train
from .plan import ExecutionPlan, auto_plan, cohort_scan
from .stats import LossStats, statistical_utility
from .store import DeltaStore, VersionStore

__all__ = [
    "Bucket", "executed_work", "ladder_ceil", "next_pow2", "padding_waste", "plan_buckets", "LocalEvalConfig", "LocalTrainConfig",
    "CohortEngine", "CohortEvalOutput", "CohortTrainOutput", "HeldOutMetrics", "evaluate", "evaluate_hits", "evaluate_many", "evaluate_weighted",
    "EvalResult", "TrainResult", "local_eval", "local_train", "ExecutionPlan", "auto_plan", "cohort_scan",
    "LossStats", "statistical_utility", "VersionStore", "DeltaStore",
]
