"""Shared pieces of the Python BGMV tests: random problems and the fp64 oracle of spec bgmv §2,
written in numpy independently of the library."""

import numpy as np


def make_problem(rng, T, H, R, k, L, E, S=1, F=None, dtype=np.float16, pad=2, no_lora_every=5):
    """Random inputs in arbitrary pair order, with `pad` padding pairs (token -1 and T) and every
    `no_lora_every`-th token without a LoRA."""
    F = H if F is None else F
    x = rng.uniform(-1, 1, (T, H)).astype(dtype)
    lora_a = [rng.uniform(-0.05, 0.05, (L, E, R, H)).astype(dtype) for _ in range(S)]
    lora_b = [rng.uniform(-0.05, 0.05, (L, E, F, R)).astype(dtype) for _ in range(S)]
    tokens = np.repeat(np.arange(T), k)
    experts = np.concatenate([rng.choice(E, k, replace=False) for _ in range(T)])
    order = rng.permutation(T * k)
    tokens, experts = tokens[order], experts[order]
    if pad:
        tokens = np.concatenate([tokens, np.array([-1, T] * ((pad + 1) // 2))[:pad]])
        experts = np.concatenate([experts, np.zeros(pad, dtype=experts.dtype)])
    P = tokens.shape[0]
    lora_indices = rng.integers(0, L, T)
    lora_indices[::no_lora_every] = -1
    topk_weights = rng.uniform(0.1, 1.0, P).astype(np.float32)
    return dict(
        x=x,
        lora_a_weights=lora_a,
        lora_b_weights=lora_b,
        sorted_token_ids=tokens.astype(np.int64),
        expert_ids=experts.astype(np.int64),
        lora_indices=lora_indices.astype(np.int64),
        topk_weights=topk_weights,
        num_experts=E,
    )


def oracle(problem, shrink_rows=None):
    """fp64 y [T, S*F] and the shrink rows rounded to the weight dtype [S, P, R]. With
    `shrink_rows` (e.g. a plan's shrink_out) the expand uses those rows instead of its own."""
    x = problem["x"]
    A, B = problem["lora_a_weights"], problem["lora_b_weights"]
    tokens, experts = problem["sorted_token_ids"], problem["expert_ids"]
    loras, w = problem["lora_indices"], problem["topk_weights"]
    T = x.shape[0]
    S, F, R = len(A), B[0].shape[2], A[0].shape[2]
    P = tokens.shape[0]
    y = np.zeros((T, S * F))
    rows = np.zeros((S, P, R), dtype=x.dtype)
    for p in range(P):
        t = int(tokens[p])
        if t < 0 or t >= T or loras[t] < 0:
            continue
        l, e = int(loras[t]), int(experts[p])
        for s in range(S):
            exact = A[s][l, e].astype(np.float64) @ x[t].astype(np.float64)
            rows[s, p] = exact.astype(x.dtype)
            used = rows[s, p] if shrink_rows is None else shrink_rows[s, p]
            y[t, s * F:(s + 1) * F] += float(w[p]) * (
                B[s][l, e].astype(np.float64) @ used.astype(np.float64)
            )
    return y, rows
