"""Function-preserving permutations (`transforms.permutation`): on the zoo's decoder (grouped-query
attention, a KV cache, a gated MLP, the residual stream from the embedding to the LM head), an
encoder (attention heads, MLP hidden units), a convnet (channels with their BatchNorm) and a user's
model, every free space takes a random permutation and the outputs stay what they were; what
cannot move is frozen with its reason."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from agnitra import api
from agnitra.transforms.permutation.apply import permute_weights, random_orders
from agnitra.transforms.permutation.spaces import find_spaces


class GatedUser(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(16)
        self.gate, self.up, self.down = nn.Linear(16, 24), nn.Linear(16, 24), nn.Linear(24, 16)
        self.head = nn.Linear(16, 3)

    def forward(self, x):
        h = self.norm(x)
        return self.head(x + self.down(torch.nn.functional.silu(self.gate(h)) * self.up(h)))


def _zoo(name, **options):
    workload, _ = api.prepare_workload(name, device="cpu", **options)
    return workload.model, tuple(workload.example_inputs)


CASES = {
    "tinylm": lambda: _zoo("zoo:tinylm", size="tiny"),
    "minilm": lambda: _zoo("zoo:minilm"),
    "resnet": lambda: _zoo("zoo:resnet50", size="tiny"),
    "user": lambda: (GatedUser().eval(), (torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(0)),)),
}


@pytest.fixture(scope="module", params=list(CASES))
def case(request):
    torch.manual_seed(0)
    model, inputs = CASES[request.param]()
    return request.param, model, inputs, find_spaces(model, inputs)


def _out(model, inputs):
    with torch.no_grad():
        out = model(*inputs)
    return out if isinstance(out, torch.Tensor) else out[0]


def test_every_free_space_permuted_at_once_computes_the_same(case):
    name, model, inputs, spaces = case
    before = {k: v.clone() for k, v in model.state_dict().items()}
    moved_model = copy.deepcopy(model)
    assert permute_weights(moved_model, spaces, random_orders(spaces, seed=1)) > 0
    reference, permuted = _out(model, inputs), _out(moved_model, inputs)
    assert torch.allclose(reference, permuted, rtol=1e-4, atol=1e-5 * reference.abs().max().item()), (reference - permuted).abs().max()
    assert any(not torch.equal(before[k], v) for k, v in moved_model.state_dict().items())  # weights really moved
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())  # the original untouched


EXPECTED = {  # an axis of each kind that must be free, per model
    "tinylm": ["layers.0.feed_forward.w2.weight:1", "tok_embeddings.weight:1", "layers.1.attention.kv_cache.v_cache:3"],
    "minilm": ["bert.encoder.layer.0.intermediate.dense.weight:0"],
    "resnet": ["stages.0.0.reduce.1.running_mean:0"],
    "user": ["down.weight:1", "gate.weight:0", "up.bias:0"],
}


def test_each_kind_of_space_is_found(case):
    name, model, inputs, spaces = case
    for spec in EXPECTED[name]:
        axis, dim = spec.rsplit(":", 1)
        space = spaces.of_axis(axis, int(dim))
        assert space is not None and space.free, (spec, space and space.frozen)
    if name == "tinylm":  # the residual stream runs from the embedding to the LM head
        stream = spaces.of_axis("tok_embeddings.weight", 1)
        assert spaces.of_axis("output.weight", 1) is stream and spaces.of_axis("layers.1.feed_forward.w2.weight", 0) is stream
        kv_heads = spaces.of_axis("layers.0.attention.kv_cache.k_cache", 1)
        assert kv_heads.free and kv_heads.size == 2 and spaces.of_axis("layers.0.attention.kv_cache.v_cache", 1) is kv_heads
    if name == "minilm":  # twelve heads: the query projection's rows are heads x head size
        query = spaces.of_axis("bert.encoder.layer.0.attention.self.query.weight", 0)
        assert [spaces.spaces[f].size for f in query.factors] == [12, 32]


FROZEN = {
    "tinylm": [("tok_embeddings.weight", 0, "rows picked by token ids"), ("output.weight", 0, "outputs")],
    "resnet": [("stem.0.0.weight", 2, "kernel"), ("stem.0.0.weight", 1, "inputs")],
    "minilm": [("bert.embeddings.word_embeddings.weight", 0, "token ids")],
    "user": [("head.weight", 0, "outputs"), ("norm.weight", 0, "inputs")],  # the residual stream is the input itself
}


def test_what_cannot_move_says_why(case):
    name, model, inputs, spaces = case
    for axis, dim, fragment in FROZEN[name]:
        space = spaces.of_axis(axis, dim)
        assert space is not None and not space.free and any(fragment in why for why in space.frozen), (axis, space and space.frozen)
        with pytest.raises(ValueError, match="cannot be permuted"):
            permute_weights(copy.deepcopy(model), spaces, {space.id: torch.randperm(space.size)})


def test_a_permutation_of_one_side_only_changes_the_answer():
    """The check above can fail: rows of a hidden layer moved without the next layer's columns."""
    model, inputs = CASES["user"]()
    moved = copy.deepcopy(model)
    with torch.no_grad():
        moved.gate.weight.copy_(moved.gate.weight[torch.randperm(24, generator=torch.Generator().manual_seed(0))])
    assert not torch.allclose(_out(model, inputs), _out(moved, inputs), atol=1e-4)


def test_not_a_permutation_is_refused():
    model, inputs = CASES["user"]()
    spaces = find_spaces(model, inputs)
    hidden = spaces.of_axis("down.weight", 1)
    with pytest.raises(ValueError, match="not a permutation"):
        permute_weights(model, spaces, {hidden.id: torch.zeros(hidden.size, dtype=torch.long)})
