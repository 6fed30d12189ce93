from agnitra.verify.compare import COMPARATORS, Tolerances, compare, default_threshold, logit_stats, relative_error, sqnr_db

__all__ = ["COMPARATORS", "Tolerances", "compare", "default_threshold", "logit_stats", "relative_error", "sqnr_db"]
