"""The generated family: models built from a name, so the cost model has held-out workloads.

`gen:mlp-w512-d4`      a residual MLP: 4 blocks of LayerNorm -> Linear(w, 4w) -> GELU -> Linear(4w, w)
`gen:conv-c32-d3-r32`  a BatchNorm convnet: 3 stages of conv-BN-ReLU pairs starting at 32
                       channels (doubling per stage), on r x r images, pooled into 100 classes
`gen:tfm-d256-l2-h4`   a pre-norm transformer encoder: 2 layers of width 256 with 4 heads (separate
                       q, k, v projections, scaled-dot-product attention, a 4x GELU MLP) over
                       token ids of a 1000-word vocabulary
`gen:lm-d1024-l4-h16`  a Llama-style decoder (`models.llama`: RMSNorm, rotary, grouped-query
                       attention with a quarter of the heads for keys and values, a gated MLP of
                       2.75x the width, a 32000-token vocabulary) as a decode step with a static
                       KV cache, like zoo:llama-1b; --seq-len is the prompt, --tokens the new tokens

--batch sets the batch (default 8; decoders 1) and --seq-len the transformer's sequence (default 64). Weights
are random (seeded), so every quality figure is against the float model, not a task. Each family
is a separate held-out group for the cost model (`family()`), and `designed_sample` spreads a
given number of names over each family's widths and depths.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from agnitra.errors import UserError
from agnitra.workloads.base import TaskKind, Workload
from agnitra.workloads.registry import BuildOptions

PREFIX = "gen:"
VOCAB = 1000
CLASSES = 100
PATTERNS = {
    "mlp": re.compile(r"^mlp-w(\d+)-d(\d+)$"),
    "conv": re.compile(r"^conv-c(\d+)-d(\d+)-r(\d+)$"),
    "tfm": re.compile(r"^tfm-d(\d+)-l(\d+)-h(\d+)$"),
    "lm": re.compile(r"^lm-d(\d+)-l(\d+)-h(\d+)$"),
}
DECODER_VOCAB = 32000
GRAMMAR = "gen:mlp-wWIDTH-dDEPTH, gen:conv-cCHANNELS-dSTAGES-rRESOLUTION, gen:tfm-dWIDTH-lLAYERS-hHEADS or gen:lm-dWIDTH-lLAYERS-hHEADS"
LIMITS = {"width": (8, 8192), "depth": (1, 48), "channels": (4, 512), "resolution": (8, 512), "heads": (1, 64)}


@dataclass(frozen=True)
class Shape:
    family: str
    width: int  # mlp/tfm width, conv's first channels
    depth: int  # blocks, stages or layers
    extra: int = 0  # conv: resolution; tfm, lm: heads


def parse(name: str) -> Shape:
    """The shape a generated name describes, or a one-line error with the grammar."""
    body = name[len(PREFIX):] if name.startswith(PREFIX) else name
    for family, pattern in PATTERNS.items():
        match = pattern.match(body)
        if match:
            numbers = [int(g) for g in match.groups()]
            shape = Shape(family, numbers[0], numbers[1], numbers[2] if len(numbers) > 2 else 0)
            _check(shape, name)
            return shape
    raise UserError(f"'{name}' is not a generated workload name; use {GRAMMAR}")


def family(name: str) -> str:
    """The family a workload name belongs to (`gen:mlp-...` -> `gen:mlp`; others: the name)."""
    return PREFIX + parse(name).family if name.startswith(PREFIX) else name


def _check(shape: Shape, name: str) -> None:
    low, high = LIMITS["channels" if shape.family == "conv" else "width"]
    if not low <= shape.width <= high:
        raise UserError(f"{name}: width {shape.width} is outside {low}-{high}; choose another")
    low, high = LIMITS["depth"]
    if not low <= shape.depth <= high:
        raise UserError(f"{name}: depth {shape.depth} is outside {low}-{high}; choose another")
    if shape.family == "conv" and not LIMITS["resolution"][0] <= shape.extra <= LIMITS["resolution"][1]:
        raise UserError(f"{name}: resolution {shape.extra} is outside {LIMITS['resolution'][0]}-{LIMITS['resolution'][1]}; choose another")
    if shape.family in ("tfm", "lm") and (shape.extra < 1 or shape.width % shape.extra):
        raise UserError(f"{name}: width {shape.width} does not split into {shape.extra} heads; choose heads that divide the width")
    if shape.family == "lm" and (shape.width // shape.extra) % 2:
        raise UserError(f"{name}: a head of width {shape.width // shape.extra} is odd (rotary embeddings need pairs); choose fewer heads")


# ---- the models -----------------------------------------------------------------------------------


class MLPBlock(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(F.gelu(self.up(self.norm(x))))


class MLP(nn.Module):
    def __init__(self, width: int, depth: int) -> None:
        super().__init__()
        self.blocks = nn.Sequential(*[MLPBlock(width) for _ in range(depth)])
        self.head = nn.Linear(width, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(x))


class ConvNet(nn.Module):
    def __init__(self, channels: int, stages: int) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        c_in = 3
        for stage in range(stages):
            c_out = channels * 2**stage
            for i in range(2):
                layers += [nn.Conv2d(c_in if i == 0 else c_out, c_out, 3, stride=2 if (i == 0 and stage) else 1, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU()]
            c_in = c_out
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(c_in, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).mean((2, 3)))


class Attention(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (nn.Linear(width, width) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, w = x.shape
        split = lambda t: t.view(b, s, self.heads, w // self.heads).transpose(1, 2)  # noqa: E731
        y = F.scaled_dot_product_attention(split(self.q_proj(x)), split(self.k_proj(x)), split(self.v_proj(x)))
        return self.out_proj(y.transpose(1, 2).reshape(b, s, w))


class EncoderLayer(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.attention = Attention(width, heads)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class Encoder(nn.Module):
    def __init__(self, width: int, layers: int, heads: int, max_len: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, width)
        self.position = nn.Parameter(torch.randn(max_len, width) * 0.02)
        self.layers = nn.ModuleList(EncoderLayer(width, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(width)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens) + self.position[: tokens.shape[1]]
        for layer in self.layers:
            x = layer(x)
        return self.norm(x)


# ---- the workload ---------------------------------------------------------------------------------


def build(name: str, options: BuildOptions) -> Workload:
    """The generated workload `name` (with its `gen:` prefix) on options.device."""
    shape = parse(name)
    if shape.family == "lm":
        return _decoder(name, shape, options)
    if options.tokens is not None:
        raise UserError(f"--tokens does not apply to {name}: it is not a decoder; drop --tokens")
    if options.size != "full":
        raise UserError(f"--size does not apply to {name}: its name gives its size; drop --size")
    batch = options.batch or 8
    dtype = options.pick_dtype(torch.float16)
    torch.manual_seed(options.seed)
    device = options.device
    if shape.family == "mlp":
        if options.seq_len is not None:
            raise UserError(f"--seq-len does not apply to {name}: an MLP takes one vector per item; drop --seq-len")
        model = MLP(shape.width, shape.depth)
        make = lambda seed: (_normal((batch, shape.width), seed, device, dtype),)  # noqa: E731
        task, unit, described = TaskKind.CLASSIFIER, "items", f"residual MLP, {shape.depth} blocks of width {shape.width} (4x hidden)"
    elif shape.family == "conv":
        if options.seq_len is not None:
            raise UserError(f"--seq-len does not apply to {name}: it classifies images; drop --seq-len")
        model = ConvNet(shape.width, shape.depth)
        make = lambda seed: (_normal((batch, 3, shape.extra, shape.extra), seed, device, dtype),)  # noqa: E731
        task, unit, described = TaskKind.CLASSIFIER, "images", f"BatchNorm convnet, {shape.depth} stages from {shape.width} channels, {shape.extra}x{shape.extra} images"
    else:
        seq = options.seq_len or 64
        model = Encoder(shape.width, shape.depth, shape.extra, max(seq, 512))
        make = lambda seed: (torch.randint(0, VOCAB, (batch, seq), generator=torch.Generator().manual_seed(seed)).to(device),)  # noqa: E731
        task, unit, described = TaskKind.ENCODER, "sequences", f"transformer encoder, {shape.depth} layers of width {shape.width}, {shape.extra} heads, {seq} tokens"
    _calibrate(model, make(options.seed + 1))
    model = model.to(device=device, dtype=dtype).eval()
    return Workload(
        name=name[len(PREFIX):], model=model, example_inputs=make(options.seed), task=task, batch=batch, item_unit=unit,
        description=f"generated {described}", make_inputs=make, source=name, weights="random",
        hints={"family": PREFIX + shape.family},
    )


def decoder_config(shape: Shape):
    """The Llama config of a `gen:lm` shape: a quarter of the heads for keys and values (all where
    the heads do not split in four), a gated MLP of about 2.75x the width in multiples of 64."""
    from agnitra.models.llama import LlamaConfig

    kv_heads = shape.extra // 4 if shape.extra % 4 == 0 else shape.extra
    ffn = max(64, 64 * round(shape.width * 2.75 / 64))
    return LlamaConfig(vocab_size=DECODER_VOCAB, dim=shape.width, n_layers=shape.depth, n_heads=shape.extra, n_kv_heads=kv_heads, ffn_dim=ffn)


def _decoder(name: str, shape: Shape, options: BuildOptions) -> Workload:
    from agnitra.workloads.zoo.llama import build_decoder

    if options.size != "full":
        raise UserError(f"--size does not apply to {name}: its name gives its size; drop --size")
    return build_decoder(name[len(PREFIX):], decoder_config(shape), options, source=name, hints={"family": PREFIX + shape.family})


def _normal(shape: tuple[int, ...], seed: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(device=device, dtype=dtype)


def _calibrate(model: nn.Module, inputs: tuple) -> None:
    """BatchNorm statistics from one pass in float32 on the CPU, so activations keep their scale."""
    if any(isinstance(m, nn.BatchNorm2d) for m in model.modules()):
        model.train()
        with torch.no_grad():
            model(*(t.cpu().float() if t.is_floating_point() else t.cpu() for t in inputs))
    model.eval()


def designed_sample(count: int, seed: int = 0, families: tuple[str, ...] = ("mlp", "conv", "tfm")) -> list[str]:
    """`count` generated names spread over each family's widths and depths: a Latin-hypercube
    draw per family over log-width and depth, so a sample of ten covers small and large."""
    rng = random.Random(seed)
    names: list[str] = []
    per_family = [count // len(families) + (i < count % len(families)) for i in range(len(families))]
    for fam, n in zip(families, per_family):
        cells = [(rng.sample(range(n), n), rng.sample(range(n), n))] if n else []
        for i in range(n):
            u, v = (cells[0][0][i] + rng.random()) / n, (cells[0][1][i] + rng.random()) / n
            names.append(_name(fam, u, v, rng))
    return list(dict.fromkeys(names))


def _name(fam: str, u: float, v: float, rng: random.Random) -> str:
    if fam == "mlp":
        return f"{PREFIX}mlp-w{_pow2(128, 2048, u)}-d{1 + int(v * 6)}"
    if fam == "conv":
        return f"{PREFIX}conv-c{_pow2(8, 64, u)}-d{1 + int(v * 4)}-r{rng.choice((32, 64, 96))}"
    if fam == "lm":
        width = _pow2(256, 2048, u)
        return f"{PREFIX}lm-d{width}-l{1 + int(v * 8)}-h{max(1, width // 64)}"
    width = _pow2(64, 1024, u)
    return f"{PREFIX}tfm-d{width}-l{1 + int(v * 6)}-h{max(1, width // 64)}"


def _pow2(low: int, high: int, u: float) -> int:
    """A power of two between low and high, log-uniform in u."""
    lo, hi = math.log2(low), math.log2(high)
    return 2 ** round(lo + u * (hi - lo))
