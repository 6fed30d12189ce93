"""Device signature, cached ceilings, NVML sampling logic, memory and the operator table."""

from __future__ import annotations

import json

import pytest
import torch

from agnitra.telemetry import ceilings as ceilings_mod
from agnitra.telemetry.ceilings import load_or_measure, matmul_peak
from agnitra.telemetry.memory import peak_memory, resident_bytes
from agnitra.telemetry.nvml import NvmlSampler, open_reader
from agnitra.telemetry.optable import operator_table
from agnitra.telemetry.roofline import compulsory_bytes, roofline, weight_bytes
from agnitra.telemetry.signature import device_signature, signature_id


def test_cpu_signature_fields_and_stable_id():
    sig = device_signature(torch.device("cpu"))
    for key in ("name", "logical_cores", "torch_threads", "isa_flags", "memory_bytes", "torch", "triton"):
        assert key in sig
    assert sig["kind"] == "cpu" and sig["torch"] == torch.__version__
    assert signature_id(sig) == signature_id(dict(sig))
    assert signature_id(sig) != signature_id({**sig, "torch_threads": sig["torch_threads"] + 1})


def test_ceilings_are_measured_once_and_cached(tmp_path, monkeypatch):
    calls = []
    monkeypatch.setattr(ceilings_mod, "_CPU_PLAN", (8 * 1024**2, {"float32": (128, 256)}))
    real = ceilings_mod.measure_ceilings
    monkeypatch.setattr(ceilings_mod, "measure_ceilings", lambda d: calls.append(d) or real(d))
    sig = device_signature(torch.device("cpu"))
    first = load_or_measure(torch.device("cpu"), sig, tmp_path)
    second = load_or_measure(torch.device("cpu"), sig, tmp_path)
    assert len(calls) == 1 and first["cached"] is False and second["cached"] is True
    assert first["copy_gbps"] > 0.1 and first["matmul_tflops"]["float32"] > 1e-4
    assert second["copy_gbps"] == first["copy_gbps"]
    # a corrupt entry is measured again rather than trusted
    path = next((tmp_path / "ceilings").glob("*.json"))
    path.write_text("{not json")
    load_or_measure(torch.device("cpu"), sig, tmp_path)
    assert len(calls) == 2 and json.loads(path.read_text())["version"] == ceilings_mod.CEILINGS_VERSION


def test_matmul_peak_falls_back_to_fp32():
    c = {"matmul_tflops": {"float32": 2.0, "bfloat16": 4.0}}
    assert matmul_peak(c, torch.bfloat16) == 4e12
    assert matmul_peak(c, torch.float16) == 2e12


class _FakeGpu:
    """A deterministic reader: utilisation and power step up, energy counts 10 J per read."""

    def __init__(self) -> None:
        self.reads = 0
        self.energy = 1000.0

    def utilization(self) -> float:
        return 50.0

    def power_w(self) -> float:
        self.reads += 1
        return 100.0 + self.reads

    def energy_j(self) -> float:
        self.energy += 10.0
        return self.energy


def test_nvml_sampler_summarises_samples_and_energy_counter():
    gpu = _FakeGpu()
    with NvmlSampler(gpu, interval_s=0.001) as sampler:
        import time

        time.sleep(0.05)
    s = sampler.summary()
    assert s.samples == gpu.reads >= 2
    assert s.utilization_mean == 50.0
    assert s.power_max_w == 100.0 + gpu.reads
    assert s.energy_j == pytest.approx(10.0) and s.energy_source == "energy counter"


def test_nvml_unavailable_on_cpu_says_why():
    reader, reason = open_reader(torch.device("cpu"))
    assert reader is None and "CPU" in reason


def test_cpu_peak_memory_sees_a_large_allocation():
    nbytes, kind = peak_memory(lambda: torch.ones(64 * 1024**2 // 4).add_(1), torch.device("cpu"))
    assert kind == "cpu_rss_growth"
    assert nbytes >= 48 * 1024**2


def test_operator_table_covers_the_work():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 64))
    x = torch.randn(32, 256)
    rows = operator_table(model, (x,), torch.device("cpu"), runs=3, warmup=1)
    matmul = [r for r in rows if r.op == "aten::addmm"]
    assert len(matmul) == 2 and all(r.calls == 1 for r in matmul)
    assert sum(r.flops for r in matmul) == 2 * 32 * (256 * 512 + 512 * 64)
    assert sum(r.share for r in rows) == pytest.approx(1.0)
    assert rows[0].self_time_us >= rows[-1].self_time_us  # sorted by time
    assert matmul[0].intensity and matmul[0].intensity > 1


def test_compulsory_bytes_count_embedding_rows_only():
    emb = torch.nn.Embedding(10_000, 32)
    head = torch.nn.Linear(32, 7)
    model = torch.nn.ModuleDict({"e": emb, "h": head})
    ids = torch.zeros(1, 5, dtype=torch.long)
    assert weight_bytes(model, tokens_looked_up=5) == 5 * 32 * 4 + (32 * 7 + 7) * 4
    total = compulsory_bytes(model, (ids,), (torch.zeros(1, 5, 7),))
    assert total == weight_bytes(model, 5) + ids.numel() * 8 + 35 * 4


def test_roofline_picks_the_binding_limit():
    ceilings = {"copy_gbps": 100.0, "matmul_tflops": {"float32": 1.0}}
    memory = roofline(flops=1e9, nbytes=1e9, ceilings=ceilings, dtype=torch.float32)
    assert memory.bound == "memory" and memory.floor_ms == pytest.approx(10.0)
    compute = roofline(flops=1e11, nbytes=1e6, ceilings=ceilings, dtype=torch.float32)
    assert compute.bound == "compute" and compute.floor_ms == pytest.approx(100.0)


def test_resident_bytes_counts_each_storage_once():
    """Tied weights, views and buffers sharing a storage count once; tensors on another device kind not at all."""
    model = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 10, bias=False))
    model[1].weight = model[0].weight  # tied: one [10, 4] fp32 storage
    model.register_buffer("view", model[0].weight.detach()[:2])  # a view of it
    model.register_buffer("own", torch.zeros(3, dtype=torch.int8))
    model.register_buffer("meta", torch.zeros(100, device="meta"))
    assert resident_bytes(model, torch.device("cpu")) == 10 * 4 * 4 + 3


def test_resident_bytes_counts_what_a_wrapper_subclass_holds():
    """A weight that is a tensor subclass without storage of its own (a 2:4 semi-structured
    weight on the GPU: packed values and metadata) counts the tensors it holds; asking it for its
    storage ended `agnitra bench` with an internal error on the H200."""
    from torch.testing._internal.two_tensor import TwoTensor

    model = torch.nn.Linear(64, 32, bias=False)
    model.weight = torch.nn.Parameter(TwoTensor(torch.randn(32, 64), torch.randn(32, 64)), requires_grad=False)
    with pytest.raises(RuntimeError):
        model.weight.untyped_storage().data_ptr()  # what resident_bytes read before
    assert resident_bytes(model, torch.device("cpu")) == 2 * 32 * 64 * 4
