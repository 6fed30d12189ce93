"""Runtime, backend and layout transforms on the CPU: onnxruntime, threads, channels-last, sdpa,
cuda-graphs (applicability and its shape check only: no GPU here)."""

from __future__ import annotations

import gc

import pytest
import torch
from torch import nn

from agnitra.errors import NotApplicable, WorkloadError
from agnitra.transforms import Recipe, TransformContext, get_transform
from agnitra.transforms.patcher import apply_recipe, unwrap
from agnitra.transforms.threads import physical_cores
from agnitra.workloads.base import Workload
from agnitra.workloads.registry import BuildOptions, build_workload
from agnitra.workloads.zoo._hf import set_attention

CPU = torch.device("cpu")
CUDA = torch.device("cuda")  # only for check(): nothing here touches a GPU


def _apply(workload: Workload, *steps, device: torch.device = CPU):
    return apply_recipe(Recipe.of(*steps), TransformContext(workload, device))


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-12)).item()


def _reason(transform: str, workload: Workload, device: torch.device = CPU, **params) -> str:
    t = get_transform(transform)
    with pytest.raises(NotApplicable) as info:
        t.check(TransformContext(workload, device), t.parse_params(params))
    return str(info.value)


@pytest.fixture(scope="module")
def bert():
    return build_workload("bert-base", BuildOptions(size="tiny"))


@pytest.fixture(scope="module")
def tinylm():
    return build_workload("tinylm", BuildOptions(size="tiny"))


