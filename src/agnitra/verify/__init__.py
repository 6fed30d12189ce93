from agnitra.verify.compare import (
    COMPARATORS,
    NOT_COMPARED,
    Tolerances,
    check_reference,
    compare,
    compare_sets,
    default_threshold,
    exploring_threshold,
    logit_stats,
    relative_error,
    sqnr_db,
)
from agnitra.verify.leaves import StructureMismatch, comparable_leaves, paired_leaves, renest

__all__ = [
    "COMPARATORS",
    "NOT_COMPARED",
    "StructureMismatch",
    "Tolerances",
    "check_reference",
    "comparable_leaves",
    "compare",
    "compare_sets",
    "default_threshold",
    "exploring_threshold",
    "logit_stats",
    "paired_leaves",
    "relative_error",
    "renest",
    "sqnr_db",
]
