"""KV-cache compression as a layout step (`kv:int8[:gN]`, `kv:int4[:gN]`, `kv:prune:F`): the
steps parsed or refused in one line, the compressed cache's bytes and round-trip error, int4
packing, the key/query and value/output-projection permutations preserving the model (RoPE pairs
with their frequencies), pruning keeping rotary pairs together, ordering lowering the cache's
error on tinylm-py's trained weights, the pipeline end to end, and models without our cache refused."""

from __future__ import annotations

import copy

import pytest
import torch

from agnitra.errors import UserError
from agnitra.models.kv_cache import CompressedKVCache, KVFormat, cache_bytes, pack_int4, reconstruct, roundtrip, unpack_int4
from agnitra.models.llama import PRESETS, build_llama
from agnitra.relayout.pipeline import run_layout
from agnitra.transforms.permutation import kv
from agnitra.transforms.permutation.steps import parse_steps


def _tiny(seed: int = 0, slots: int = 16):
    model = build_llama(PRESETS["tiny"], torch.device("cpu"), torch.float32, seed=seed)  # 4 heads of 16, 2 key heads
    with torch.no_grad():  # channels of unequal range, as trained keys and values have
        for layer in model.layers:
            for w in (layer.attention.wk.weight, layer.attention.wv.weight, layer.attention.wq.weight):
                w.mul_(torch.logspace(-1, 1, w.shape[0])[torch.randperm(w.shape[0], generator=torch.Generator().manual_seed(seed))][:, None])
    model.setup_caches(1, slots)
    calibration = [(torch.randint(0, 256, (1, slots), generator=torch.Generator().manual_seed(i)), torch.arange(slots)) for i in range(2)]
    return model, calibration


@pytest.mark.parametrize("text, bits, group, density", [
    ("kv:int8", 8, 0, 1.0), ("kv:int8:g8", 8, 8, 1.0), ("kv:int4", 4, 32, 1.0), ("kv:int4:g16", 4, 16, 1.0), ("kv:prune:0.25", 0, 0, 0.75),
])
def test_kv_steps_are_parsed(text, bits, group, density):
    (step,) = parse_steps(text)
    assert (step.kind, step.bits, step.group, step.density, step.ordered) == ("kv", bits, group, density, False)
    assert [s.kind for s in parse_steps(f"sparsity:2:4,quant:int4,{text}")] == ["sparsity", "quant", "kv"]


@pytest.mark.parametrize("text, fragment", [
    ("kv:int2", "kv:int8[:gN], kv:int4[:gN] or kv:prune:F"), ("kv:int4:32", "written gN"), ("kv:int4:g0", "written gN"),
    ("kv:prune:1.5", "between 0 and 1"), ("kv:prune", "e.g. kv:prune:0.25"), ("kv", "not a KV-cache step"),
])
def test_kv_steps_are_refused_in_one_line_naming_the_fix(text, fragment):
    with pytest.raises(UserError, match=fragment.replace("[", r"\[").replace("]", r"\]")) as info:
        parse_steps(text)
    assert "\n" not in str(info.value)


def test_int4_codes_pack_two_a_byte_and_come_back():
    codes = torch.randint(0, 16, (3, 5, 8), dtype=torch.uint8)
    packed = pack_int4(codes)
    assert packed.shape == (3, 5, 4) and packed.dtype == torch.uint8
    assert torch.equal(unpack_int4(packed), codes)
    assert int(pack_int4(torch.tensor([1, 15], dtype=torch.uint8))) == 0xF1  # the even channel in the low nibble


