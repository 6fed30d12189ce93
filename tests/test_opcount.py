"""FLOPs and bytes of single operators against their formulas (2 FLOPs per multiply-add)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from agnitra.telemetry.opcount import count_ops, unique_bytes


def _by_op(records):
    out = {}
    for r in records:
        out.setdefault(r.op, []).append(r)
    return out


def test_linear_flops_and_bytes():
    M, K, N = 7, 64, 48
    lin = torch.nn.Linear(K, N)
    x = torch.randn(M, K)
    ops = _by_op(count_ops(lin, x))
    addmm = ops["aten::addmm"][0]
    assert addmm.flops == 2 * M * K * N
    # reads x, W and bias once, writes the output
    assert addmm.bytes_read == 4 * (M * K + K * N + N)
    assert addmm.bytes_written == 4 * M * N
    assert ops["aten::t"][0].bytes == 0  # a view moves nothing


def test_batched_matmul_flops():
    a, b = torch.randn(3, 5, 16), torch.randn(3, 16, 9)
    (bmm,) = [r for r in count_ops(torch.bmm, a, b) if r.op == "aten::bmm"]
    assert bmm.flops == 2 * 3 * 5 * 16 * 9


def test_conv_flops_match_formula():
    n, cin, cout, h, w, k = 2, 3, 8, 16, 12, 3
    conv = torch.nn.Conv2d(cin, cout, k, padding=1, stride=1)
    x = torch.randn(n, cin, h, w)
    (rec,) = [r for r in count_ops(conv, x) if r.op == "aten::convolution"]
    assert rec.flops == 2 * n * cout * h * w * cin * k * k


def test_strided_conv_uses_output_size():
    conv = torch.nn.Conv2d(4, 6, 3, stride=2, padding=0)
    x = torch.randn(1, 4, 11, 11)
    (rec,) = [r for r in count_ops(conv, x) if r.op == "aten::convolution"]
    ho = wo = (11 - 3) // 2 + 1
    assert rec.flops == 2 * 6 * ho * wo * 4 * 9


def test_attention_flops_match_formula():
    B, H, L, S, D = 2, 4, 10, 24, 16
    q, k, v = torch.randn(B, H, L, D), torch.randn(B, H, S, D), torch.randn(B, H, S, D)
    recs = count_ops(F.scaled_dot_product_attention, q, k, v)
    total = sum(r.flops for r in recs)
    # QK^T and PV: 2 * B*H*L*S*D each; softmax and scaling are small next to them
    matmuls = 4 * B * H * L * S * D
    assert matmuls <= total <= matmuls * 1.1


def test_attention_with_mask_keyword_is_counted():
    q = torch.randn(1, 2, 1, 8)
    k = v = torch.randn(1, 2, 6, 8)
    mask = torch.ones(1, 1, 1, 6, dtype=torch.bool)
    recs = count_ops(lambda a, b, c: F.scaled_dot_product_attention(a, b, c, attn_mask=mask), q, k, v)
    attn = [r for r in recs if "attention" in r.op]
    assert attn and attn[0].flops == 4 * 2 * 1 * 6 * 8
    assert (1, 1, 1, 6) in attn[0].shapes  # keyword tensor arguments are part of the shape key


def test_layer_norm_and_pointwise_estimates():
    x = torch.randn(4, 32)
    ln = torch.nn.LayerNorm(32)
    (rec,) = [r for r in count_ops(ln, x) if "layer_norm" in r.op]
    assert rec.flops == 8 * x.numel()
    assert rec.bytes_written >= 4 * x.numel()
    (add,) = [r for r in count_ops(torch.add, x, x) if r.op == "aten::add"]
    assert add.flops == x.numel()
    assert add.bytes_read == 2 * 4 * x.numel()


def test_broadcast_inputs_count_once():
    base = torch.randn(1, 16)
    expanded = base.expand(1000, 16)
    assert unique_bytes(expanded) == 16 * 4


def test_embedding_reads_only_gathered_rows():
    emb = torch.nn.Embedding(50_000, 64)
    ids = torch.tensor([[1, 2, 3]])
    (rec,) = [r for r in count_ops(emb, ids) if r.op == "aten::embedding"]
    assert rec.bytes_written == 3 * 64 * 4
    assert rec.bytes_read < 50_000 * 64 * 4 / 100  # not the whole table


def test_kv_cache_write_counts_written_rows_only():
    cache = torch.zeros(1, 2, 512, 16)
    k = torch.randn(1, 2, 1, 16)
    pos = torch.tensor([7])

    def update(c, p, v):
        c[:, :, p] = v

    (rec,) = [r for r in count_ops(update, cache, pos, k) if r.op == "aten::index_put_"]
    assert rec.bytes_written == k.numel() * 4
    assert rec.bytes_read < cache.numel() * 4 / 10


def test_composite_ops_as_torch_export_keeps_them():
    """cost_of on the ops an exported graph holds (linear, matmul, SDPA, conv2d, layer_norm)."""
    from agnitra.telemetry.opcount import cost_of

    aten = torch.ops.aten
    x, w, b = torch.randn(3, 5, 16), torch.randn(24, 16), torch.randn(24)
    out = aten.linear.default(x, w, b)
    assert cost_of(aten.linear.default, (x, w, b), {}, out).flops == 2 * 15 * 16 * 24
    a, m = torch.randn(2, 7, 9), torch.randn(9, 4)
    assert cost_of(aten.matmul.default, (a, m), {}, aten.matmul.default(a, m)).flops == 2 * 2 * 7 * 4 * 9
    q = k = v = torch.randn(1, 2, 6, 8)
    out = aten.scaled_dot_product_attention.default(q, k, v)
    assert cost_of(aten.scaled_dot_product_attention.default, (q, k, v), {}, out).flops == 4 * 2 * 6 * 6 * 8
    img, kern = torch.randn(1, 3, 9, 9), torch.randn(4, 3, 3, 3)
    out = aten.conv2d.default(img, kern, None, [2, 2])
    assert cost_of(aten.conv2d.default, (img, kern, None, [2, 2]), {}, out).flops == 2 * 4 * 4 * 4 * 3 * 9
    h = torch.randn(2, 10)
    out = aten.layer_norm.default(h, [10])
    assert cost_of(aten.layer_norm.default, (h, [10]), {}, out).flops == 8 * 20