class TwoHeads(nn.Module):
    """A user model returning a dict with a nested tuple, an int64 tensor and a plain int; `unused` is unused."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(8, 16)
        self.head_a = nn.Linear(16, 4)
        self.head_b = nn.Linear(16, 3)

    def forward(self, x: torch.Tensor, unused: torch.Tensor):
        h = torch.relu(self.body(x))
        a = self.head_a(h)
        return {"scores": a, "pair": (self.head_b(h).softmax(-1), a.argmax(-1)), "version": 3}


@pytest.fixture
def toy() -> Workload:
    torch.manual_seed(0)
    return Workload("toy", TwoHeads().eval(), (torch.randn(2, 8), torch.randn(2, 5)), "generic")


# ---- onnxruntime -------------------------------------------------------------------------------


def _params(model: nn.Module) -> dict[str, int]:
    return {name: id(p) for name, p in model.named_parameters()}


@pytest.mark.parametrize("int8, tolerance", [(False, 1e-4), (True, 5e-2)])
def test_onnxruntime_on_bert_matches_and_leaves_the_user_model_alone(bert, monkeypatch, int8, tolerance):
    params_before = _params(bert.model)
    config_before = bert.model.bert.config
    seen_during_export = []
    real_export = torch.onnx.export

    def spying_export(*args, **kwargs):  # the user's model must not be switched to eager even for a while
        seen_during_export.append(bert.model.bert.config._attn_implementation)
        return real_export(*args, **kwargs)

    monkeypatch.setattr(torch.onnx, "export", spying_export)
    patched = _apply(bert, ("onnxruntime", {"int8": int8}))
    with torch.no_grad():
        expected = bert.model(*bert.example_inputs)
    got = patched.model(*bert.example_inputs)

    assert type(patched.model).__name__ == "OrtBackend"
    assert isinstance(got, torch.Tensor) and got.shape == expected.shape and got.dtype == expected.dtype
    assert _rel(got, expected) < tolerance
    assert any("fused" in n and "Attention" in n for n in patched.model.notes)  # the transformer optimizer ran
    assert seen_during_export and set(seen_during_export) == {"sdpa"}
    assert bert.model.bert.config is config_before and config_before._attn_implementation == "sdpa"
    assert _params(bert.model) == params_before


def test_onnxruntime_keeps_the_output_structure_of_a_user_model(toy):
    patched = _apply(toy, "onnxruntime")
    with torch.no_grad():
        expected = toy.model(*toy.example_inputs)
    got = patched.model(*toy.example_inputs)

    assert set(got) == {"scores", "pair", "version"} and isinstance(got["pair"], tuple) and got["version"] == 3
    assert _rel(got["scores"], expected["scores"]) < 1e-4
    assert _rel(got["pair"][0], expected["pair"][0]) < 1e-4
    assert got["pair"][1].dtype == torch.int64 and torch.equal(got["pair"][1], expected["pair"][1])
    bigger = (torch.randn(5, 8), torch.randn(5, 5))  # batch is dynamic in the export
    assert patched.model(*bigger)["scores"].shape == (5, 4)


def test_onnxruntime_files_go_with_the_module(toy):
    patched = _apply(toy, "onnxruntime")
    workdir = patched.model.session.path.parent
    assert workdir.is_dir()
    del patched
    gc.collect()
    assert not workdir.exists()


def test_onnxruntime_takes_the_thread_count_of_a_threads_wrapper(toy):
    patched = _apply(toy, ("threads", {"count": 1}), "onnxruntime")
    assert type(patched.model).__name__ == "OrtBackend" and type(patched.model.inner).__name__ == "TwoHeads"
    assert patched.model.session.session.get_session_options().intra_op_num_threads == 1
    assert _rel(patched.model(*toy.example_inputs)["scores"], toy.model(*toy.example_inputs)["scores"]) < 1e-4


def test_onnxruntime_after_bf16_precision_is_not_applicable(bert):
    with pytest.raises(NotApplicable, match="bfloat16"):
        _apply(bert, ("precision", {"dtype": "bf16"}), "onnxruntime")


def test_onnxruntime_rejects_decoders_and_int8_on_cuda(tinylm, bert):
    assert "decoder" in _reason("onnxruntime", tinylm)
    assert "CPU" in _reason("onnxruntime", bert, CUDA, int8=True)


# ---- threads -----------------------------------------------------------------------------------


class ThreadProbe(nn.Module):
    def __init__(self, fail: bool = False) -> None:
        super().__init__()
        self.fail = fail
        self.seen: list[int] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.seen.append(torch.get_num_threads())
        if self.fail:
            raise RuntimeError("boom")
        return x + 1


@pytest.fixture
def two_threads():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    yield 2
    torch.set_num_threads(before)


def test_threads_sets_the_count_during_the_call_and_restores_it(two_threads):
    workload = Workload("probe", ThreadProbe(), (torch.zeros(2),), "generic")
    patched = _apply(workload, ("threads", {"count": 1}))
    assert torch.equal(patched.model(torch.zeros(2)), torch.ones(2))
    assert unwrap(patched.model).seen == [1]
    assert torch.get_num_threads() == two_threads


def test_threads_inside_a_whole_traced_graph_leaves_the_count_to_its_caller(two_threads):
    """A decoder's compiled decode step is traced whole (fullgraph): the wrapper's thread calls
    cannot be traced there ('torch.* op returned non-Tensor' failed every compile + threads recipe
    of tinylm), so inside a trace it calls the model as it is."""
    workload = Workload("probe", nn.Linear(4, 4), (torch.zeros(2, 4),), "generic")
    patched = _apply(workload, ("threads", {"count": 1}))
    compiled = torch.compile(lambda x: patched.model(x) * 2, fullgraph=True, backend="eager")
    assert torch.allclose(compiled(torch.ones(2, 4)), patched.model(torch.ones(2, 4)) * 2)
    assert torch.get_num_threads() == two_threads


def test_threads_restores_the_count_after_an_exception(two_threads):
    workload = Workload("probe", ThreadProbe(fail=True), (torch.zeros(2),), "generic")
    patched = _apply(workload, ("threads", {"count": 1}))
    with pytest.raises(RuntimeError, match="boom"):
        patched.model(torch.zeros(2))
    assert unwrap(patched.model).seen == [1]
    assert torch.get_num_threads() == two_threads


def test_threads_default_is_the_physical_cores_and_not_on_cuda(toy):
    patched = _apply(toy, "threads")
    assert patched.model.count == physical_cores() >= 1
    assert "CUDA" in _reason("threads", toy, CUDA)


# ---- channels-last -----------------------------------------------------------------------------


def test_channels_last_on_resnet_same_outputs_weights_in_the_copy_only():
    workload = build_workload("resnet50", BuildOptions(size="tiny"))
    spatial = [m for m in workload.model.modules() if isinstance(m, nn.Conv2d) and m.kernel_size != (1, 1)]
    user_weights = [m.weight for m in spatial]
    patched = _apply(workload, "channels-last")
    with torch.no_grad():
        expected = workload.model(*workload.example_inputs)
        got = patched.model(*workload.example_inputs)

    assert _rel(got, expected) < 1e-5
    copies = [m for m in unwrap(patched.model).modules() if isinstance(m, nn.Conv2d) and m.kernel_size != (1, 1)]
    assert spatial and len(copies) == len(spatial)
    assert all(m.weight.is_contiguous(memory_format=torch.channels_last) and not m.weight.is_contiguous() for m in copies)
    assert all(m.weight is w and w.is_contiguous() and not w.is_contiguous(memory_format=torch.channels_last) for m, w in zip(spatial, user_weights))


def test_channels_last_needs_convolutions(bert):
    assert "no 2-D convolutions" in _reason("channels-last", bert)


# ---- sdpa --------------------------------------------------------------------------------------


def test_sdpa_switches_an_eager_bert_in_the_copy_only():
    workload = build_workload("bert-base", BuildOptions(size="tiny"))
    set_attention(workload.model.bert, "eager")
    user_config = workload.model.bert.config
    patched = _apply(workload, "sdpa")
    copy = unwrap(patched.model).bert

    assert copy.config._attn_implementation == "sdpa"
    assert copy.encoder.layer[0].attention.self.config is copy.config  # the attention layers see the copy's config
    assert workload.model.bert.config is user_config and user_config._attn_implementation == "eager"
    assert workload.model.bert.encoder.layer[0].attention.self.config is user_config
    with torch.no_grad():
        assert _rel(patched.model(*workload.example_inputs), workload.model(*workload.example_inputs)) < 1e-5


def test_sdpa_not_applicable_when_already_sdpa(bert, tinylm):
    assert "already scaled_dot_product_attention" in _reason("sdpa", bert)
    assert "already scaled_dot_product_attention" in _reason("sdpa", tinylm)


# ---- cuda-graphs -------------------------------------------------------------------------------


def test_cuda_graphs_needs_cuda_and_leaves_decoders_to_compile(bert, tinylm):
    assert "CUDA" in _reason("cuda-graphs", bert)
    assert "reduce-overhead" in _reason("cuda-graphs", tinylm, CUDA)


def test_cuda_graphs_capture_a_graph_per_input_shape_up_to_a_limit(monkeypatch):
    """A new shape gets its own graph (as reduce-overhead records one per shape), a known one
    replays its own; past MAX_GRAPHS shapes, and for non-tensor or keyword inputs, the call is
    refused naming what was captured. (Capture itself needs a GPU: a stand-in records it here.)"""
    from agnitra.transforms import cudagraphs

    captures = []

    class _Recorded:
        def __init__(self, inner, args, device, warmup):
            captures.append(args[0].shape[0])
            self.inner = inner

        def replay(self, args):
            return self.inner(*args)

    monkeypatch.setattr(cudagraphs, "_Graph", _Recorded)
    runner = cudagraphs.CudaGraphRunner(nn.Linear(16, 4), (torch.zeros(1, 16),), CPU)
    for batch in (1, 2, 1, 2):
        assert runner(torch.zeros(batch, 16)).shape == (batch, 4)
    assert captures == [1, 2]
    for batch in range(3, cudagraphs.MAX_GRAPHS + 1):
        runner(torch.zeros(batch, 16))
    with pytest.raises(WorkloadError, match=r"captured for 8 input shapes \(1x16 float32; 2x16 float32.*will not capture \(99x16 float32\)"):
        runner(torch.zeros(99, 16))
    with pytest.raises(WorkloadError, match="tensors only; got int"):
        runner(3)
    with pytest.raises(WorkloadError, match="keyword arguments x"):
        runner(x=torch.zeros(1, 16))


class _ClampsWhenNotFinite(nn.Module):
    """What transformers' BART encoder layer does in fp16: a Python `if` on a GPU tensor."""

    def forward(self, x):
        if not torch.isfinite(x).all():  # the host waits for the device here
            x = x.clamp(-1e4, 1e4)
        return x * 2


