"""The timing half of the profiler: ceilings and one timed op per family of docs/ops.md (not `allreduce`).

On `cuda` an op runs the Triton kernels (decode attention, KV write, W4A16, integrity check) or the baselines
(cuBLAS matmul, `torch._scaled_mm`, SDPA); on `cpu` it runs the torch references, so a CPU replay can be
calibrated (the CPU decode attention and integrity check are the replay executor's own CPU functions, timed as
it runs them). GPU inputs are random (never zeros) and rotated across copies larger than the 60 MB L2 together;
CPU inputs across copies of 32 MiB together (the shared L3), far past a core's 512 KiB L2, as the replay
executor's step streams its weights and cache from beyond L2 between uses — timed hot in L2, a GEMM ran 1.5×
faster than it does inside a step.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable

import torch

from kernels import reference as ref
from kernels.timing import clock

L2_BYTES = 60e6
CPU_ROTATE_BYTES = 32 * 2**20
_KV_BYTES = {"bf16": 2, "fp8_e4m3": 1}
Op = Callable[[], object]


def _rand(*shape: int, device: str, dtype: torch.dtype = torch.bfloat16, scale: float = 1.0) -> torch.Tensor:
    return (scale * torch.randn(*shape, device=device)).to(dtype)


def _paged(batch: int, context: int, page: int, device: str) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Block table over a permuted page pool (every sequence `context` long) and the lengths."""
    per = math.ceil(context / page)
    pages = batch * per
    table = torch.randperm(pages, device=device).to(torch.int32).view(batch, per)
    return table, torch.full((batch,), context, dtype=torch.int32, device=device), pages


def work(family: str, s: dict) -> tuple[float, float]:
    """(bytes that must move, FLOPs) of one op: what achieved GB/s and TFLOP/s are computed from."""
    if family == "decode_attention_mla":
        per_tok = 656 if s.get("layout") == "tiled" and s["kv"] != "bf16" else 576 * _KV_BYTES[s["kv"]]
        return s["batch"] * s["context"] * per_tok, 2 * s["batch"] * s["heads"] * s["context"] * (576 + 512)
    if family == "decode_attention_gqa":
        kv = 2 * s["batch"] * s["context"] * s["kv_heads"] * s["head_dim"] * _KV_BYTES[s["kv"]]
        return kv, 4 * s["batch"] * s["q_heads"] * s["context"] * s["head_dim"]
    if family == "prefill_attention":
        t, c, h = s["tokens"], s["context"], s["heads"]
        pairs = t * c - t * (t - 1) / 2
        return 2 * h * (t * s["qk_dim"] + c * (s["qk_dim"] + s["v_dim"]) + t * s["v_dim"]), 2 * h * pairs * (
            s["qk_dim"] + s["v_dim"]
        )
    if family in ("gemm", "moe_gemm"):
        m = s.get("m", s.get("tokens")) * s.get("batch", 1)
        copies = s.get("experts", 1) * s.get("batch", 1)
        bits = {"bf16": 16, "fp8": 8, "int4": 4 + 16 / max(1, s.get("group") or 32)}[s["weights"]]
        return copies * s["n"] * s["k"] * bits / 8 + 2 * m * (s["k"] + s["n"]), 2 * m * s["n"] * s["k"]
    if family == "kv_write":
        return s["tokens"] * s["width"] * (2 + _KV_BYTES[s["kv"]]), 0.0
    if family == "integrity_check":
        return 12 * s["pages"], 0.0
    if family == "elementwise":
        return s["bytes"], 0.0
    raise ValueError(f"unknown op family {family!r}")


