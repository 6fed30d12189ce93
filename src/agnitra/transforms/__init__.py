"""Built-in transforms; importing this package registers them."""

from agnitra.transforms import attention, channel_order, compile, conv_fusion, cudagraphs, fuse_projections, layout, onnxruntime, precision, quantize, threads, triton_kernels  # noqa: F401
from agnitra.transforms import mixed_precision  # noqa: F401  (after quantize: it reuses its quantisers)
from agnitra.transforms.base import TRANSFORMS, Transform, TransformContext, all_transforms, get_transform, register_transform
from agnitra.transforms.recipe import Recipe, Step

__all__ = ["TRANSFORMS", "Recipe", "Step", "Transform", "TransformContext", "all_transforms", "get_transform", "register_transform"]