def test_a_failed_capture_names_the_first_error_and_its_line():
    from agnitra.transforms.cudagraphs import _capture_failure

    def forward():
        raise RuntimeError("CUDA error: operation not permitted when stream is capturing")

    try:
        try:
            forward()
        except RuntimeError:
            raise RuntimeError("CUDA error: operation failed due to a previous error during capture")  # noqa: B904 - as torch's capture_end raises it
    except RuntimeError as exc:
        said = str(_capture_failure(exc))
    assert "operation not permitted when stream is capturing at test_transforms_runtime.py:" in said and "raise RuntimeError" in said
    assert "previous error" not in said


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_forward_that_synchronises_is_not_captured_on_the_gpu():
    """In a process of its own: a failed capture leaves CUDA's random-number generator in capture
    mode for the rest of the process (the next torch.randn on the GPU raises), which is why the
    process is marked spoiled and a search's worker is replaced."""
    import subprocess
    import sys

    code = (
        "import torch\n"
        "from agnitra.device import spoiled\n"
        "from agnitra.errors import NotApplicable\n"
        "from agnitra.transforms.cudagraphs import CudaGraphRunner\n"
        "class Clamps(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        if not torch.isfinite(x).all():\n"
        "            x = x.clamp(-1e4, 1e4)\n"
        "        return x * 2\n"
        "try:\n"
        "    CudaGraphRunner(Clamps().cuda(), (torch.ones(4, device='cuda'),), torch.device('cuda'))\n"
        "except NotApplicable as exc:\n"
        "    print('NOT APPLICABLE:', exc)\n"
        "print('SPOILED:', spoiled())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "NOT APPLICABLE: the forward could not be captured as a CUDA graph: " in done.stdout, done.stdout + done.stderr
    assert "capturing at <string>:7 " in done.stdout or "capturing at <string>:7" in done.stdout
    assert "SPOILED: a CUDA-graph capture failed" in done.stdout


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_graphs_replay_each_captured_shape_exactly():
    from agnitra.transforms.cudagraphs import CudaGraphRunner

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 8)).to(CUDA).eval()
    runner = CudaGraphRunner(model, (torch.randn(4, 64, device=CUDA),), CUDA)
    with torch.no_grad():
        for batch in (4, 5, 4, 7, 5):
            x = torch.randn(batch, 64, device=CUDA)
            torch.testing.assert_close(runner(x), model(x))
    assert len(runner.graphs) == 3