def _decode_mla(s: dict, dev: str) -> Op:
    from kernels.decode_attention import mla_decode

    table, lens, pages = _paged(s["batch"], s["context"], s["page_size"], dev)
    q = _rand(s["batch"], s["heads"], 576, device=dev, scale=0.1)
    latent = _rand(pages, s["page_size"], 576, device=dev)
    scale = None
    if s["kv"] == "bf16":
        cache = latent
    elif s.get("layout") == "tiled":
        cache = ref.mla_tiled_pack(latent.view(-1, 576)).view(pages, s["page_size"], -1)
    else:
        scale = torch.tensor([0.02], device=dev)
        cache = ref.quantize_fp8(latent, scale)
    sm = 1 / math.sqrt(192)
    if dev == "cpu":  # what the CPU replay runs: float32 queries over the cache in its stored format
        from kernels.executor.attention import mla_decode_cpu

        qf = q.float()
        return lambda: mla_decode_cpu(qf, cache, 512, table, lens, sm, scale)
    return lambda: mla_decode(q, cache, table, lens, sm, kv_scale=scale)


def _decode_gqa(s: dict, dev: str) -> Op:
    from kernels.decode_attention import gqa_decode

    table, lens, pages = _paged(s["batch"], s["context"], s["page_size"], dev)
    d, hkv = s["head_dim"], s["kv_heads"]
    q = _rand(s["batch"], s["q_heads"], d, device=dev)
    k, v = (_rand(pages, s["page_size"], hkv, d, device=dev) for _ in range(2))
    ks = vs = None
    if s["kv"] != "bf16":
        ks, vs = torch.full((hkv,), 0.5, device=dev), torch.full((hkv,), 0.5, device=dev)
        k, v = ref.quantize_fp8(k, ks.view(-1, 1)), ref.quantize_fp8(v, vs.view(-1, 1))
    if dev == "cpu":  # what the CPU replay runs (one per-tensor scale there)
        from kernels.executor.attention import gqa_decode_cpu

        qf = q.float()
        return lambda: gqa_decode_cpu(qf, k, v, table, lens, 1 / math.sqrt(d), None if ks is None else ks[:1])
    return lambda: gqa_decode(q, k, v, table, lens, k_scale=ks, v_scale=vs)


