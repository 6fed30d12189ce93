"""ResNet-50 written in the project (no torchvision): bottleneck blocks, stride on the 3x3 conv.

`ResNetConfig` picks the width and depth (ResNet-50 is stages [3, 4, 6, 3] at width 64, 1000
classes, 224x224 images); `init_resnet` gives random weights under which every layer matters:
kaiming-normal convs, small non-zero gains on the last BatchNorm of every residual branch, running
statistics calibrated on random images so activations neither vanish nor blow up over 50 layers,
and a classifier centred on the calibration features so the top-1 class varies with the input.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import nn

EXPANSION = 4  # a bottleneck's output has 4x the channels of its inner 3x3 conv
RESIDUAL_GAIN = 0.1  # mean gain of the last BatchNorm of each residual branch at init


@dataclass(frozen=True)
class ResNetConfig:
    blocks: tuple[int, ...] = (3, 4, 6, 3)  # bottleneck blocks per stage
    width: int = 64  # channels of the stem and of the first stage's inner convs
    num_classes: int = 1000
    image_size: int = 224
    in_channels: int = 3

    def to_dict(self) -> dict:
        return asdict(self)


PRESETS: dict[str, ResNetConfig] = {
    "resnet50": ResNetConfig(),
    # full depth, every width / 8, small images and few classes: CPU tests of the same code paths
    "tiny": ResNetConfig(width=8, num_classes=16, image_size=64),
}


def conv_bn(c_in: int, c_out: int, kernel: int, stride: int = 1) -> nn.Sequential:
    """A bias-free conv followed by BatchNorm; padding keeps the spatial size at stride 1."""
    return nn.Sequential(
        nn.Conv2d(c_in, c_out, kernel, stride=stride, padding=kernel // 2, bias=False),
        nn.BatchNorm2d(c_out),
    )


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3 (carries the stride), 1x1 expand; projection shortcut when shapes change."""

    def __init__(self, c_in: int, inner: int, stride: int) -> None:
        super().__init__()
        c_out = inner * EXPANSION
        self.reduce = conv_bn(c_in, inner, 1)
        self.spatial = conv_bn(inner, inner, 3, stride)
        self.expand = conv_bn(inner, c_out, 1)
        self.shortcut = conv_bn(c_in, c_out, 1, stride) if stride != 1 or c_in != c_out else nn.Identity()
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x [B, C_in, H, W] -> [B, 4 * inner, H / stride, W / stride]
        y = self.relu(self.reduce(x))
        y = self.relu(self.spatial(y))
        y = self.expand(y)
        return self.relu(y + self.shortcut(x))

    @property
    def last_bn(self) -> nn.BatchNorm2d:
        return self.expand[1]


class ResNet(nn.Module):
    def __init__(self, cfg: ResNetConfig) -> None:
        super().__init__()
        self.cfg = cfg
        w = cfg.width
        self.stem = nn.Sequential(
            conv_bn(cfg.in_channels, w, 7, stride=2),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(kernel_size=3, stride=2, padding=1),
        )
        stages, c_in = [], w
        for i, n_blocks in enumerate(cfg.blocks):
            inner = w * 2**i
            stride = 1 if i == 0 else 2
            blocks = []
            for j in range(n_blocks):
                blocks.append(Bottleneck(c_in, inner, stride if j == 0 else 1))
                c_in = inner * EXPANSION
            stages.append(nn.Sequential(*blocks))
        self.stages = nn.Sequential(*stages)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(c_in, cfg.num_classes)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        # x [B, 3, H, W] -> pooled features [B, C]
        return self.pool(self.stages(self.stem(x))).flatten(1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.features(x))  # [B, num_classes]

    def blocks(self) -> list[Bottleneck]:
        return [m for m in self.modules() if isinstance(m, Bottleneck)]


def random_images(batch: int, image_size: int, seed: int, device, dtype=torch.float32, channels: int = 3) -> torch.Tensor:
    """Standard-normal images [B, C, H, W]: the statistics of normalised real images, roughly."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, channels, image_size, image_size, generator=gen)
    return x.to(device=device, dtype=dtype)


def _init_params(model: ResNet, gen: torch.Generator) -> None:
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.Conv2d):
                # kaiming normal, fan-out, for ReLU
                fan_out = m.out_channels * m.kernel_size[0] * m.kernel_size[1]
                m.weight.normal_(0.0, (2.0 / fan_out) ** 0.5, generator=gen)
            elif isinstance(m, nn.BatchNorm2d):
                # gains around 1 and small biases: no branch is zeroed, every channel differs a little
                m.weight.uniform_(0.5, 1.5, generator=gen)
                m.bias.normal_(0.0, 0.1, generator=gen)
        for block in model.blocks():
            # small, never zero, residual gains: each block still shifts the output visibly, but the
            # stack stays close enough to its identity path that fp16 keeps the fp32 top-1 (a
            # gain of 1 makes a random 50-layer net chaotic: fp16 flipped ~20% of top-1 classes)
            block.last_bn.weight.uniform_(0.5 * RESIDUAL_GAIN, 1.5 * RESIDUAL_GAIN, generator=gen)
        model.fc.weight.normal_(0.0, model.fc.in_features**-0.5, generator=gen)
        model.fc.bias.zero_()


@torch.no_grad()
def _calibrate_bn(model: ResNet, batches: list[torch.Tensor]) -> None:
    """Running statistics as the cumulative average over `batches` (train mode, momentum None)."""
    bns = [m for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    for bn in bns:
        bn.reset_running_stats()
        bn.momentum = None
    model.train()
    for x in batches:
        model(x)
    for bn in bns:
        bn.momentum = 0.1
    model.eval()


@torch.no_grad()
def _calibrate_head(model: ResNet, batches: list[torch.Tensor]) -> None:
    """Centre and scale the classifier so logits vary with the input, with std about 1.

    Post-ReLU pooled features share a large common component; without centring, W @ mean would
    dominate the logits and every random image would get the same top-1 class.
    """
    feats = torch.cat([model.features(x) for x in batches])  # [N, C]
    mean = feats.mean(0)  # [C]
    logits = (feats - mean) @ model.fc.weight.T  # [N, K]
    model.fc.weight.div_(logits.std().clamp_min(1e-6))
    model.fc.bias.copy_(-(model.fc.weight @ mean))


def init_resnet(model: ResNet, seed: int, calib_batches: int = 4, calib_batch_size: int = 8) -> ResNet:
    """Random weights every layer contributes to, BN statistics and head calibrated; eval mode."""
    device = model.fc.weight.device
    gen = torch.Generator(device=device).manual_seed(seed)
    _init_params(model, gen)
    size, channels = model.cfg.image_size, model.cfg.in_channels
    batches = [
        random_images(calib_batch_size, size, seed * 1000 + 7919 + i, device, model.fc.weight.dtype, channels)
        for i in range(calib_batches)
    ]
    _calibrate_bn(model, batches)
    _calibrate_head(model, batches)
    return model


def build_resnet(cfg: ResNetConfig, device: torch.device, dtype: torch.dtype, seed: int = 0) -> ResNet:
    """Build on `device`, initialise and calibrate in fp32, then cast to `dtype`."""
    with torch.device(device):
        model = ResNet(cfg)
    init_resnet(model, seed)
    return model.to(dtype).eval()
