"""The Workload: a model, its example inputs, its task kind and how its outputs are compared."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Callable

import torch
from torch import nn

from agnitra.pytree import iter_tensors, tensor_leaves  # noqa: F401 - tensor_leaves: where callers import it


class TaskKind(str, Enum):
    LM = "lm"
    ENCODER = "encoder"
    EMBEDDING = "embedding"
    CLASSIFIER = "classifier"
    GENERIC = "generic"


# The comparison each task kind uses unless the workload names another (see agnitra.verify).
DEFAULT_COMPARISON = {
    TaskKind.LM: "logits",
    TaskKind.ENCODER: "rel_error",
    TaskKind.EMBEDDING: "cosine",
    TaskKind.CLASSIFIER: "top1",
    TaskKind.GENERIC: "rel_error",
}


@dataclass
class DecoderSpec:
    """A decoder driven by our static-KV-cache runtime (agnitra.models.generate).

    The model implements `setup_caches(batch, max_seq_len)` and `forward(tokens, input_pos)`;
    the workload's example inputs are one decode step's (tokens [B, 1], input_pos [1]).
    """

    batch: int
    prompt_len: int
    max_new_tokens: int
    vocab_size: int

    @property
    def max_seq_len(self) -> int:
        return self.prompt_len + self.max_new_tokens


@dataclass
class Workload:
    name: str
    model: nn.Module
    example_inputs: tuple
    task: TaskKind
    comparison: str = ""  # name in agnitra.verify.COMPARATORS; "" = the task kind's default
    batch: int = 1
    item_unit: str = "items"  # what one batch element is: items, sequences, images, tokens
    description: str = ""
    # fresh inputs of the same shapes from a seed: for held-out checks and input rotation
    make_inputs: Callable[[int], tuple] | None = None
    # real data for correctness checks (minilm's sentences), same structure as example_inputs
    check_inputs: tuple | None = None
    # classifiers: the true class of each check_inputs row, where known (accuracy is reported)
    check_labels: torch.Tensor | None = None
    decoder: DecoderSpec | None = None
    # facts variants may use (e.g. the ONNX Runtime transformer optimizer's model type)
    hints: dict[str, Any] = field(default_factory=dict)
    source: str = ""  # how it was loaded: zoo:name, path:factory, file.onnx, ...
    # trained (real weights), random (built from a config with seeded random weights), or given
    # (a user's model: Agnitra cannot tell); reports say it beside every quality figure
    weights: str = "given"
    # decoders with held-out text: window i -> (prompt [B, prompt_len], continuation [B, new
    # tokens]); verification then teacher-forces real text and judges held-out perplexity
    text_windows: Callable[[int], tuple] | None = None
    # calibration batch i from data the model was trained on, never the held-out text it is judged
    # on (tinylm-py: training-corpus windows in prefill form); None: fresh inputs (`inputs(seed)`)
    calibration: Callable[[int], tuple] | None = None
    # what the original model does besides its output (inputs changed in place, values read into
    # Python, state, repeatability): workloads.behaviour, probed once before anything is measured
    behaviour: Any = None

    def __post_init__(self) -> None:
        self.task = TaskKind(self.task)
        if not self.comparison:
            self.comparison = DEFAULT_COMPARISON[self.task]
        if not isinstance(self.example_inputs, tuple):
            self.example_inputs = tuple(self.example_inputs) if isinstance(self.example_inputs, list) else (self.example_inputs,)

    @property
    def verified_by(self) -> str:
        """The comparison a run verifies this workload with: decoders by their logits (held-out
        perplexity where real text is given), others by `comparison`."""
        if self.decoder:
            return "perplexity" if self.text_windows else "logits"
        return self.comparison

    @property
    def device(self) -> torch.device:
        for t in iter_tensors(self.example_inputs):
            return t.device
        for p in self.model.parameters():
            return p.device
        return torch.device("cpu")

    @property
    def dtype(self) -> torch.dtype:
        for p in self.model.parameters():
            if p.is_floating_point():
                return p.dtype
        for t in iter_tensors(self.example_inputs):
            if t.is_floating_point():
                return t.dtype
        return torch.float32

    def inputs(self, seed: int | None = None) -> tuple:
        """Example inputs, or fresh ones of the same shapes when a seed is given: the workload's
        own `make_inputs`, else inputs derived from the example ones (`like_inputs`)."""
        if seed is None:
            return self.example_inputs
        if self.make_inputs is None:
            return like_inputs(self.example_inputs, seed)
        return self.make_inputs(seed)

    def calibration_inputs(self, count: int) -> list[tuple]:
        """`count` batches to gather activation statistics on: the workload's own calibration
        data where it has some, else the example inputs and fresh ones like them."""
        if self.calibration is not None:
            return [self.calibration(i) for i in range(count)]
        return [self.example_inputs] + [self.inputs(seed) for seed in range(1, count)]

    def param_count(self) -> int:
        return sum(p.numel() for p in self.model.parameters())


def like_inputs(example: Any, seed: int, batch: tuple[int, int] | None = None, seq: tuple[int, int] | None = None) -> Any:
    """Fresh inputs like `example`, seeded: same structure, shapes, dtypes and devices.

    Floating tensors get normal values with each tensor's own mean and std, kept within its range
    where the example has one sign (images in [0, 1], positive scales); integer and bool tensors
    get uniform values within the example's [min, max] (token ids stay in the vocabulary), except
    those of two values at most (attention masks, flags, segment ids), whose pattern is their
    meaning: they keep the example's rows (a mask with holes where real padding has none would
    test inputs no caller gives); other leaves are kept. `batch=(old, new)` also resizes dim 0 of
    every tensor whose dim 0 is `old` to `new` (another shape of the same inputs), the kept rows
    taken in turn; `seq=(old, new)` likewise dim 1 of [batch, sequence] tensors.
    """
    generator = torch.Generator().manual_seed(seed)

    def fresh(leaf: Any) -> Any:
        if not isinstance(leaf, torch.Tensor) or leaf.is_complex() or leaf.numel() == 0:
            return leaf
        shape = list(leaf.shape)
        if batch is not None and shape and shape[0] == batch[0]:
            shape[0] = batch[1]
        if seq is not None and len(shape) == 2 and shape[1] == seq[0]:
            shape[1] = seq[1]
        return _values_like(leaf.detach().cpu(), shape, generator).to(leaf.device)

    return torch.utils._pytree.tree_map(fresh, example)


def _values_like(example: torch.Tensor, shape: list[int], generator: torch.Generator) -> torch.Tensor:
    low, high = example.min(), example.max()
    if not example.is_floating_point() and example.unique().numel() <= 2:  # masks, flags: kept
        if not shape:
            return example.clone()
        kept = example[torch.arange(shape[0]) % example.shape[0]]
        return kept[:, torch.arange(shape[1]) % example.shape[1]] if len(shape) == 2 else kept
    if not example.is_floating_point():  # integers and bools: uniform in the example's range
        values = torch.randint(int(low), min(int(high) + 1, torch.iinfo(torch.int64).max), shape, generator=generator)
        return values.to(example.dtype)
    wide = example.double()
    std = wide.std().item() if example.numel() > 1 else 0.0
    values = torch.randn(shape, generator=generator, dtype=torch.float64) * std + wide.mean().item()
    if low >= 0 or high <= 0:  # one sign: keep the example's range
        values = values.clamp(low.item(), high.item())
    return values.to(example.dtype)
