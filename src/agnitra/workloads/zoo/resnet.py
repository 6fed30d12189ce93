"""`resnet50`: our ResNet-50 (agnitra.models.resnet), random calibrated weights, 224x224 images."""

from __future__ import annotations

import torch

from agnitra.models.resnet import PRESETS, ResNet, build_resnet, random_images
from agnitra.workloads.base import TaskKind, Workload
from agnitra.workloads.registry import BuildOptions, count_on_meta, register_workload


def _config(size: str):
    return PRESETS["tiny"] if size == "tiny" else PRESETS["resnet50"]


def count(size: str) -> int:
    return count_on_meta(lambda: ResNet(_config(size)))


@register_workload(
    "resnet50",
    TaskKind.CLASSIFIER,
    "ResNet-50 written in the project (no torchvision), 224x224, 1000 classes, BN calibrated",
    count,
)
def _build(options: BuildOptions) -> Workload:
    cfg = _config(options.size)
    dtype = options.pick_dtype(torch.float16)
    batch = options.batch or 1
    model = build_resnet(cfg, options.device, dtype, seed=options.seed)

    def images(seed: int) -> tuple:
        # [B, 3, H, W] standard-normal images (what normalised real images look like to the net)
        return (random_images(batch, cfg.image_size, seed, options.device, dtype, cfg.in_channels),)

    return Workload(
        name="resnet50",
        model=model,
        example_inputs=images(options.seed),
        task=TaskKind.CLASSIFIER,
        batch=batch,
        item_unit="images",
        description=(
            f"ResNet-50 ({'-'.join(map(str, cfg.blocks))} bottlenecks, width {cfg.width}), "
            f"{cfg.image_size}x{cfg.image_size}, {cfg.num_classes} classes"
        ),
        make_inputs=images,
        hints={"config": cfg.to_dict()},
        weights="random",
    )