def test_the_compressed_cache_holds_fewer_bytes_and_reads_back_within_the_format():
    torch.manual_seed(0)
    shape = (2, 2, 64, 16)  # [B, H_kv, S, D]
    plain = 2 * 2 * 2 * 64 * 16 * 4  # k and v at float32
    expected = {(8, 0): 2 * 2 * 2 * 64 * (16 + 4), (4, 8): 2 * 2 * 2 * 64 * (8 + 2 * 4), (4, 16): 2 * 2 * 2 * 64 * (8 + 4)}
    k, v = torch.randn(shape), torch.randn(shape) * 3
    for (bits, group), size in expected.items():
        cache = KVFormat(bits, group).make_cache(*shape, torch.float32, "cpu")
        assert cache_bytes(cache) == size < plain
        got_k, got_v = cache.update(torch.arange(64), k, v)
        for x, got in ((k, got_k), (v, got_v)):
            span = x.reshape(*shape[:3], -1, group or 16)
            step = (span.amax(-1) - span.amin(-1)) / (2**bits - 1)
            err = (got - x).abs().reshape(span.shape)
            assert (err <= step[..., None] * 0.5 + 2e-3 * span.abs().amax(-1, keepdim=True)).all()  # half a step (+ the fp16 scale's rounding)
        assert got_k.dtype == torch.float32 and got_k.shape == shape
    keep = torch.tensor([[0, 3, 8, 11], [1, 2, 9, 10]])  # pairs (c, c + 8) together
    pruned = KVFormat(0, 0, k_keep=keep, v_keep=keep.clone()).make_cache(*shape, torch.float32, "cpu")
    assert cache_bytes(pruned) == 2 * (2 * 2 * 64 * 4 * 4 + keep.numel() * 8)  # the kept channels and their indices
    got_k, _ = pruned.update(torch.arange(64), k, v)
    assert torch.equal(got_k[:, 0][..., [0, 3, 8, 11]], k[:, 0][..., [0, 3, 8, 11]]) and not got_k[:, 0][..., [1, 2, 4]].any()
    assert torch.equal(reconstruct(k, keep, 0, 0), got_k)
    assert torch.allclose(roundtrip(k, 8, 0), reconstruct(k, None, 8, 0))


def test_a_fresh_cache_keeps_the_format():
    model, _ = _tiny()
    model.layers[0].attention.kv_format = KVFormat(4, 8)
    model.setup_caches(1, 32)
    assert isinstance(model.layers[0].attention.kv_cache, CompressedKVCache) and type(model.layers[1].attention.kv_cache).__name__ == "KVCache"


def _outputs(model, calibration):
    with torch.no_grad():
        return [model(*batch).clone() for batch in calibration]


def test_key_query_and_value_output_permutations_preserve_the_model_with_rope_pairs():
    model, calibration = _tiny()
    reference = _outputs(model, calibration)
    found = kv.attentions(model)
    generator = torch.Generator().manual_seed(1)
    orders = {(name, kind): {j: torch.randperm(8 if kind == "k" else 16, generator=generator) for j in range(2)} for name in found for kind in ("k", "v")}
    spaces, chosen = kv._spaces(found, orders)
    before = model.layers[0].attention.wk.weight.detach().clone()
    why_not = kv.permute_kv(model, kv.KVOrders(chosen=chosen, spaces=spaces, heads=8), calibration)
    assert why_not == ""
    after = _outputs(model, calibration)
    assert all(torch.allclose(a, b, rtol=1e-4, atol=1e-5) for a, b in zip(after, reference))
    sigma = orders[("layers.0.attention", "k")][0]
    wk = model.layers[0].attention.wk.weight.detach()
    assert torch.equal(wk[:8], before[sigma]) and torch.equal(wk[8:16], before[8 + sigma])  # the same pair order in both halves
    assert torch.equal(model.layers[0].attention.rope_order[:8], sigma)  # each pair keeps its rotary frequency
    # without the frequencies following the pairs the function changes: the rotary table is part of it
    model.layers[0].attention.rope_order = None
    assert not torch.allclose(_outputs(model, calibration)[0], reference[0], rtol=1e-3, atol=1e-4)


def test_a_permutation_that_changes_the_outputs_is_refused_and_undone():
    model, calibration = _tiny()
    found = kv.attentions(model)
    orders = {("layers.0.attention", "k"): {0: torch.arange(8).flip(0)}}
    spaces, chosen = kv._spaces(found, orders)
    del chosen[[s.id for s in spaces.spaces.values() if s.axes[0].name.endswith("wq.weight")][0]]  # keys moved, queries not
    wk = model.layers[0].attention.wk.weight.detach().clone()
    assert "rolled back" in kv.permute_kv(model, kv.KVOrders(chosen=chosen, spaces=spaces), calibration)
    assert torch.equal(model.layers[0].attention.wk.weight, wk) and model.layers[0].attention.rope_order is None


def test_pruning_keeps_rotary_pairs_together_and_the_user_model_alone():
    model, calibration = _tiny()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    run = run_layout(model, calibration, parse_steps("kv:prune:0.25"), "iterative", solve_seconds=1)
    (record,) = run.steps
    assert record.cache_bytes_after < record.cache_bytes_before and 0.75 < record.importance_kept < 1.0
    for module in kv.attentions(run.model).values():
        keep = module.kv_format.k_keep
        assert keep.shape == (2, 12)  # 6 of 8 pairs a head
        assert torch.equal(keep[:, 6:], keep[:, :6] + 8)  # channel c kept with c + D/2
        assert module.kv_format.v_keep.shape == (2, 12)
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())
    assert type(model.layers[0].attention.kv_cache).__name__ == "KVCache"


