# Run (>= 2 GPUs, a CUDA build of cakemoe with NCCL, torch), one process per GPU:
#   NCCL_NVLS_ENABLE=0 PYTHONPATH=<build>/python \
#     torchrun --nproc-per-node 2 examples/ep/ep_layer_torch.py [--tokens 64] [--scheme all_gather]
# Exit 0 on every rank when the EP output passes the bf16 check against the one-GPU layer and a
# CUDA-graph replay gives the eager bits.
"""The StepFun MoE layer under expert parallelism from Python: a torch.distributed process group
(gloo here; nccl works too), a cakemoe communicator over the same ranks, and one rank's EP layer
(its own tokens, its share of the experts). Every rank builds the same random bf16 layer from a
fixed seed, so each can also run the plain single-GPU layer on all tokens and compare."""

import argparse
import os
import sys

import torch
import torch.distributed as dist

import cakemoe
from cakemoe import stepfun_ep


def parse():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tokens", type=int, default=64, help="T of each rank")
    p.add_argument("--experts", type=int, default=32)
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--inter", type=int, default=512)
    p.add_argument("--top-k", type=int, default=4)
    p.add_argument("--scheme", default="all_to_all", choices=["all_to_all", "all_gather"])
    p.add_argument("--backend", default="gloo", choices=["gloo", "nccl"])
    return p.parse_args()


def main():
    a = parse()
    # NVLink multicast stays off on the shared machines; cakemoe leaves NCCL's switches to us.
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local_rank)
    dist.init_process_group(a.backend)  # torchrun's RANK / WORLD_SIZE / MASTER_ADDR
    rank, world = dist.get_rank(), dist.get_world_size()
    if a.experts % world:
        raise SystemExit(f"--experts {a.experts} must be a multiple of the world size {world}")

    # The communicator: rank 0 makes the NCCL unique id, the process group shares it.
    comm = stepfun_ep.Communicator.from_process_group()

    # The same layer and tokens on every rank (fixed seed), made on the CPU.
    g = torch.Generator().manual_seed(2024)
    e, h, i, k, t = a.experts, a.hidden, a.inter, a.top_k, a.tokens
    w1 = (torch.randn(e, 2 * i, h, generator=g) / h**0.5).bfloat16().cuda()
    w2 = (torch.randn(e, h, i, generator=g) / i**0.5).bfloat16().cuda()
    hidden = torch.randn(world * t, h, generator=g).bfloat16().cuda()
    logits = torch.randn(world * t, e, generator=g).cuda()

    # This rank: tokens [rank * t, (rank + 1) * t), experts [offset, offset + e / world).
    per_rank = e // world
    offset = rank * per_rank
    own = slice(rank * t, (rank + 1) * t)
    weights = cakemoe.prepare_weights(w1, w2, family="bf16", step_limits=7.0,
                                      local_expert_offset=offset, local_num_experts=per_rank)
    layer = stepfun_ep.prepare_ep(comm, scheme=a.scheme, family="bf16",
                                  hidden_states=hidden[own], routing_logits=logits[own],
                                  num_experts=e, top_k=k, local_expert_offset=offset,
                                  local_num_experts=per_rank, **weights.tensors())
    layer.launch()  # every rank launches the same number of times
    torch.cuda.synchronize()
    out = layer.output().clone()

    # The same launch from a CUDA graph.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        layer.launch()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        layer.launch()
    graph.replay()
    torch.cuda.synchronize()
    replay_ok = torch.equal(layer.output().view(torch.int16), out.view(torch.int16))

    # The plain layer with every expert on all tokens, this rank's rows.
    full = cakemoe.prepare_weights(w1, w2, family="bf16", step_limits=7.0)
    plain = cakemoe.prepare_stepfun_moe(family="bf16", hidden_states=hidden,
                                        routing_logits=logits, num_experts=e, top_k=k,
                                        **full.tensors())
    plain.launch()
    torch.cuda.synchronize()
    ref = plain.outputs()[0][own].float()
    diff = out.float() - ref
    frobenius = (diff.norm() / ref.norm()).item()
    within = (diff.abs() <= 0.1 + 0.85 * ref.abs()).float().mean().item()
    ok = replay_ok and frobenius <= 1e-2 and within >= 0.925 and not out.isnan().any()
    s = layer.sizes
    print(f"rank {rank}/{world} {a.scheme}: T {t}, experts [{offset}, {offset + per_rank}), "
          f"received {layer.received_counts().tolist()}, dispatch {s.dispatch_wire_bytes} B, "
          f"combine {s.combine_wire_bytes} B on the wire; vs one GPU: rel. Frobenius "
          f"{frobenius:.2e}, within {within:.4f}; graph replay {'==' if replay_ok else '!='} "
          f"eager: {'PASS' if ok else 'FAIL'}", flush=True)
    del layer, comm  # the communicator goes with the last launch holding it
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
