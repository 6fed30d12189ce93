"""conv-fusion on the CPU: the FX rewrite (BatchNorm folded, ReLU and add+ReLU moved into the conv),
the fused op's CPU path and fake (under torch.compile), layouts, and what it refuses to fuse.
The cuDNN kernels themselves run only on the GPU (benchmarks/results)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from agnitra.errors import NotApplicable
from agnitra.kernels.cudnn_conv import FusedConv2d, fold_batchnorm
from agnitra.transforms import TransformContext, get_transform
from agnitra.transforms.conv_fusion import fuse_conv_epilogues
from agnitra.transforms.patcher import structural_copy
from agnitra.workloads.registry import BuildOptions, build_workload

CUDA = torch.device("cuda")  # only for check(): nothing here touches a GPU


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-12)).item()


def _bn(c: int, seed: int) -> nn.BatchNorm2d:
    gen = torch.Generator().manual_seed(seed)
    bn = nn.BatchNorm2d(c)
    with torch.no_grad():
        bn.weight.uniform_(0.5, 1.5, generator=gen)
        bn.bias.normal_(0, 0.3, generator=gen)
        bn.running_mean.normal_(0, 0.3, generator=gen)
        bn.running_var.uniform_(0.5, 2.0, generator=gen)
    return bn.eval()


class Block(nn.Module):
    """conv-bn-relu, conv-bn (+ a second use), conv-bn + x -> relu, conv-bn + 1.0 -> relu."""

    def __init__(self) -> None:
        super().__init__()
        self.c1, self.b1 = nn.Conv2d(4, 8, 3, padding=1, bias=False), _bn(8, 1)
        self.c2, self.b2 = nn.Conv2d(8, 8, 1), _bn(8, 2)
        self.c3, self.b3 = nn.Conv2d(8, 8, 3, padding=1, bias=False), _bn(8, 3)
        self.c4, self.b4 = nn.Conv2d(8, 8, 1, bias=False), _bn(8, 4)

    def forward(self, x):
        y = F.relu(self.b1(self.c1(x)))
        z = self.b2(self.c2(y))
        w = torch.relu(self.b3(self.c3(z)) + y)
        v = self.b4(self.c4(w)) + 1.0
        return v.relu() + z.mean()


@pytest.fixture(scope="module")
def resnet():
    return build_workload("resnet50", BuildOptions(size="tiny"))


def test_resnet_every_batchnorm_folded_relu_and_residual_in_the_conv(resnet):
    model = resnet.model
    bn_weights = [m.weight for m in model.modules() if isinstance(m, nn.BatchNorm2d)]
    gm, counts = fuse_conv_epilogues(structural_copy(model))
    with torch.no_grad():
        expected, got = model(*resnet.example_inputs), gm(*resnet.example_inputs)

    assert dict(counts) == {"batchnorm": 53, "relu": 33, "add_relu": 16}  # 1 stem + 16 blocks x 2 relus; 16 block tails
    assert _rel(got, expected) < 1e-5
    assert not any(isinstance(m, nn.BatchNorm2d) for m in gm.modules())
    assert sum(isinstance(m, FusedConv2d) and m.relu for m in gm.modules()) == 49
    # the user's model keeps its BatchNorms and weights
    assert [m.weight for m in model.modules() if isinstance(m, nn.BatchNorm2d)] == bn_weights


def test_only_sole_uses_are_fused():
    model = Block().eval()
    x = torch.randn(2, 4, 9, 7, generator=torch.Generator().manual_seed(0))
    gm, counts = fuse_conv_epilogues(structural_copy(model))
    with torch.no_grad():
        assert _rel(gm(x), model(x)) < 1e-5
    # c2's output is used twice (c3 and the mean) and c4 + 1.0 is not a tensor residual: folded only
    assert dict(counts) == {"batchnorm": 4, "relu": 1, "add_relu": 1}
    assert [m.relu for m in (gm.c1, gm.c2, gm.c3, gm.c4)] == [True, False, True, False]


def test_training_batchnorm_is_left_alone():
    model = Block().eval()
    model.b1.train()
    gm, counts = fuse_conv_epilogues(structural_copy(model))
    assert counts["batchnorm"] == 3 and isinstance(gm.b1, nn.BatchNorm2d)


def test_fold_batchnorm_matches_conv_then_bn_and_keeps_channels_last():
    conv = nn.Conv2d(3, 6, 3, padding=1)
    conv.weight.data = conv.weight.data.contiguous(memory_format=torch.channels_last)
    bn = nn.BatchNorm2d(6, affine=False).eval()
    bn.running_mean.normal_()
    weight, bias = fold_batchnorm(conv, bn)
    x = torch.randn(2, 3, 5, 5)
    with torch.no_grad():
        assert _rel(F.conv2d(x, weight, bias, padding=1), bn(conv(x))) < 1e-5
    assert weight.is_contiguous(memory_format=torch.channels_last) and not weight.is_contiguous()


@pytest.mark.parametrize("layout", [torch.contiguous_format, torch.channels_last])
def test_fused_op_under_compile_matches_eager_and_layout(layout):
    conv = nn.Conv2d(4, 8, 3, padding=1)
    fused = FusedConv2d(conv, conv.weight.detach().contiguous(memory_format=layout), conv.bias.detach(), relu=True)
    x = torch.randn(2, 4, 6, 6).contiguous(memory_format=layout)
    r = torch.randn(2, 8, 6, 6).contiguous(memory_format=layout)
    expected = F.relu(conv(x) + r).detach()
    with torch.no_grad():
        eager = fused(x, r)
        compiled = torch.compile(fused, fullgraph=True)(x, r)
    assert _rel(eager, expected) < 1e-6 and _rel(compiled, expected) < 1e-6
    for out in (eager, compiled):
        assert out.is_contiguous(memory_format=layout)
        assert (out >= 0).all()


def test_transform_reasons(resnet):
    t = get_transform("conv-fusion")
    with pytest.raises(NotApplicable, match="cuDNN"):
        t.check(TransformContext(resnet, torch.device("cpu")), t.default_params())
    t.check(TransformContext(resnet, CUDA), t.default_params())  # applicable on a GPU
    bert = build_workload("bert-base", BuildOptions(size="tiny"))
    with pytest.raises(NotApplicable, match="no Conv2d and BatchNorm2d"):
        t.check(TransformContext(bert, CUDA), t.default_params())


def test_transform_apply_on_the_copy(resnet):
    t = get_transform("conv-fusion")
    copy = structural_copy(resnet.model)
    model = t.apply(copy, TransformContext(resnet, CUDA), t.default_params())
    assert model.agnitra_conv_fusion == {"batchnorm": 53, "relu": 33, "add_relu": 16}
    with torch.no_grad():
        assert _rel(model(*resnet.example_inputs), resnet.model(*resnet.example_inputs)) < 1e-5


def test_untraceable_model_is_not_applicable():
    class Branchy(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv, self.bn = nn.Conv2d(3, 3, 1), _bn(3, 5)

        def forward(self, x):
            return self.bn(self.conv(x)) if x.sum() > 0 else x

    with pytest.raises(NotApplicable, match="torch.fx cannot trace"):
        fuse_conv_epilogues(Branchy().eval())


def test_search_space_fuses_convs_only_with_channels_last(resnet):
    from agnitra.search.space import recipe_space

    allowed = {"conv-fusion", "channels-last", "compile", "cuda-graphs"}
    ranked, _ = recipe_space(TransformContext(resnet, CUDA), allowed=allowed)
    names = [c.recipe.name for c in ranked]
    assert names[0] == "conv-fusion + channels-last + compile(coordinate_descent=True,dynamic=False,freezing=False,mode=reduce-overhead,pdl=True)"
    assert not [n for n in names if "conv-fusion" in n and "channels-last" not in n]
    cpu_names = [c.recipe.name for c in recipe_space(TransformContext(resnet, torch.device("cpu")), allowed=allowed)[0]]
    assert cpu_names and not [n for n in cpu_names if "conv-fusion" in n]
