"""Built-in benchmark variants; importing this package registers them."""

from agnitra.bench.variants import compile, eager, onnxruntime  # noqa: F401
from agnitra.bench.variants.base import VARIANTS, Prepared, Variant, get_variant, register_variant

__all__ = ["VARIANTS", "Prepared", "Variant", "get_variant", "register_variant"]
