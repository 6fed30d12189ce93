"""`sdpa`: transformers models switched from eager attention to torch's scaled_dot_product_attention.

A transformers model keeps its attention implementation in its `config`, an object the
patcher's structural copy shares with the user's model. Before switching, every config the copy
references (sub-configs included) is replaced by a shallow copy of its own, so the user's model
keeps the implementation it had. `own_configs` is also what other transforms use before they
switch attention temporarily (the ONNX export does).
"""

from __future__ import annotations

import copy
import sys
from typing import Any

from torch import nn

from agnitra.errors import check
from agnitra.transforms.base import Choice, Transform, TransformContext, register_transform

SDPA = "sdpa"
# implementations worth switching; fused kernels (flash_attention_2, flex_attention, ...) stay
SWITCHABLE = ("eager", None)


def _config_classes() -> tuple[type, ...]:
    """transformers' config base class, when transformers is loaded (no model of it otherwise)."""
    tf = sys.modules.get("transformers")
    if tf is None:
        return ()
    return tuple(c for c in (getattr(tf, "PreTrainedConfig", None), getattr(tf, "PretrainedConfig", None)) if isinstance(c, type))


def _is_config(value: Any) -> bool:
    classes = _config_classes()
    return bool(classes) and isinstance(value, classes)


def _copy_config(config: Any, memo: dict[int, Any]) -> Any:
    """A shallow copy of `config` with its sub-configs copied too (shared ones stay shared)."""
    if id(config) in memo:
        return memo[id(config)]
    new = copy.copy(config)
    memo[id(config)] = new
    for key in getattr(config, "sub_configs", None) or ():
        sub = getattr(config, key, None)
        if _is_config(sub):
            object.__setattr__(new, key, _copy_config(sub, memo))  # no validation, no attribute_map
    return new


def own_configs(model: nn.Module) -> int:
    """Give every module of the patcher's copy its own copy of each transformers config it holds.

    Modules that shared a config keep sharing one (the same copy). Returns how many configs were
    copied. The user's model and its configs are not touched.
    """
    memo: dict[int, Any] = {}
    for module in model.modules():
        for name, value in list(vars(module).items()):
            if _is_config(value):
                object.__setattr__(module, name, _copy_config(value, memo))
    return len(memo)


def _attention_holders(model: nn.Module) -> list[nn.Module]:
    """Submodules carrying a transformers config with an attention implementation, outermost first."""
    return [m for m in model.modules() if hasattr(vars(m).get("config"), "_attn_implementation")]


def _implementation(module: nn.Module) -> str | None:
    return vars(module)["config"]._attn_implementation


def _to_switch(model: nn.Module) -> list[nn.Module]:
    return [m for m in _attention_holders(model) if _implementation(m) in SWITCHABLE]


def switch_to_sdpa(model: nn.Module) -> int:
    """Set "sdpa" on every transformers model in `model` (already owning its configs); returns how many."""
    switched = 0
    for module in _to_switch(model):  # outermost first: a model's own switch covers its submodels
        if _implementation(module) not in SWITCHABLE:
            continue  # switched with an enclosing model
        if callable(getattr(module, "set_attn_implementation", None)):
            module.set_attn_implementation(SDPA)
        else:  # older transformers, or a module that only holds the config
            vars(module)["config"]._attn_implementation = SDPA
        switched += 1
    return switched


def _check_switchable(model: nn.Module) -> None:
    holders = _attention_holders(model)
    check(holders, "attention is already scaled_dot_product_attention or not switchable: no submodule carries a transformers config with an attention implementation")
    pending = _to_switch(model)
    if not pending:
        others = sorted({str(_implementation(m)) for m in holders} - {SDPA})
        check(False, f"attention already uses {', '.join(others)}, a fused kernel" if others else "attention is already scaled_dot_product_attention (transformers attn_implementation='sdpa')")
    for module in pending:
        if callable(getattr(module, "set_attn_implementation", None)):
            check(getattr(module, "_supports_sdpa", True), f"{type(module).__name__} has no scaled_dot_product_attention implementation in this transformers version")
        check(not getattr(vars(module)["config"], "output_attentions", False), "the model returns attention weights (output_attentions), which scaled_dot_product_attention does not compute")


@register_transform
class Sdpa(Transform):
    name = "sdpa"
    description = "transformers models from eager attention to torch's scaled_dot_product_attention (fused kernels)"
    requires = "a transformers model on eager attention"
    stage = "module"

    order = 70
    acts_on = frozenset({"attention", "softmax"})

    def choices(self, ctx: TransformContext) -> list[Choice]:
        return [Choice(self.name, (), 1.2)]

    def check(self, ctx: TransformContext, params) -> None:
        _check_switchable(ctx.workload.model)

    def apply(self, model: nn.Module, ctx: TransformContext, params) -> nn.Module:
        own_configs(model)
        switch_to_sdpa(model)
        return model
