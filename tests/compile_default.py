"""A test transform: torch.compile with its default parameters only, one candidate where compile's
own CPU choices (modes x freezing, with precisions) compiled up to 18 graphs (120 s of CPU on a cold
Inductor cache, as in CI). Tests that need a compiled recipe, not the compile search, use it."""

from __future__ import annotations

from agnitra.transforms.base import TRANSFORMS, Transform, register_transform

COMPILE_DEFAULT = "test-compile-default"


class _CompileDefault(Transform):
    name = COMPILE_DEFAULT
    stage = "runtime"
    description = "torch.compile, default parameters"

    def apply(self, model, ctx, params):
        compile_ = TRANSFORMS["compile"]
        return compile_.apply(model, ctx, compile_.default_params())


if COMPILE_DEFAULT not in TRANSFORMS:
    register_transform(_CompileDefault)