def test_ordering_for_kv_int4_lowers_the_cache_error_on_tinylm_py():
    """tinylm-py's trained keys and values on 2 windows of its training text: groups of 8 of a
    head's 32 channels, ordered (pairs for keys), lose less than in their natural order."""
    from agnitra.api import prepare_workload

    workload, _ = prepare_workload("zoo:tinylm-py", device="cpu")
    calibration = workload.calibration_inputs(2)
    steps = parse_steps("kv:int4:g8")
    none = run_layout(workload.model, calibration, steps, "none")
    ordered = run_layout(workload.model, calibration, steps, "iterative", solve_seconds=4)
    assert ordered.steps[0].permuted_spaces > 0 and ordered.steps[0].solver_gain > 0.02, ordered.steps
    assert ordered.steps[0].weight_error < none.steps[0].weight_error * 0.98, (none.steps, ordered.steps)
    assert ordered.steps[0].cache_bytes_after == none.steps[0].cache_bytes_after == ordered.steps[0].cache_bytes_before // 4


def test_a_weight_step_after_a_kv_step_is_checked_on_the_plain_function():
    model, calibration = _tiny()
    run = run_layout(model, calibration, parse_steps("kv:int4:g4,sparsity:2:4"), "iterative", solve_seconds=1)
    assert not any("rolled back" in n for s in run.steps for n in s.notes), run.steps
    assert all(isinstance(m.kv_cache, CompressedKVCache) for m in kv.attentions(run.model).values())


def test_agnitra_layout_runs_kv_int8_on_tinylm_py_and_reports_the_cache(tmp_path):
    import json

    import agnitra

    doc = agnitra.layout("zoo:tinylm-py", transforms="kv:int8", modes=["none"], device="cpu", calibration_batches=2, runs=2, out=tmp_path)
    (mode,) = doc["modes"]
    assert doc["original"]["kv_cache_bytes"] == 4 * 2 * 2 * 128 * 32 * 4  # 4 layers, k and v, 2 key heads, 128 slots, 32 channels, float32
    assert mode["kv_cache_bytes"] == 4 * 2 * 2 * 128 * (32 + 4)  # int8 codes and a 4-byte scale and offset a token and head
    assert mode["model_bytes"] < doc["original"]["model_bytes"] and mode["served"] == "served by the compressed KV cache (kv:int8)"
    assert mode["quality"]["metric"] == "perplexity" and abs(mode["quality"]["value"]) < 0.01
    assert {g["name"]: g for g in mode["gates"]}["quality loss"]["met"] is not None
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["none"]["kv_cache_bytes"] == mode["kv_cache_bytes"] and metrics["original"]["kv_cache_bytes"] == doc["original"]["kv_cache_bytes"]
    assert "cache_bytes_before" in (tmp_path / "layout.csv").read_text().splitlines()[0]
    assert "KV cache" in (tmp_path / "report.html").read_text()
    with pytest.raises(UserError, match="groups of 12 do not divide the head size 32; use one of g2, g4, g8, g16, g32"):
        agnitra.layout("zoo:tinylm-py", transforms="kv:int4:g12", device="cpu")


def test_models_without_our_cache_have_the_kv_step_refused_with_the_reason():
    from transformers import LlamaConfig, LlamaForCausalLM

    mlp = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).eval()
    run = run_layout(mlp, [(torch.randn(2, 8),)], parse_steps("kv:int8"), "iterative")
    assert run.steps[0].notes == ["kv:int8: refused: no attention layer of Agnitra's Llama (models.llama.Attention) with a static KV cache to compress"]
    assert torch.equal(run.model[0].weight, mlp[0].weight)
    hf = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                                      num_key_value_heads=1)).eval()
    run = run_layout(hf, [(torch.randint(0, 64, (1, 8)),)], parse_steps("kv:int4:g8"), "none")
    (note,) = run.steps[0].notes
    assert note.startswith("kv:int4:g8: refused: a transformers model (LlamaForCausalLM): its KV cache is transformers' own Cache object") and "\n" not in note
    planted = copy.deepcopy(mlp)
    assert kv.refusal(planted) and not kv.refusal(_tiny()[0])
