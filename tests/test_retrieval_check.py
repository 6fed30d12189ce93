"""The retrieval check for embeddings: each real sentence's nearest neighbour, kept or not."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from agnitra import api
from agnitra.bench.variants.recipe import RecipeVariant
from agnitra.errors import UserError
from agnitra.transforms.base import TRANSFORMS, Transform, register_transform
from agnitra.transforms.recipe import Recipe
from agnitra.verify.retrieval import nearest_neighbours, same_nearest_neighbour


class _Noisy(nn.Module):
    """Embeddings with enough seeded noise to reorder neighbours while cosine stays high-ish."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, *args):
        out = self.inner(*args)
        gen = torch.Generator().manual_seed(0)
        return out + 0.08 * torch.randn(out.shape, generator=gen).to(out)


if "test-noisy-embeddings" not in TRANSFORMS:
    register_transform(type("NoisyEmbeddings", (Transform,), {"name": "test-noisy-embeddings", "stage": "runtime", "description": "test: noise",
                                                             "apply": lambda self, model, ctx, params: _Noisy(model)}))


def test_nearest_neighbours_and_what_changed():
    x = torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [0.1, 0.9]])
    assert nearest_neighbours(x).tolist() == [1, 0, 3, 2]
    swapped = x[[0, 1, 3, 2]].clone()
    swapped[0] = torch.tensor([0.1, 0.95])  # row 0 now sits by rows 2 and 3
    result = same_nearest_neighbour(x, swapped)
    assert result["items"] == 4 and result["same_nearest_neighbour"] < 1.0 and 0 in result["changed"]


def test_minilm_reports_retrieval_and_a_noisy_candidate_can_be_refused():
    variants = ["eager", RecipeVariant(Recipe.parse("precision(dtype=bf16)")), RecipeVariant(Recipe.of("test-noisy-embeddings"))]
    report = api.benchmark("zoo:minilm", variants=variants, device="cpu", runs=1, warmup=0, op_breakdown=False, batch=8, seq_len=32)  # one run: said, not a crash
    _, bf16, noisy = report.variants
    assert bf16.correctness.details["retrieval"]["items"] == 64
    assert bf16.correctness.details["retrieval"]["same_nearest_neighbour"] >= 0.95
    assert noisy.correctness.details["retrieval"]["same_nearest_neighbour"] < bf16.correctness.details["retrieval"]["same_nearest_neighbour"]


def test_min_retrieval_is_checked_up_front():
    with pytest.raises(UserError, match="--min-retrieval must be a number in"):
        api.optimize("zoo:minilm", device="cpu", min_retrieval=1.5, budget="1m")


def test_a_labelled_classifier_reports_accuracy_beside_top1_agreement():
    from agnitra.workloads.base import TaskKind, Workload

    torch.manual_seed(0)
    x = torch.randn(48, 6)
    labels = (x[:, 0] + x[:, 1] > 0).long() * 2  # the classes the model below tells apart...
    labels[:12] = 1  # ...but a quarter labelled with the class it never picks: accuracy 0.75
    model = nn.Linear(6, 3)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[-2.0, -2.0, 0, 0, 0, 0], [0.0, 0.0, 0, 0, 0, 0], [2.0, 2.0, 0, 0, 0, 0]]))
        model.bias.zero_()
    workload = Workload("toy-classifier", model.eval(), (x[:8],), TaskKind.CLASSIFIER, batch=8, check_inputs=(x,), check_labels=labels)
    report = api.benchmark(workload, variants=["eager", RecipeVariant(Recipe.parse("precision(dtype=bf16)"))], device="cpu", runs=2, warmup=0, op_breakdown=False)
    check = report.variants[1].correctness
    assert check.metric == "top1" and check.details["accuracy"]["labels"] == 48
    assert check.details["accuracy"]["original"] == pytest.approx(0.75)
    assert abs(check.details["accuracy"]["candidate"] - check.details["accuracy"]["original"]) < 0.1
