"""Conformance suites shipped with Agnitra: any transform or search strategy, ours or a user's,
can prove it keeps the contracts the optimizer relies on (as Optuna ships one for samplers).

    from agnitra.testing import check_transform, check_strategy
    check_transform(get_transform("my-transform"), workload, device)   # raises AssertionError naming what broke

`ADVERSARIAL` holds models that fool a verifier echoing the example inputs (a data-dependent
branch, an input changed in place, state, randomness, an aliased output, NaN on some inputs), with
`wrong_answer` to judge a verified answer on the inputs that expose them.
"""

from agnitra.testing.adversarial import ADVERSARIAL, AdversarialCase, wrong_answer
from agnitra.testing.strategies import check_strategy
from agnitra.testing.transforms import check_transform, model_state

__all__ = ["ADVERSARIAL", "AdversarialCase", "check_strategy", "check_transform", "model_state", "wrong_answer"]
