#!/usr/bin/env python3
"""In-run anchor of bench_stepfun_layer (issue 27): a PyTorch bf16 MoE layer built around
torch._grouped_mm, on the same routing and under the same timing protocol.

One CUDA graph per (workload, T), from routing to the combined output:
  top-k of the fp32 logits and softmax of the K values (bf16 weights); a stable sort of the T*K
  (token, k) pairs by expert; per-expert counts -> int32 cumulative group ends; a gather of the
  token rows; FC1 = _grouped_mm([T*K, H], [E, H, 2I]); SwiGLUStep min(silu(gate), 7) *
  clamp(up, -7, 7) with rows [up; gate]; FC2 = _grouped_mm([T*K, I], [E, I, H]); each token's K
  rows summed with its weights (a batched [1, K] x [K, H] product).
Timing: graph replay, the L2 flushed by zeroing a 256 MiB buffer before each rep (outside the
events), median of --reps. Weights are torch.randn bf16 scaled by 1/sqrt(K); their values do not
matter to the time.

Routing: logits[t, e] = hash_uniform(0x5EED, t * E + e) of bench/stepfun_layer_inputs.cuh
(splitmix64, top 24 bits to [-1, 1)); logits() below computes the same fp32 bits, so both sides
pick the same top-k (ties to the smaller expert id). The host top-k and its checksum are printed
as `bench_stepfun_layer --dry-run` prints them; with --routing-dir=DIR the ids are also compared
with DIR/routing_<workload>_T<T>.bin from `bench_stepfun_layer --write-routing --out=DIR`.

torch._grouped_mm (PyTorch >= 2.8; ATen GroupedMMUtils.h / GroupedBlas.cpp): the 2-D x 3-D form
takes mat_a [M, K], mat_b [G, K, N] (a transposed view is fine) and offs, a 1-D int32 tensor of G
cumulative group ends; every operand 16-byte aligned with strides that are multiples of 16
bytes. Only bf16 on SM90 / SM100 takes the CUTLASS kernel with no device-to-host sync; other
dtypes or GPUs fall back to a per-group loop that reads offs on the host and cannot be captured,
so this script refuses them.

  anchor_grouped_mm.py [--workload=step35,fi] [--tokens=1,8,...] [--reps=20] [--out=DIR]
                       [--routing-dir=DIR] [--budget=SECONDS] [--quick] [--dry-run]
"""
import argparse
import json
import os
import statistics
import sys
import time

import numpy as np

DIMS = {"step35": (4096, 1280, 288, 8), "fi": (4096, 1536, 64, 8)}  # H, I, E, K
ALL_TOKENS = [1, 8, 64, 512, 4096, 16384]
QUICK_TOKENS = [1, 64, 4096]
LOGIT_SEED = 0x5EED
STEP_LIMIT = 7.0
FLUSH_BYTES = 256 << 20
HBM_BYTES_PER_S = 4.47e12
BF16_PEAK = 773e12


