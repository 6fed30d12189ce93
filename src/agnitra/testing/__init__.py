"""Conformance suites shipped with Agnitra: any transform or search strategy, ours or a user's,
can prove it keeps the contracts the optimizer relies on (as Optuna ships one for samplers).

    from agnitra.testing import check_transform, check_strategy
    check_transform(get_transform("my-transform"), workload, device)   # raises AssertionError naming what broke
"""

from agnitra.testing.strategies import check_strategy
from agnitra.testing.transforms import check_transform, model_state

__all__ = ["check_strategy", "check_transform", "model_state"]