# ---- compile: programmatic dependent launch ------------------------------------------------------


def test_compile_pdl_is_off_off_hopper_and_the_reason_is_named(toy, monkeypatch):
    """compile(pdl=True) asks Inductor for PDL only where it can run (a CUDA GPU of compute
    capability 9.0+, a torch whose Inductor has triton.enable_pdl); elsewhere the option is not set
    and, on a GPU, the recipe's notes say why. The notes of every step reach the patched result."""
    from agnitra.transforms import compile as compile_transform

    assert "it needs a CUDA GPU" in compile_transform.inductor_pdl_unavailable(CPU)
    assert "triton.enable_pdl" not in compile_transform.inductor_options("default", CPU, True, False, pdl=True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 0))
    assert compile_transform.inductor_pdl_unavailable(CUDA) == "it needs compute capability 9.0 or later (this GPU is 8.0)"
    t = get_transform("compile")
    assert t.notes(TransformContext(toy, CUDA), t.parse_params({})) == ["compile: programmatic dependent launch off: it needs compute capability 9.0 or later (this GPU is 8.0)"]
    assert t.notes(TransformContext(toy, CUDA), t.parse_params({"pdl": False})) == []
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    import torch._inductor.config as inductor_config

    if hasattr(inductor_config.triton, "enable_pdl"):
        assert compile_transform.inductor_options("default", CUDA, False, False, pdl=True)["triton.enable_pdl"] is True
        assert t.notes(TransformContext(toy, CUDA), t.parse_params({})) == ["compile: Inductor's kernels launch with programmatic dependent launch"]
    monkeypatch.setattr(type(t), "notes", lambda self, ctx, params: ["compile: a note"])
    assert _apply(toy, "compile").notes == ["compile: a note"]


# ---- a decoder's compiled step travels with its model ------------------------------------------


def test_a_compiled_decode_step_travels_with_the_model_to_every_holder(tinylm, monkeypatch):
    """compile leaves its decode step on the model it returns; the patch, the benchmark variant,
    apply()'s answer and the harness's generator all run that step, with no second carrier."""
    import agnitra
    from agnitra.bench.variants.recipe import RecipeVariant
    from agnitra.models.generate import Generator, decode_one_token, random_prompt

    steps: list[int] = []

    def fake_compile(fn, **_options):
        def counted(*args, **kwargs):
            steps.append(1)
            return fn(*args, **kwargs)
        return counted

    monkeypatch.setattr(torch, "compile", fake_compile)
    monkeypatch.setattr("agnitra.transforms.compile.shutil.which", lambda name: "/usr/bin/" + name)
    prompt = random_prompt(1, 4, tinylm.model.config.vocab_size, seed=0, device="cpu")
    eager = Generator(tinylm.model).generate(prompt, 5).tokens
    assert Generator(tinylm.model).decode_fn is decode_one_token and not steps

    holders = {
        "patch": _apply(tinylm, "compile").model,
        "variant": RecipeVariant(Recipe.of("compile")).prepare(tinylm, CPU).model,
        "apply": agnitra.apply(tinylm, "compile"),
    }
    for holder, model in holders.items():
        steps.clear()
        tokens = model.generate(prompt, 5) if holder == "apply" else Generator(model).generate(prompt, 5).tokens
        assert len(steps) == 4, holder  # prefill, then 4 compiled decode steps
        assert torch.equal(tokens, eager), holder