def logits(workload, tokens):
    """fp32 [T, E]: splitmix64((seed << 32) + t * E + e), top 24 bits -> [-1, 1) (exact)."""
    _, _, experts, _ = DIMS[workload]
    with np.errstate(over="ignore"):
        z = np.arange(tokens * experts, dtype=np.uint64) + np.uint64((LOGIT_SEED << 32)
                                                                      + 0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z ^= z >> np.uint64(31)
    u = (z >> np.uint64(40)).astype(np.float64) * 2.0 ** -24 * 2.0 - 1.0
    return u.astype(np.float32).reshape(tokens, experts)


def host_topk(workload, lg):
    """Top-K ids [T, K] by descending logit, ties to the smaller id; unique count; checksum."""
    k = DIMS[workload][3]
    ids = np.argsort(-lg, axis=1, kind="stable")[:, :k].astype(np.int32)
    flat = ids.reshape(-1).astype(np.int64)
    checksum = int((flat * (np.arange(flat.size, dtype=np.int64) % 997 + 1)).sum())
    return ids, len(np.unique(flat)), checksum


def floor_us(workload, tokens, unique):
    h, i, e, k = DIMS[workload]
    return max(min(e, unique) * 3 * h * i * 2.0 / HBM_BYTES_PER_S,
               6.0 * tokens * k * h * i / BF16_PEAK) * 1e6


def forward(torch, lg, hidden, w1t, w2t, ones, arange, dims):
    """The graph body: routing, FC1, SwiGLUStep, FC2, weighted combine. bf16 output [T, H]."""
    h, i, e, k = dims
    tokens = lg.shape[0]
    vals, ids = torch.topk(lg, k, dim=1)
    weights = torch.softmax(vals, dim=1).to(torch.bfloat16)
    flat = ids.reshape(-1)
    order = torch.sort(flat, stable=True).indices  # pair indices grouped by expert
    counts = torch.zeros(e, dtype=torch.int32, device=lg.device).scatter_add_(0, flat, ones)
    offs = torch.cumsum(counts, 0, dtype=torch.int32)
    x = hidden.index_select(0, order // k)
    gu = torch._grouped_mm(x, w1t, offs=offs)  # [T*K, 2I]: [up | gate]
    act = torch.clamp(torch.nn.functional.silu(gu[:, i:]), max=STEP_LIMIT)
    act = act * torch.clamp(gu[:, :i], -STEP_LIMIT, STEP_LIMIT)
    y = torch._grouped_mm(act, w2t, offs=offs)  # [T*K, H], expert order
    back = torch.empty_like(order).scatter_(0, order, arange)  # pair -> its row of y
    y = y.index_select(0, back).view(tokens, k, h)
    return torch.bmm(weights.unsqueeze(1), y).squeeze(1), ids


def check_torch():
    """torch, or None with the reason printed: no torch, no CUDA, not SM90+, no _grouped_mm."""
    try:
        import torch
    except ImportError:
        print("anchor_grouped_mm: torch is not installed; nothing measured")
        return None
    if not torch.cuda.is_available():
        print("anchor_grouped_mm: no CUDA device; nothing measured")
        return None
    if not hasattr(torch, "_grouped_mm"):
        print(f"anchor_grouped_mm: torch {torch.__version__} has no torch._grouped_mm "
              "(PyTorch >= 2.8 needed); nothing measured")
        return None
    major, minor = torch.cuda.get_device_capability(0)
    if major not in (9, 10):
        print(f"anchor_grouped_mm: sm_{major}{minor}: torch._grouped_mm takes its no-sync bf16 "
              "kernel on SM90 / SM100 only (the fallback cannot be graph-captured); nothing "
              "measured")
        return None
    return torch


def time_row(torch, workload, tokens, w1t, w2t, lg_host, reps, flush):
    h, i, e, k = DIMS[workload]
    dev = torch.device("cuda")
    gen = torch.Generator(device=dev).manual_seed(tokens)
    lg = torch.from_numpy(lg_host).to(dev)
    hidden = torch.randn(tokens, h, device=dev, dtype=torch.bfloat16, generator=gen)
    ones = torch.ones(tokens * k, dtype=torch.int32, device=dev)
    arange = torch.arange(tokens * k, device=dev)
    args = (torch, lg, hidden, w1t, w2t, ones, arange, DIMS[workload])
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            _, ids = forward(*args)  # warm-up outside the capture (kernel selection, pools)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out, ids = forward(*args)
    graph.replay()
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    us = []
    for _ in range(reps):
        flush.zero_()
        start.record()
        graph.replay()
        stop.record()
        stop.synchronize()
        us.append(start.elapsed_time(stop) * 1e3)
    nonfinite = int((~torch.isfinite(out.float())).sum().item())
    gpu_ids = np.sort(ids.cpu().numpy(), axis=1)
    del graph
    return statistics.median(us), gpu_ids, nonfinite


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workload", default="step35,fi")
    p.add_argument("--tokens", default=None)
    p.add_argument("--reps", type=int, default=None)
    p.add_argument("--out", default=None)
    p.add_argument("--routing-dir", default=None)
    p.add_argument("--budget", type=float, default=0.0)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--dry-run", action="store_true")
    a = p.parse_args()
    workloads = [w for w in a.workload.split(",") if w]
    for w in workloads:
        if w not in DIMS:
            p.error(f"--workload: must be step35 or fi, got {w}")
    tokens = ([int(t) for t in a.tokens.split(",") if t] if a.tokens
              else (QUICK_TOKENS if a.quick else ALL_TOKENS))
    if any(t <= 0 for t in tokens):
        p.error("--tokens: every T must be a positive integer")
    reps = a.reps if a.reps is not None else (5 if a.quick else 20)
    if reps < 1:
        p.error("--reps: must be >= 1")

    torch = None if a.dry_run else check_torch()
    if torch is None and not a.dry_run:
        return 0
    if torch is not None:
        print(f"anchor_grouped_mm on {torch.cuda.get_device_name(0)}, torch {torch.__version__}, "
              f"{reps} reps, L2 flush {FLUSH_BYTES >> 20} MiB")
        flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    t0, rows = time.monotonic(), []
    for w in workloads:
        h, i, e, k = DIMS[w]
        w1t = w2t = None
        for t in tokens:
            lg = logits(w, t)
            ids, unique, checksum = host_topk(w, lg)
            fl = floor_us(w, t, unique)
            mismatch = ""
            path = os.path.join(a.routing_dir, f"routing_{w}_T{t}.bin") if a.routing_dir else ""
            if path and os.path.exists(path):
                theirs = np.fromfile(path, dtype=np.int32)
                same = theirs.size == ids.size and bool((theirs == ids.reshape(-1)).all())
                mismatch = "  routing file: same ids" if same else "  ROUTING FILE DIFFERS"
            if a.dry_run:
                print(f"{w:7s} bf16 T={t:6d} torch experts {unique:3d}  floor {fl:9.1f} us  "
                      f"topk checksum {checksum}{mismatch}")
                continue
            if a.budget and time.monotonic() - t0 > a.budget:
                print(f"budget of {a.budget:.0f} s reached: no new rows")
                break
            if w1t is None:
                gen = torch.Generator(device="cuda").manual_seed(1)
                w1 = torch.randn(e, 2 * i, h, device="cuda", dtype=torch.bfloat16, generator=gen)
                w2 = torch.randn(e, h, i, device="cuda", dtype=torch.bfloat16, generator=gen)
                # [E, K, N] views of the [E, N, K] weights: K-contiguous, as the kernel takes them
                w1t, w2t = w1.mul_(h ** -0.5).transpose(1, 2), w2.mul_(i ** -0.5).transpose(1, 2)
            us, gpu_ids, nonfinite = time_row(torch, w, t, w1t, w2t, lg, reps, flush)
            if not (gpu_ids == np.sort(ids, axis=1)).all():
                mismatch += "  GPU TOP-K DIFFERS FROM THE HOST TOP-K"
            tflops = 6.0 * t * k * h * i / (us * 1e-6) * 1e-12
            print(f"{w:7s} bf16 T={t:6d} torch {us:10.1f} us  experts {unique:3d}  floor "
                  f"{fl:9.1f} us  {fl / us:5.2f} of floor  {tflops:7.1f} TFLOP/s"
                  f"{'  NON-FINITE OUTPUT' if nonfinite else ''}{mismatch}", flush=True)
            rows.append({"workload": w, "family": "bf16", "T": t, "us": round(us, 3),
                         "floor_us": round(fl, 3), "unique_experts": unique,
                         "path": "torch_grouped_mm", "tflops": round(tflops, 3),
                         "nonfinite": nonfinite})
            if a.out:
                with open(os.path.join(a.out, "anchor.json"), "w") as f:
                    json.dump(rows, f, indent=1)
        del w1t, w2t
        if torch is not None:
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
