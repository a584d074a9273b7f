# Run: PYTHONPATH=<build>/python python examples/python/bgmv_moe_lora.py   (numpy, CPU engine)
#   or add --cuda (torch CUDA tensors: the Cake kernels on torch's current stream).
# Exit 0 when y matches a float64 model of the LoRA delta (atol = rtol = 1e-2, spec bgmv §11).
"""MoE-LoRA with BGMV: the LoRA delta of a MoE layer for a batch whose requests use different
adapters. Every (token, expert) route of the router adds w * B[l, e] @ (A[l, e] @ x[t]) to y[t],
l being the token's adapter (-1: the base model, no delta)."""

import argparse
import sys

import numpy as np

import cakemoe

T, H, RANK, ADAPTERS, EXPERTS, TOP_K = 32, 2048, 16, 4, 128, 8  # Qwen3-30B-A3B-like MoE layer


def make_inputs(rng):
    x = rng.standard_normal((T, H), dtype=np.float32)
    lora_a = rng.standard_normal((ADAPTERS, EXPERTS, RANK, H), dtype=np.float32) * (0.5 / H**0.5)
    lora_b = rng.standard_normal((ADAPTERS, EXPERTS, H, RANK), dtype=np.float32) * (2 / RANK**0.5)
    # The router (outside cakemoe): top-k experts per token, softmax weights over the k.
    logits = rng.standard_normal((T, EXPERTS), dtype=np.float32)
    ids = np.argsort(-logits, axis=1)[:, :TOP_K]
    top = np.take_along_axis(logits, ids, axis=1)
    weights = np.exp(top - top.max(axis=1, keepdims=True))
    weights /= weights.sum(axis=1, keepdims=True)
    return dict(
        x=x,
        lora_a_weights=[lora_a],  # one slice; a fused gate/up LoRA would pass two
        lora_b_weights=[lora_b],
        sorted_token_ids=np.repeat(np.arange(T, dtype=np.int64), TOP_K),  # token-major routes
        expert_ids=ids.reshape(-1).astype(np.int64),
        lora_indices=rng.integers(-1, ADAPTERS, size=T).astype(np.int64),  # -1: base model
        topk_weights=weights.reshape(-1).astype(np.float32),
        num_experts=EXPERTS,
    )


def model(inputs):
    """float64 y [T, H] from the inputs as the kernels see them (weights rounded to 16 bits)."""
    x = inputs["x"].astype(np.float64)
    a, b = (inputs[k][0].astype(np.float64) for k in ("lora_a_weights", "lora_b_weights"))
    y = np.zeros((T, H))
    for p, (t, e) in enumerate(zip(inputs["sorted_token_ids"], inputs["expert_ids"])):
        lora = inputs["lora_indices"][t]
        if lora >= 0:
            y[t] += inputs["topk_weights"][p] * (b[lora, e] @ (a[lora, e] @ x[t]))
    return y


def convert(inputs, fn):
    """fn(name, array) applied to every array of the inputs (those in the weight lists too)."""
    return {k: [fn(k, w) for w in v] if isinstance(v, list) else
            fn(k, v) if hasattr(v, "dtype") else v for k, v in inputs.items()}


def is_16bit_operand(name, array):
    return name != "topk_weights" and str(array.dtype).endswith("float32")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cuda", action="store_true", help="torch CUDA tensors (default numpy)")
    args = parser.parse_args()
    inputs = make_inputs(np.random.default_rng(0))
    if args.cuda:  # x and the LoRA weights in bf16
        import torch

        def to_cuda(name, array):
            t = torch.from_numpy(array).cuda()
            return t.bfloat16() if is_16bit_operand(name, array) else t

        inputs = convert(inputs, to_cuda)
        as_numpy = convert(inputs, lambda k, v: v.cpu().float().numpy() if v.is_floating_point()
                           else v.cpu().numpy())
    else:  # numpy has no bf16: fp16
        inputs = convert(inputs, lambda k, v: v.astype(np.float16) if is_16bit_operand(k, v) else v)
        as_numpy = inputs

    plan = cakemoe.prepare_bgmv_moe(**inputs)  # validates, picks the plan, allocates once
    y = plan.run()  # y_accum [T, H] float32; run() again after updating x in place
    if args.cuda:
        torch.cuda.synchronize()
        y = y.cpu().numpy()
    want = model(as_numpy)
    ok = np.allclose(y, want, atol=1e-2, rtol=1e-2)
    print(f"backend {plan.backend_used}, variant {plan.variant}: y [{T}, {H}], max |y - model| "
          f"{np.abs(y - want).max():.2e}, tokens without a LoRA all zero: "
          f"{not y[as_numpy['lora_indices'] < 0].any()} -> {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
