"""The adversarial zoo: small models that fool a verifier which only echoes the example inputs.

Each case builds a model and example inputs from a seed, and names the inputs its true behaviour is
judged on (`truth`: the other branch, larger values, untouched copies). A verified answer is right
only if it matches the original model there too:

    from agnitra.testing import ADVERSARIAL, wrong_answer
    case = ADVERSARIAL["data-dependent-branch"]
    model, inputs = case.build(seed=0)
    problem = wrong_answer(model, candidate_callable, case.truth(inputs))   # None when right

`verifiable` is False where no answer can be verified at all (the original answers differently
on two calls with the same inputs): then nothing may be reported verified.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import nn

from agnitra.pytree import fresh_copy, tensor_leaves

WIDTH = 16
BATCH = 4
TRUTH_TOLERANCE = 1e-3  # relative L2 error: float32 models, lossless runtimes


@dataclass(frozen=True)
class AdversarialCase:
    name: str
    what: str
    model: Callable[[], nn.Module]
    example: Callable[[torch.Generator], torch.Tensor]  # the example input from a seeded generator
    truth_inputs: Callable[[torch.Tensor], list[torch.Tensor]]  # from the example input
    verifiable: bool = True

    def build(self, seed: int = 0) -> tuple[nn.Module, tuple]:
        torch.manual_seed(seed)
        model = self.model().eval()
        return model, (self.example(torch.Generator().manual_seed(seed)),)

    def truth(self, inputs: tuple) -> list[tuple]:
        return [(x,) for x in self.truth_inputs(inputs[0])]


class DataDependentBranch(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(WIDTH, WIDTH)

    def forward(self, x):
        if x.mean() > 0:
            return self.lin(x) * 2
        return self.lin(x) - 1


class ValueReadScale(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(WIDTH, WIDTH)

    def forward(self, x):
        scale = x.abs().max().item()
        return self.lin(x / scale)


class CondBranch(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(WIDTH, WIDTH)

    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda t: self.lin(t) * 2, lambda t: self.lin(t) - 1, (x,))


class MutatesInput(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(WIDTH, WIDTH)

    def forward(self, x):
        x.mul_(2)
        return self.lin(x)


class BufferState(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(WIDTH, WIDTH)
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x):
        self.calls += 1
        return self.lin(x) + self.calls


class RandomInForward(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(WIDTH, WIDTH)

    def forward(self, x):
        return self.lin(x) + 0.1 * torch.randn_like(x)


class AliasesInput(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(WIDTH, WIDTH)

    def forward(self, x):
        return x, self.lin(x)


class NanOnSomeInputs(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(WIDTH, WIDTH)

    def forward(self, x):
        return self.lin(torch.sqrt(x))


def _positive(generator: torch.Generator) -> torch.Tensor:
    return torch.rand(BATCH, WIDTH, generator=generator) + 0.1


def _one_sign(generator: torch.Generator) -> torch.Tensor:
    """Positive for even seeds, negative for odd ones: each branch is the example's in turn."""
    return _positive(generator) * (-1) ** (generator.initial_seed() % 2)


def _normal(generator: torch.Generator) -> torch.Tensor:
    return torch.randn(BATCH, WIDTH, generator=generator)


def _both_signs(x: torch.Tensor) -> list[torch.Tensor]:
    return [x.clone(), -x, x * 10]


def _positive_ones(x: torch.Tensor) -> list[torch.Tensor]:
    return [x.clone(), x * 10, x + 1]


ADVERSARIAL: dict[str, AdversarialCase] = {case.name: case for case in (
    AdversarialCase("data-dependent-branch", "if x.mean() > 0 picks the computation", DataDependentBranch, _one_sign, _both_signs),
    AdversarialCase("value-read", "a scale read with .item() from the input", ValueReadScale, _one_sign, _both_signs),
    AdversarialCase("torch-cond", "torch.cond on the input's sum", CondBranch, _one_sign, _both_signs),
    AdversarialCase("input-mutation", "x.mul_(2) inside forward", MutatesInput, _normal, _both_signs),
    AdversarialCase("buffer-state", "a buffer counting calls, added to the output", BufferState, _normal, _both_signs, verifiable=False),
    AdversarialCase("random-in-forward", "noise drawn in forward", RandomInForward, _normal, _both_signs, verifiable=False),
    AdversarialCase("aliased-output", "returns its input beside the result", AliasesInput, _normal, _both_signs),
    AdversarialCase("nan-on-some-inputs", "sqrt of the input: NaN on negative values", NanOnSomeInputs, _positive, _positive_ones),
)}


def wrong_answer(original: nn.Module, candidate: Callable[..., Any], truth: list[tuple], tolerance: float = TRUTH_TOLERANCE) -> str | None:
    """How the candidate answers otherwise than the original on the truth inputs (each call on its
    own copies, the inputs as the call leaves them compared too), or None."""
    for i, inputs in enumerate(truth):
        mine, theirs = fresh_copy(inputs), fresh_copy(inputs)
        with torch.no_grad():
            expected = [t.detach().to("cpu", copy=True) for t in tensor_leaves(original(*mine))] + [t.to("cpu") for t in mine]
            got = [t.detach().to("cpu", copy=True) for t in tensor_leaves(candidate(*theirs))] + [t.to("cpu") for t in theirs]
        if len(expected) != len(got):
            return f"truth set {i}: {len(got)} tensors where the original gives {len(expected)}"
        for j, (a, b) in enumerate(zip(expected, got)):
            a, b = a.double(), b.double()
            if a.shape != b.shape:
                return f"truth set {i}, tensor {j}: shape {tuple(b.shape)} where the original gives {tuple(a.shape)}"
            error = ((a - b).norm() / a.norm().clamp_min(1e-12)).item()
            if not error <= tolerance:
                return f"truth set {i}, tensor {j}: relative error {error:.3g}"
    return None
