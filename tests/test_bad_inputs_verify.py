"""Bad inputs to verification: outputs of every structure, compared leaf by leaf.

Each model below returns one kind of output (a list of floats, a float, a dict, nested tuples, a
transformers ModelOutput, integers, strings, None, ...). A copy of the model must pass; a
candidate that changes one leaf, or the structure, must fail with the path of that leaf; an
output with nothing to compare is never reported as passed.
"""

from __future__ import annotations

import pytest
import torch
from transformers.modeling_outputs import SequenceClassifierOutput

from test_verification_verifies import EXAMPLE, Wrapped, bench, device_report  # noqa: F401 (fixture)


class Returns(torch.nn.Module):
    """A model whose forward is `fn(x, weight)`."""

    def __init__(self, fn) -> None:
        super().__init__()
        self.fn = fn
        self.weight = torch.nn.Parameter(torch.randn(8, 3, generator=torch.Generator().manual_seed(0)))

    def forward(self, x):
        return self.fn(x, self.weight)


# (id, model output, a one-leaf change, the reason the changed candidate fails with: counts are
# over the three held-out sets)
LEAF_CASES = [
    ("list of floats", lambda x, w: [float(x.sum()), float(x.abs().mean())],
     lambda out, x: [out[0], out[1] * 1.5], "output[1]: rel_error 0.5 > 0.001"),
    ("a float", lambda x, w: float((x @ w).abs().sum()),
     lambda out, x: out + 1e-2 * abs(out), "output: rel_error 0.01 > 0.001"),
    ("a dict", lambda x, w: {"logits": x @ w, "parts": (x.sum(-1), x.mean())},
     lambda out, x: {"logits": out["logits"], "parts": (out["parts"][0] * 1.5, out["parts"][1])}, "output['parts'][0]: rel_error 0.5 > 0.001"),
    ("nested tuples", lambda x, w: ((x @ w, (x * 3,)), x.mean()),
     lambda out, x: ((out[0][0], (out[0][1][0] * 1.5,)), out[1]), "output[0][1][0]: rel_error 0.5 > 0.001"),
    ("a ModelOutput", lambda x, w: SequenceClassifierOutput(logits=x @ w, hidden_states=(x, x * 2)),
     lambda out, x: SequenceClassifierOutput(logits=out.logits, hidden_states=(out.hidden_states[0], out.hidden_states[1] * 1.5)),
     "output['hidden_states'][1]: rel_error 0.5 > 0.001"),
    ("integers", lambda x, w: (x @ w, (x @ w).argmax(-1)),
     lambda out, x: (out[0], (out[1] + 1) % 3), "output[1]: 6 of 6 values differ (integer and bool outputs must match exactly)"),
    ("numbers of each kind", lambda x, w: (x @ w, int(x.shape[0]), bool(x.sum() > 0)),
     lambda out, x: (out[0], out[1], not out[2]), "output[2]: 3 of 3 values differ (integer and bool outputs must match exactly)"),
    ("a string beside a tensor", lambda x, w: (x @ w, "ok"),
     lambda out, x: (out[0], "changed"), "output[1]: 'changed' vs reference 'ok'"),
    ("NaN in one leaf", lambda x, w: (x @ w, x * 2),
     lambda out, x: (out[0], out[1] * float("nan")), "output[1]: 48 NaN/Inf values in the output"),
]

# (id, model output, a candidate's different structure, the reason it fails with)
STRUCTURE_CASES = [
    ("None vs a tensor", lambda x, w: (x @ w, None),
     lambda out, x: (out[0], x), "output[1]: a tensor of shape (2, 8) vs reference None"),
    ("a missing key", lambda x, w: {"a": x @ w, "b": x},
     lambda out, x: {"a": out["a"]}, "output: keys differ from the reference's (missing ['b'])"),
    ("another length", lambda x, w: [x @ w, x],
     lambda out, x: [*out, x], "output: 3 items vs reference 2"),
    ("another shape", lambda x, w: {"logits": [x, x @ w]},
     lambda out, x: {"logits": [out["logits"][0], out["logits"][1][:, :2]]}, "output['logits'][1]: shape (2, 2) vs reference (2, 3)"),
    ("a tensor for a list of floats", lambda x, w: [float(x.sum()), float(x.mean())],
     lambda out, x: torch.tensor(out), "output: a tensor of shape (2,) vs reference a list of 2"),
]


@pytest.mark.parametrize("returns, change, reason", [c[1:] for c in LEAF_CASES + STRUCTURE_CASES], ids=[c[0] for c in LEAF_CASES + STRUCTURE_CASES])
def test_each_leaf_is_compared_and_a_wrong_one_named(returns, change, reason, device_report):
    report = bench(Returns(returns), (EXAMPLE,), ["eager", Wrapped("copy"), Wrapped("wrong", change)], device_report)
    same, wrong = report.variant("copy").correctness, report.variant("wrong").correctness
    assert same.passed and same.status == "compared" and same.details["leaves"] >= 1, same
    assert not wrong.passed and wrong.details["error"] == reason
    assert report.variant("wrong").reason == f"verification: {reason}"


@pytest.mark.parametrize("returns", [lambda x, w: None, lambda x, w: ("done", None), lambda x, w: {"note": "ok", "extra": [None]}], ids=["None", "a string and None", "a dict of strings and Nones"])
def test_an_output_with_nothing_to_compare_is_not_passed(returns, device_report):
    report = bench(Returns(returns), (EXAMPLE,), ["eager", Wrapped("copy")], device_report)
    check = report.variant("copy").correctness
    assert check.status == "not compared" and not check.passed and check.value is None
    assert report.variant("copy").reason == "verification: not compared: the output has no tensors or numbers"


def test_an_onnx_runtime_session_is_compared_in_the_models_structure(device_report):
    model = Returns(lambda x, w: {"logits": x @ w, "scaled": (x * 2, None)})
    report = bench(model, (EXAMPLE,), ["eager", "onnxruntime"], device_report)
    ort = report.variant("onnxruntime")
    assert ort.status == "ok", ort.reason
    assert ort.correctness.passed and ort.correctness.details["leaves"] == 2, ort.correctness