def _prefill(s: dict, dev: str) -> Op:
    """Causal chunk attention; GQA (fewer K/V heads) repeats each K/V head for its query heads on the CPU, as
    the replay executor does, and lets SDPA share them on the GPU."""
    t, c, h, hkv = s["tokens"], s["context"], s["heads"], s["kv_heads"]
    q = _rand(t, h, s["qk_dim"], device=dev)
    k = _rand(c, hkv, s["qk_dim"], device=dev)
    v = _rand(c, hkv, s["v_dim"], device=dev)
    sm = 1 / math.sqrt(s["qk_dim"])
    if dev == "cpu":
        if hkv == h:
            return lambda: ref.prefill_attention(q, k, v, sm)
        return lambda: ref.prefill_attention(q, k.repeat_interleave(h // hkv, 1), v.repeat_interleave(h // hkv, 1), sm)
    from torch.nn.attention.bias import causal_lower_right
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    qh, kh, vh = (x.transpose(0, 1).unsqueeze(0) for x in (q, k, v))
    mask = causal_lower_right(t, c)
    return lambda: sdpa(qh, kh, vh, attn_mask=mask, scale=sm, enable_gqa=hkv != h)


def _int4(experts: int | None, n: int, k: int, group: int, dev: str) -> tuple[torch.Tensor, ...]:
    from kernels.w4a16 import pack_int4

    lead = () if experts is None else (experts,)
    q = torch.randint(-8, 8, (*lead, n, k), dtype=torch.int8, device=dev)
    scales = (0.01 + 0.01 * torch.rand(*lead, n, k // group, device=dev)).to(torch.bfloat16)
    return q, pack_int4(q), scales


def _gemm(s: dict, dev: str) -> Op:
    m, n, k, w = s["m"], s["n"], s["k"], s["weights"]
    if s["batch"] > 1:  # MLA's absorbed W_UK / W_UV: one BF16 GEMM per head, batched
        a3, w3 = _rand(s["batch"], m, k, device=dev), _rand(s["batch"], k, n, device=dev)
        if dev == "cpu":
            af, wf3 = a3.float(), w3.float()
            return lambda: torch.bmm(af, wf3)
        return lambda: torch.bmm(a3, w3)
    a = _rand(m, k, device=dev)
    if w == "int4":
        group = s["group"]
        q, packed, scales = _int4(None, n, k, group, dev)
        if dev == "cpu":
            return lambda: ref.w4a16_gemm(a, q, scales, group)
        from kernels.w4a16 import w4a16_gemm

        return lambda: w4a16_gemm(a, packed, scales, group)
    weight = _rand(n, k, device=dev)
    if dev == "cpu":
        wf = weight.float()
        return lambda: a.float() @ wf.T
    if w == "fp8":
        a8, w8 = a.to(torch.float8_e4m3fn), weight.to(torch.float8_e4m3fn)
        one = torch.ones((), device=dev)
        return lambda: torch._scaled_mm(a8, w8.T, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    return lambda: a @ weight.T


def _moe(s: dict, dev: str) -> Op:
    t, e, n, k, w = s["tokens"], s["experts"], s["n"], s["k"], s["weights"]
    counts = torch.full((e,), t // e, dtype=torch.int64)
    counts[: t % e] += 1
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), counts.cumsum(0)]).to(torch.int32).to(dev)
    a = _rand(t, k, device=dev)
    if w == "int4":
        group = s["group"]
        q, packed, scales = _int4(e, n, k, group, dev)
        if dev == "cpu":
            return lambda: ref.w4a16_moe_gemm(a, offsets, q, scales, group)
        from kernels.w4a16 import w4a16_moe_gemm

        return lambda: w4a16_moe_gemm(a, offsets, packed, scales, group)
    weight = _rand(e, n, k, device=dev)
    bounds = offsets.tolist()
    if dev == "cpu" or w == "fp8":
        one = torch.ones((), device=dev)
        w8 = weight.to(torch.float8_e4m3fn)
        a8 = a.to(torch.float8_e4m3fn)

        def per_expert() -> None:  # baseline: one GEMM per touched expert
            for i in range(e):
                lo, hi = bounds[i], bounds[i + 1]
                if dev == "cpu":
                    a[lo:hi].float() @ weight[i].float().T
                else:
                    torch._scaled_mm(a8[lo:hi], w8[i].T, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)

        return per_expert
    wt = weight.transpose(1, 2)
    return lambda: torch._grouped_mm(a, wt, offs=offsets[1:])


def _kv_write(s: dict, dev: str) -> Op:
    t, width, fp8 = s["tokens"], s["width"], s["kv"] != "bf16"
    page = 64
    pages = math.ceil(2 * t / page) + 1
    cache = torch.empty(pages, page, width, device=dev, dtype=torch.float8_e4m3fn if fp8 else torch.bfloat16)
    new = _rand(t, width, device=dev)
    slots = torch.randperm(pages * page, device=dev)[:t].to(torch.int32)
    scale = torch.tensor([0.02], device=dev) if fp8 else None
    if dev == "cpu":
        return lambda: ref.kv_write(cache, new, slots, scale)
    from kernels.kv_write import kv_write

    return lambda: kv_write(cache, new, slots, scale)


def _integrity(s: dict, dev: str) -> Op:
    batch = max(1, min(64, s["pages"]))
    per = math.ceil(s["pages"] / batch)
    pool = batch * per + 1
    table = torch.randperm(pool, device=dev)[: batch * per].to(torch.int32).view(batch, per)
    tags = torch.randint(1, 2**30, (pool,), dtype=torch.int32, device=dev)
    recorded = tags[table.long()]
    used = torch.full((batch,), per, dtype=torch.int32, device=dev)
    if dev == "cpu":  # what the CPU replay runs: the batched check as whole-tensor ops
        from kernels.executor.integrity import first_bad

        return lambda: first_bad(table, recorded, tags, used)
    from kernels.integrity_check import integrity_check

    return lambda: integrity_check(table, recorded, tags, used)


def _elementwise(s: dict, dev: str) -> Op:
    """A GPU engine fuses a norm, an activation or a RoPE into one pass over the bytes: a scaled copy. The CPU replay
    runs them as torch reference ops, several passes each; its most frequent is an RMSNorm (two a layer and the
    final one), timed here over the bytes' worth of BF16 rows (read, weight, write: about 8 bytes an element)."""
    if dev == "cpu":
        width = 256
        x = _rand(max(1, s["bytes"] // 8 // width), width, device=dev)
        w = torch.ones(width, dtype=x.dtype, device=dev)
        return lambda: torch.nn.functional.rms_norm(x, (width,), w)
    x = _rand(max(1, s["bytes"] // 4), device=dev)
    y = torch.empty_like(x)
    return lambda: torch.mul(x, 1.5, out=y)


_BUILDERS: dict[str, Callable[[dict, str], Op]] = {
    "decode_attention_mla": _decode_mla,
    "decode_attention_gqa": _decode_gqa,
    "prefill_attention": _prefill,
    "gemm": _gemm,
    "moe_gemm": _moe,
    "kv_write": _kv_write,
    "integrity_check": _integrity,
    "elementwise": _elementwise,
}


def _rotated(family: str, shape: dict, device: str) -> Op:
    """One callable that cycles through enough input copies to exceed twice the L2 on the GPU (CPU: to span
    CPU_ROTATE_BYTES)."""
    build = _BUILDERS.get(family)
    if build is None:
        raise ValueError(f"no timing for family {family!r} (allreduce is roofline-only)")
    span = CPU_ROTATE_BYTES if device == "cpu" else 2 * L2_BYTES
    copies = int(min(16, max(1, math.ceil(span / max(1.0, work(family, shape)[0])))))
    ops = [build(shape, device) for _ in range(copies)]
    state = {"i": 0}

    def step() -> object:
        state["i"] = (state["i"] + 1) % copies
        return ops[state["i"]]()

    return step


def _stats(samples_us: list[float]) -> dict[str, float]:
    qs = statistics.quantiles(samples_us, n=10, method="inclusive") if len(samples_us) > 1 else samples_us * 9
    return {"median_us": statistics.median(samples_us), "p10_us": qs[0], "p90_us": qs[-1]}


def time_op(family: str, shape: dict, device: str) -> dict[str, float]:
    """Median and 10th/90th percentile time (µs) of one op of `family` at `shape` on `device`."""
    op = _rotated(family, shape, device)
    if device == "cpu":
        op()
        now, samples = clock(device), []
        for _ in range(5):
            t0 = now()
            op()
            samples.append((now() - t0) * 1e6)
        return _stats(samples)
    import triton.testing

    med, p10, p90 = triton.testing.do_bench(op, warmup=10, rep=50, quantiles=[0.5, 0.1, 0.9])
    return {"median_us": med * 1e3, "p10_us": p10 * 1e3, "p90_us": p90 * 1e3}


def ceilings(device: str) -> dict[str, float]:
    """Measured copy bandwidth (GB/s, read + write) and BF16 matmul rate (TFLOP/s) on `device`."""
    gpu = device != "cpu"
    numel = (1 << 29) if gpu else (1 << 25)  # 1 GiB / 64 MiB of bf16
    src = _rand(numel, device=device)
    dst = torch.empty_like(src)
    n = 8192 if gpu else 1024
    a, b = _rand(n, n, device=device), _rand(n, n, device=device)
    copy_s, mm_s = (_seconds(lambda: dst.copy_(src), gpu), _seconds(lambda: a @ b, gpu))
    return {"copy_gbs": 2 * src.numel() * 2 / copy_s / 1e9, "bf16_tflops": 2 * n**3 / mm_s / 1e12}


def _seconds(fn: Op, gpu: bool) -> float:
    if gpu:
        import triton.testing

        return triton.testing.do_bench(fn, warmup=10, rep=100, return_mode="median") / 1e3
    fn()
    now, samples = clock("cpu"), []
    for _ in range(3):
        t0 = now()
        fn()
        samples.append(now() - t0)
    return min(samples)
