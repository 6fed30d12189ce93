"""`compile`, `compile-max-autotune`, `compile-reduce-overhead`: torch.compile as a user would set it.

Each is the `compile` transform as a one-step recipe (see transforms/compile.py): decoders get
their decode step compiled (fullgraph, static shapes over the static KV cache) the way gpt-fast
does, with Inductor's coordinate-descent tuning on the GPU; the prompt prefill stays eager and is
reported apart. Being recipes, a peer that wins an optimize run hands its recipe back as the answer.
"""

from __future__ import annotations

from agnitra.bench.variants.base import register_variant
from agnitra.bench.variants.recipe import RecipeVariant
from agnitra.transforms.recipe import Recipe

for _name, _mode in (("compile", "default"), ("compile-max-autotune", "max-autotune"), ("compile-reduce-overhead", "reduce-overhead")):
    register_variant(RecipeVariant(Recipe.of(("compile", {"mode": _mode, "freezing": False})), name=_name))
