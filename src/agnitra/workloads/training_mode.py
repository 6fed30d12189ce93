"""A model handed over in training mode: Agnitra measures and optimizes an eval-mode copy (the
user's object keeps its mode), and says so where the mode changes what the model computes."""

from __future__ import annotations

from torch import nn

from agnitra.workloads.base import Workload

_WHAT = "the model was in training mode; it was measured{also} in eval mode (dropout off, batch norms on their running statistics): {answer}"


def training_mode_note(model: object, optimized: bool = False) -> str:
    """The note for a live module (or a Workload's) left in training mode whose modules behave
    differently in eval mode (dropout, batch norms tracking running statistics, a dropout rate of
    RNNs, attention layers and transformers' modules); '' otherwise, and for anything else."""
    module = model.model if isinstance(model, Workload) else model
    if not isinstance(module, nn.Module) or not any(_mode_dependent(m) for m in module.modules() if m.training):
        return ""
    if optimized:
        return _WHAT.format(also=" and optimized", answer="the answer is an eval-mode model")
    return _WHAT.format(also="", answer="the figures are an eval-mode model's")


def _mode_dependent(module: nn.Module) -> bool:
    from torch.nn.modules.batchnorm import _BatchNorm
    from torch.nn.modules.dropout import _DropoutNd
    from torch.nn.modules.instancenorm import _InstanceNorm

    if isinstance(module, _DropoutNd):
        return module.p > 0
    if isinstance(module, (_BatchNorm, _InstanceNorm)):
        return bool(module.track_running_stats)
    return any(isinstance(v, float) and v > 0 and "dropout" in k for k, v in vars(module).items())  # nn.RNN, nn.MultiheadAttention, transformers' attention
