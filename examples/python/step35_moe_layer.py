# Run (torch; a CUDA GPU with cakemoe's kernels, else the CPU engine): PYTHONPATH=<build>/python \
#   python examples/python/step35_moe_layer.py [--tokens 8] [--ep-size 8 --ep-rank 0] [--device cpu]
# Exit 0 when the graph replay equals the eager launch (CUDA) and the layer matches a float model.
"""A Step-3.5 MoE layer (H 4096, I 1280, 288 experts, top-8) as a torch nn.Module on cakemoe's
StepFun kernels: the router runs outside (sigmoid + bias selection, precomputed ids and weights),
the nvfp4 weights are prepared once, and the decode step is one CUDA graph replay. With expert
parallelism each rank holds num_experts / ep_size experts (EP8: 36) and adds their share."""

import argparse
import sys

import torch

import cakemoe

H, I, E, K, LIMIT, ROUTED_SCALING = 4096, 1280, 288, 8, 7.0, 3.0  # spec stepfun §11


def route(logits, bias):
    """Step-3.5 router: top-k of sigmoid + bias, weights = the unbiased sigmoids renormalized,
    times the routed scaling factor. Returns int32 ids and float32 weights, [T, K]."""
    scores = torch.sigmoid(logits.float())
    ids = torch.topk(scores + bias, K, dim=-1).indices
    weights = scores.gather(-1, ids)
    weights = weights / (weights.sum(-1, keepdim=True) + 1e-20) * ROUTED_SCALING
    return ids.int(), weights


class Step35MoE(torch.nn.Module):
    """The routed experts [offset, offset + w1.shape[0]) of one layer, nvfp4 on cakemoe."""

    def __init__(self, w1, w2, *, expert_offset, num_tokens, hidden_amax):
        super().__init__()
        device = w1.device
        self.a_gs = 448.0 * 6.0 / hidden_amax  # static activation calibration (nvfp4 encode)
        # Once per model load: quantize and lay out the weights (w1 rows [up; gate]).
        self.weights = cakemoe.prepare_weights(w1, w2, family="nvfp4", step_limits=LIMIT,
                                               hidden_states_scale_global=self.a_gs)
        # Static inputs of the captured step; forward() refills them in place.
        act = self._quantize(torch.zeros(num_tokens, H, dtype=torch.bfloat16, device=device))
        self.x, self.x_scale = act.hidden_states, act.hidden_states_scale
        # Placeholder routes until forward() fills them: K distinct ids per token (spec §2.2).
        self.ids = torch.arange(K, dtype=torch.int32, device=device).repeat(num_tokens, 1)
        self.topk_weights = torch.zeros(num_tokens, K, dtype=torch.float32, device=device)
        self.launch = cakemoe.prepare_stepfun_moe(
            family="nvfp4", hidden_states=self.x, hidden_states_scale=self.x_scale,
            topk_ids=self.ids, topk_weights=self.topk_weights, num_experts=E, top_k=K,
            local_expert_offset=expert_offset, local_num_experts=w1.shape[0],
            **self.weights.tensors())
        (self.out,) = self.launch.outputs()  # bf16 [T, H], rewritten by every launch
        self.launch.launch()  # eager warm-up (module loading) before the capture
        self.graph = None  # the CPU engine runs each launch at once: nothing to capture
        if device.type == "cuda":
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self.launch.launch()  # routing -> FC1 -> FC2 -> finalize, no allocation, no sync

    def _quantize(self, hidden):
        # NOTE: activation quantization runs outside the graph (in a model, the previous layer's
        # epilogue would emit nvfp4 directly).
        return cakemoe.prepare_activations(hidden, family="nvfp4",
                                           hidden_states_scale_global=self.a_gs)

    def forward(self, hidden, topk_ids, topk_weights, *, eager=False):
        act = self._quantize(hidden)
        self.x.copy_(act.hidden_states)
        self.x_scale.copy_(act.hidden_states_scale)
        self.ids.copy_(topk_ids)
        self.topk_weights.copy_(topk_weights)
        if eager or self.graph is None:
            self.launch.launch()
        else:
            self.graph.replay()
        return self.out.clone()


def float_model(hidden, ids, weights, w1, w2, offset):
    """sum_k w * W2_e SwiGLUStep(W1_e x) over the local experts, in float32."""
    out = torch.zeros(hidden.shape, dtype=torch.float32, device=hidden.device)
    for e in range(w1.shape[0]):
        token, slot = torch.nonzero(ids == offset + e, as_tuple=True)
        if token.numel() == 0:
            continue
        h = hidden[token].float() @ w1[e].float().t()
        up, gate = h[:, :I], h[:, I:]
        act = torch.clamp(torch.nn.functional.silu(gate), max=LIMIT) * up.clamp(-LIMIT, LIMIT)
        out.index_add_(0, token, weights[token, slot, None] * (act @ w2[e].float().t()))
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=8, help="decode batch (default 8)")
    parser.add_argument("--ep-size", type=int, default=8, help="expert-parallel ranks (1: all)")
    parser.add_argument("--ep-rank", type=int, default=0)
    parser.add_argument("--device", choices=("cuda", "cpu"),
                        default="cuda" if torch.cuda.is_available() else "cpu",
                        help="cuda (default when available) or cpu (the reference engine, slow: "
                             "use a large --ep-size)")
    args = parser.parse_args()
    if E % args.ep_size or not 0 <= args.ep_rank < args.ep_size:
        parser.error(f"--ep-size must divide {E} and --ep-rank be in [0, ep-size)")
    local = E // args.ep_size
    offset = args.ep_rank * local
    gen = torch.Generator(device=args.device).manual_seed(0)
    randn = lambda *shape, scale: (torch.randn(*shape, generator=gen, device=args.device) * scale
                                   ).bfloat16()
    w1, w2 = randn(local, 2 * I, H, scale=H**-0.5), randn(local, H, I, scale=I**-0.5)
    layer = Step35MoE(w1, w2, expert_offset=offset, num_tokens=args.tokens, hidden_amax=8.0)

    hidden = randn(args.tokens, H, scale=1.0)
    ids, weights = route(randn(args.tokens, E, scale=1.0), torch.zeros(E, device=args.device))
    out = layer(hidden, ids, weights)
    eager = layer(hidden, ids, weights, eager=True)
    want = float_model(hidden, ids, weights, w1, w2, offset)
    rel = ((out.float() - want).norm() / want.norm().clamp_min(1e-30)).item()

    step = "eager launches on the CPU engine"
    if layer.graph is not None:
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(100):
            layer.graph.replay()
        stop.record()
        torch.cuda.synchronize()
        step = f"decode step {start.elapsed_time(stop) * 10:.1f} us (graph replay)"
    same = torch.equal(out, eager)
    ok = same and rel <= 0.3  # nvfp4: x, W1, FC1 output and W2 in 4 bits
    print(f"experts [{offset}, {offset + local}) of {E}, T={args.tokens}: {step}, "
          f"{'graph == eager' if layer.graph is not None else 'two launches equal'}: {same}, "
          f"rel. error vs float model {rel:.3f} (bar 0.3) -> {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
