#!/usr/bin/env python3
"""Writes the seed corpus of the cakemoe fuzz target (tests/fuzz/corpus) and, with
--regressions, the reproducers of known findings (tests/fuzz/regressions).

Each file is one valid-ish call of one entry, in the byte format that fuzz_input.h decodes and
each entry's comment describes (entry id, content seed, dims, flags; a tensor's flag byte 0 keeps
its natural shape and a real buffer). Run it after changing that format:

    python3 tests/fuzz/make_corpus.py [--regressions]
"""
import argparse
import os
import struct

ENTRIES = ["tensor_view", "tensor_empty", "bounds", "plans", "routing", "fc1", "requant", "fc2",
           "finalize", "moe", "prepare_weights", "prepare_activations", "bgmv", "config",
           "config_layer", "handles"]
BF16, FP8, MXFP8, NVFP4, NVFP4TOK = range(5)
FAMILIES = {"bf16": BF16, "fp8": FP8, "mxfp8": MXFP8, "nvfp4": NVFP4, "nvfp4tok": NVFP4TOK}
# fuzz_input.h's kSpecialDims, in order.
SPECIAL_DIMS = [0, -1, -2, -64, 2**31 - 1, 2**31, -2**31, 2**32 - 1, 2**32, 2**32 + 1, 65535,
                65536, 2**40, 2**48, 2**53, 2**62, 2**63 - 1, -2**63, 2**63 - 2, -2**63 + 1,
                -65536, 2**30, 3 * 2**30, 2**20, 2**24, 2**46, 2**57, 2**61, -2**40,
                (2**63 - 1) // 3 + 1, 46341, 2**28]


def dim(v):
    if 0 <= v < 0xA0:
        return [v]
    if v % 64 == 0 and 64 <= v <= 1024:
        return [0x9F + v // 64]
    if 0 <= v < 2**20:
        return [0xB0 | (v >> 16), v & 0xFF, (v >> 8) & 0xFF]
    if v in SPECIAL_DIMS:
        return [0xC0 + SPECIAL_DIMS.index(v)]
    return [0xE0] + list(struct.pack("<q", v))


def scalar(x):
    """fuzz_input.h scalar(): b/8 for b < 0x80, else a raw double."""
    if 0 <= x * 8 < 0x80 and float(x * 8).is_integer():
        return [int(x * 8)]
    if x == 1.0 / 2688.0:
        return [0x87]
    return [0xA0] + list(struct.pack("<d", x))


def scalar_f(x):
    if 0 <= x * 8 < 0x80 and float(x * 8).is_integer():
        return [int(x * 8)]
    return [0xA0] + list(struct.pack("<f", x))


def text(s):
    b = s.encode()
    return [len(b)] + list(b)


def natural(n):
    """n tensor flag bytes keeping the natural views."""
    return [0] * n


def problem(family, t=6, k=2, e=4, off=0, e_loc=4, h=128, i=64, tile=8):
    return [FAMILIES[family]] + dim(t) + dim(k) + dim(e) + dim(off) + dim(e_loc) + dim(h) + \
        dim(i) + dim(tile)


def bounds(t, k, e, tile):
    pairs = t * k
    ctas = min(pairs, e) + max(pairs - e, 0) // tile
    return ctas, ctas * tile


def entry(name, body, seed=1):
    return bytes([ENTRIES.index(name), seed] + body)


# A unified config, MoEConfig fields in read_config order: E (4), K 2, renormalize, no groups,
# `quant`, I 64, all experts local, SwiGLUStep 7.
def config(quant, per_token=0, backend=None, routing_input=0, e=4):
    b = dim(e) + dim(2) + [1, 0, 0] + dim(0) + dim(0) + [0, quant, 0, per_token] + dim(64) + \
        dim(0) + dim(-1) + dim(0) + [0] + scalar_f(7.0)
    b += [1] + text(backend) if backend is not None else [0]
    return b + [routing_input, 1] + dim(8192) + [0, 0]


def seeds():
    out = {}
    # TensorView constructors / helpers; Tensor::empty; bounds; plans and names.
    out["tensor_view-init2"] = entry("tensor_view", [0, 2] + dim(4) + dim(8) + [2, 0, 0, 0, 1, 1])
    out["tensor_view-vector4"] = entry("tensor_view", [1, 4] + dim(2) + dim(3) + dim(4) + dim(5) +
                                       [0, 0, 0, 0, 0xFF, 0])
    out["tensor_view-strides"] = entry("tensor_view", [2, 2] + dim(3) + dim(4) + [0] + dim(8) +
                                       dim(1) + [2, 0, 0, 0, 1, 0])
    out["tensor_view-raw"] = entry("tensor_view", [3, 2] + dim(3) + dim(4) + [7, 0, 0, 0] +
                                   dim(4) + dim(1) + [0, 1])
    out["tensor_empty-bf16"] = entry("tensor_empty", [2] + dim(3) + dim(5) + [0, 0, 0, 0, 1])
    out["tensor_empty-int32-host"] = entry("tensor_empty", [3] + dim(2) + dim(3) + dim(4) +
                                           [7, 0, 0, 1, 0xFF])
    out["tensor_empty-default-alloc"] = entry("tensor_empty", [1] + dim(64) + [2, 0, 0, 2, 0])
    out["bounds-ctas"] = entry("bounds", dim(6) + dim(2) + dim(4) + dim(8) + [0])
    out["bounds-padded"] = entry("bounds", dim(2048) + dim(8) + dim(288) + dim(128) + [1])
    plan_problem = dim(6) + dim(2) + dim(4) + dim(128) + dim(64) + [0, 0, 0]
    out["plans-nvfp4"] = entry("plans", [NVFP4] + plan_problem + [0])
    out["plans-default-bf16"] = entry("plans", [BF16] + plan_problem + [1])
    out["plans-print"] = entry("plans", [MXFP8] + plan_problem + [2, MXFP8] + dim(8) + [1] +
                               text("reference") + text("reference") + text("cpu") + text("cpu"))
    out["plans-names"] = entry("plans", [FP8] + plan_problem + [3, NVFP4TOK, 2] + text("nvfp4"))

    # Stages. Routing tables of T = 6, K = 2, E = E_loc = 4, tile 8: 5 CTAs, 40 padded rows.
    ctas, rows = bounds(6, 2, 4, 8)
    routing_tail = natural(12)
    out["routing-logits-bf16"] = entry("routing", problem("bf16") + [1, 0, 0] + scalar(1.0) +
                                       [1, 0] + routing_tail)
    out["routing-logits-fp32-oneshot"] = entry("routing", problem("bf16") + [2, 1, 2] +
                                               scalar(2.5) + [0, 1] + routing_tail)
    out["routing-ids"] = entry("routing", problem("bf16") + [1, 0, 1] + scalar(1.0) + [1, 0] +
                               routing_tail)
    out["routing-local-experts"] = entry("routing", problem("bf16", e=8, off=4, e_loc=4) +
                                         [3, 0, 0] + scalar(1.0) + [1, 0] + routing_tail)
    out["routing-tile128"] = entry("routing", problem("bf16", t=3, tile=128) + [1, 0, 0] +
                                   scalar(1.0) + [1, 0] + routing_tail)
    for fam in FAMILIES:
        body = problem(fam) + [1, 0, 1] + natural(11) + dim(ctas) + [0] + dim(rows) + [0] + \
            natural(2)
        out["fc1-" + fam] = entry("fc1", body)
        body = problem(fam) + [1, 0, 1] + natural(8) + dim(ctas) + [0, 0]
        out["fc2-" + fam] = entry("fc2", body)
    out["fc1-bf16-tile128"] = entry("fc1", problem("bf16", t=3, tile=128) + [2, 0, 1] +
                                    natural(11) + dim(1) + [0] + dim(128) + [0] + natural(2))
    out["requant-r8c4"] = entry("requant", dim(64) + dim(64) + dim(12) + [1] +
                                scalar(1.0 / 2688.0) + [1, 0, 1] + natural(5))
    out["requant-r128c4-oneshot"] = entry("requant", dim(128) + dim(128) + dim(12) + [2] +
                                          scalar(1.0 / 2688.0) + [2, 0, 1] + natural(5))
    out["requant-linear"] = entry("requant", dim(16) + dim(64) + dim(4) + [0] + scalar(1.0) +
                                  [1, 0, 1] + natural(5))
    out["finalize-bf16-weights"] = entry("finalize", dim(6) + dim(2) + dim(128) + dim(rows) +
                                         dim(4) + [0, 1, 0, 1] + natural(3) + dim(rows) + [0, 0])
    out["finalize-fp32-weights"] = entry("finalize", dim(6) + dim(2) + dim(128) + dim(rows) +
                                         dim(4) + [1, 2, 0, 1] + natural(3) + dim(rows) + [0, 0])

    # The layer: per family from logits; precomputed ids; a given output; no finalize.
    layer_scalars = dim(8) + scalar(1.0 / 2688.0) + scalar(1.0)
    for fam in FAMILIES:
        out["moe-" + fam] = entry("moe", problem(fam) + [1, 0, 0] + layer_scalars + natural(15))
    out["moe-bf16-ids"] = entry("moe", problem("bf16") + [1, 0, 1] + layer_scalars + natural(15))
    out["moe-nvfp4-output-oneshot"] = entry("moe", problem("nvfp4") + [2, 0, 8] + layer_scalars +
                                            natural(15))
    out["moe-fp8-no-finalize"] = entry("moe", problem("fp8") + [3, 0, 16] + layer_scalars +
                                       natural(15))

    # Weight and activation preparation.
    for fam in FAMILIES:
        body = [FAMILIES[fam]] + dim(4) + dim(128) + dim(64) + [1] + scalar_f(7.0) + [0] + \
            dim(0) + dim(-1) + scalar(1.0) + scalar(0.0) + natural(2)
        out["prepare_weights-" + fam] = entry("prepare_weights", body)
        out["prepare_activations-" + fam] = entry(
            "prepare_activations", [FAMILIES[fam]] + dim(6) + dim(128) + scalar(1.0) + [0])
    out["prepare_weights-local-limits"] = entry(
        "prepare_weights", [NVFP4] + dim(4) + dim(128) + dim(64) + [3, 2] + scalar_f(7.0) + [1] +
        scalar_f(3.5) + dim(1) + dim(2) + scalar(0.5) + scalar(2.0) + natural(2))

    # BGMV: T 4, H 128, R 16, F 128, one slice, L 2, E 8, 8 pairs.
    def bgmv(slices=1, dtype=0, grouped=0, remap=0, how=1, h=128, f=128, r=16, t=4, p=8,
             shrink=0, y=0):
        head = dim(t) + dim(h) + dim(r) + dim(f) + [slices] + dim(2) + dim(8) + dim(p) + \
            dim(8) + [dtype, 0, 0, grouped, remap, 0, how, 0]
        return head + natural(1 + 2 * slices + 4) + [shrink, y]

    out["bgmv-bf16"] = entry("bgmv", bgmv())
    out["bgmv-fp16-two-slices"] = entry("bgmv", bgmv(slices=2, dtype=1))
    out["bgmv-grouped-rerun"] = entry("bgmv", bgmv(grouped=2, remap=1, how=2))
    out["bgmv-order-remap"] = entry("bgmv", bgmv(grouped=1, remap=2, t=8, p=16))
    out["bgmv-given-outputs"] = entry("bgmv", bgmv(shrink=1, y=1, how=3))
    out["bgmv-rank64-wide"] = entry("bgmv", bgmv(r=64, f=256, t=6, p=12))

    out["config-validate-nvfp4"] = entry("config", config(5) + [0])
    out["config-validate-bf16tok"] = entry("config", config(5, per_token=1) + [0])
    out["config-family-of-mxfp8"] = entry("config", config(3) + [1, MXFP8, 0])
    out["config-names"] = entry("config", config(0) + [2, 1, 5, 0] + dim(90))
    out["config-env-auto"] = entry("config", config(1, backend="cake_stepfun") + [3, 3])
    layer_tail = dim(6) + dim(128) + [0] + scalar_f(7.0) + scalar(1.0) + scalar(0.0)
    out["config_layer-bf16-run"] = entry("config_layer", config(0) + layer_tail + [4, 0, 0] +
                                         natural(7))
    out["config_layer-nvfp4-prepare-moe"] = entry("config_layer", config(5) + layer_tail +
                                                  [3, 0, 1] + natural(7))
    out["config_layer-mxfp8-ids-args"] = entry("config_layer", config(3, routing_input=1) +
                                               layer_tail + [2, 0, 0] + natural(7))

    out["handles-stage"] = entry("handles", [0, 1])
    out["handles-moe-plan"] = entry("handles", [1, 2])
    out["handles-bgmv-run"] = entry("handles", [2, 0, 0])
    out["handles-warning-hook"] = entry("handles", [3, 0])
    return out


NULL = 0x04  # a tensor flag byte: natural shape, null data


def regressions():
    """One input per finding of issue 25 that the fuzz target reproduces."""
    out = {}
    ctas, rows = bounds(6, 2, 4, 8)
    routing_tail = natural(12)
    # max_ctas * tile overflows (2^64 wraps to 0): the tables pass as [0] and launch() writes.
    out["routing-huge-tile"] = entry("routing", problem("bf16", tile=2**62) + [1, 0, 0] +
                                     scalar(1.0) + [1, 0] + routing_tail)
    # local_expert_offset + local_num_experts overflows past the range check.
    out["routing-offset-overflow"] = entry("routing", problem("bf16", off=2**63 - 1, e_loc=2) +
                                           [1, 0, 0] + scalar(1.0) + [1, 0] + routing_tail)
    # num_non_exiting_ctas larger than the CTA tables.
    fc1_head = problem("bf16") + [1, 0, 1] + natural(11)
    out["fc1-ctas-past-tables"] = entry("fc1", fc1_head + dim(1000) + [0] + dim(rows) + [0] +
                                        natural(2))
    out["fc2-ctas-past-tables"] = entry("fc2", problem("bf16") + [1, 0, 1] + natural(8) +
                                        dim(1000) + [0, 0])
    out["fc2-huge-tile"] = entry("fc2", problem("bf16", tile=2**62) + [1, 0, 1] + natural(8) +
                                 dim(1) + [0, 0])
    # BGMV with L = 0 and a huge feat_out: the default y_accum size overflows.
    head = dim(4) + dim(128) + dim(16) + dim(2**62) + [1] + dim(0) + dim(8) + dim(8) + dim(8) + \
        [0, 0, 0, 0, 0, 0, 1, 0]
    out["bgmv-no-loras-huge-feat-out"] = entry("bgmv", head + natural(7) + [0, 0])
    # A negative hidden size acts as a wildcard in the output shape check; the launch then sizes
    # a vector from it (std::length_error escapes).
    out["finalize-negative-hidden"] = entry("finalize", dim(6) + dim(2) + dim(-1) + dim(rows) +
                                            dim(4) + [1, 2, 0, 1] + natural(3) + dim(rows) +
                                            [0, 0])
    # BGMV on the CPU has no size bound: P * R = 2^32 makes prepare allocate an 8 GiB shrink_out.
    head = dim(4) + dim(64) + dim(4096) + dim(64) + [1] + dim(1) + dim(1) + dim(2**20) + dim(1) + \
        [0, 0, 0, 0, 0, 0, 0, 0]
    out["bgmv-cpu-no-size-bound"] = entry("bgmv", head + natural(7) + [0, 0])
    # T * 8 bytes of lora_indices overflows int64: the view is accepted and read.
    head = dim(2**62) + dim(64) + dim(16) + dim(64) + [1] + dim(2) + dim(8) + dim(8) + dim(8) + \
        [0, 0, 0, 0, 0, 0, 0, 0]
    out["bgmv-huge-tokens"] = entry("bgmv", head + natural(7) + [0, 0])
    # Outputs are allocated from the shape of a null hidden (2^30 x 2^30).
    out["prepare_activations-allocates-before-checks"] = entry(
        "prepare_activations", [BF16] + dim(2**30) + dim(2**30) + scalar(1.0) + [0])
    # Tensor::empty of [2^32, 2^32] overflows its size arithmetic.
    out["tensor_empty-overflowing-shape"] = entry("tensor_empty", [2] + dim(2**32) * 2 +
                                                  [0, 0, 0, 0, 0])
    # Null data with a valid shape.
    bgmv_head = dim(4) + dim(128) + dim(16) + dim(128) + [1] + dim(2) + dim(8) + dim(8) + \
        dim(8) + [0, 0, 0, 0, 0, 0, 1, 0]
    out["bgmv-null-x"] = entry("bgmv", bgmv_head + [NULL] + natural(6) + [0, 0])
    out["bgmv-null-sorted-token-ids"] = entry("bgmv", bgmv_head + natural(3) + [NULL] +
                                              natural(3) + [0, 0])
    out["bgmv-null-lora-indices"] = entry("bgmv", bgmv_head + natural(5) + [NULL] + natural(1) +
                                          [0, 0])
    out["requant-null-output"] = entry("requant", dim(64) + dim(64) + dim(12) + [1] +
                                       scalar(1.0 / 2688.0) + [1, 0, 1] + [0, 0, NULL, 0, 0])
    out["finalize-null-output"] = entry("finalize", dim(6) + dim(2) + dim(128) + dim(rows) +
                                        dim(4) + [0, 1, 0, 1] + natural(3) + dim(rows) +
                                        [0, NULL])
    weights_head = [BF16] + dim(4) + dim(128) + dim(64) + [1] + scalar_f(7.0) + [0] + dim(0) + \
        dim(-1) + scalar(1.0) + scalar(0.0)
    out["prepare_weights-null-w1"] = entry("prepare_weights", weights_head + [NULL, 0])
    out["prepare_activations-null-hidden"] = entry(
        "prepare_activations", [BF16] + dim(6) + dim(128) + scalar(1.0) + [NULL])
    # Out-of-range enums.
    out["prepare_activations-family-148"] = entry(
        "prepare_activations", [0xF0, 148] + dim(6) + dim(128) + scalar(1.0) + [0])
    out["prepare_weights-family-148"] = entry(
        "prepare_weights", [0xF0, 148] + weights_head[1:] + natural(2))
    # Public TensorView fields: numel() of huge dims overflows; ndim outside [0, 6] indexes past
    # shape[] (numel, is_contiguous, describe, sizes).
    out["tensor_view-numel-overflow"] = entry("tensor_view", [3, 2] + dim(2**32) + dim(2**32) +
                                              [0, 0, 0, 0] + dim(2**32) + dim(1) + [0, 1])
    out["tensor_view-ndim-7"] = entry("tensor_view", [3, 7] + dim(1) * 7 + [0, 0, 0, 0] +
                                      dim(1) * 6 + [0, 1])
    out["tensor_view-negative-ndim"] = entry("tensor_view", [3, 0xFF, 0, 0, 0, 0, 0, 1])
    # The unified prepare_weights builds E_loc default step limits before checking w1's data
    # (E = 2^40, w1 [E, 2I, H] with null data: a 4 TiB vector).
    out["config_layer-huge-experts-allocates"] = entry(
        "config_layer", config(0, e=2**40) + dim(6) + dim(128) + [0] + scalar_f(7.0) +
        scalar(1.0) + scalar(0.0) + [0, 0, 0] + natural(7))
    # next_pow2 of a huge T never ends.
    out["plans-huge-tokens"] = entry("plans", [NVFP4] + dim(2**62 + 1) + dim(2) + dim(4) +
                                     dim(128) + dim(64) + [0, 0, 0, 1])
    # The 2E histogram is allocated before num_experts is checked (E = 2^31: 16 GiB).
    out["moe-huge-experts-allocates"] = entry(
        "moe", problem("bf16", e=2**31) + [0, 0, 0] + dim(8) + scalar(1.0 / 2688.0) +
        scalar(1.0) + natural(11) + [NULL] + natural(3))
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--regressions", action="store_true",
                        help="write the reproducers of known findings instead of the seeds")
    parser.add_argument("--out", help="folder (default: corpus/ or regressions/ beside this)")
    args = parser.parse_args()
    kind = "regressions" if args.regressions else "corpus"
    out = args.out or os.path.join(os.path.dirname(os.path.abspath(__file__)), kind)
    files = regressions() if args.regressions else seeds()
    os.makedirs(out, exist_ok=True)
    for name, data in sorted(files.items()):
        with open(os.path.join(out, name), "wb") as f:
            f.write(data)
    print(f"wrote {len(files)} files to {out}")


if __name__ == "__main__":
    main()
