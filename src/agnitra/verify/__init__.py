from agnitra.verify.compare import COMPARATORS, compare, default_threshold, logit_stats, relative_error, sqnr_db

__all__ = ["COMPARATORS", "compare", "default_threshold", "logit_stats", "relative_error", "sqnr_db"]
