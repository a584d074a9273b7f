"""cakemoe.prepare_bgmv_moe from Python with torch CUDA tensors: bits against the CPU engine run
through the same API, graph semantics with torch streams and torch.cuda.graph, typed errors."""

import os
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
sys.path.insert(0, os.path.dirname(__file__))
import cakemoe  # noqa: E402
from bgmv_oracle import make_problem, oracle  # noqa: E402

if not (cakemoe.with_cuda and torch.cuda.is_available()):
    pytest.skip("needs a CUDA build of cakemoe and a CUDA device", allow_module_level=True)

TENSOR_KEYS = ("x", "sorted_token_ids", "expert_ids", "lora_indices", "topk_weights")


def to_torch(problem, dtype, device):
    """The numpy problem as torch tensors of `dtype` (weights and x) on `device`."""
    out = {"num_experts": problem["num_experts"]}
    for key in TENSOR_KEYS:
        t = torch.from_numpy(np.ascontiguousarray(problem[key]))
        out[key] = (t.to(dtype) if key == "x" else t).to(device)
    for key in ("lora_a_weights", "lora_b_weights"):
        out[key] = [torch.from_numpy(w).to(dtype).to(device) for w in problem[key]]
    return out


def as_numpy_f32(problem_t):
    """fp32 numpy copies (exact for bf16 / fp16 values) for the fp64 oracle."""
    out = {"num_experts": problem_t["num_experts"]}
    for key in TENSOR_KEYS:
        t = problem_t[key].cpu()
        out[key] = (t.float() if t.is_floating_point() else t).numpy()
    for key in ("lora_a_weights", "lora_b_weights"):
        out[key] = [w.cpu().float().numpy() for w in problem_t[key]]
    return out


def problem_pair(seed, T, H, R, k, L, E, dtype, **kw):
    rng = np.random.default_rng(seed)
    base = make_problem(rng, T, H, R, k, L, E, dtype=np.float32, **kw)
    return to_torch(base, dtype, "cuda"), to_torch(base, dtype, "cpu")


def bits(t):
    return t.detach().cpu().contiguous().view(torch.int32)


# (T, H, R, k, L, E, dtype, extra): per-route generic rows (contiguous and arbitrary order), the
# k 20 serial scan, a grouped row, the specialized hidden sizes.
ROWS = [
    (1, 3072, 32, 2, 4, 16, torch.bfloat16, {"pad": 0}),
    (8, 2048, 16, 2, 4, 64, torch.float16, {}),
    (40, 1344, 64, 4, 3, 32, torch.bfloat16, {}),
    (9, 1000, 8, 20, 2, 32, torch.bfloat16, {}),
    (512, 2048, 32, 2, 4, 64, torch.bfloat16, {}),
    (64, 2688, 32, 2, 4, 32, torch.bfloat16, {}),
]


@pytest.mark.parametrize("T,H,R,k,L,E,dtype,extra", ROWS)
def test_cuda_plan_equals_cpu_engine_bitwise(T, H, R, k, L, E, dtype, extra):
    gpu, cpu = problem_pair(2000 + T, T, H, R, k, L, E, dtype, **extra)
    gpu_plan = cakemoe.prepare_bgmv_moe(**gpu)
    cpu_plan = cakemoe.prepare_bgmv_moe(**cpu)
    assert gpu_plan.backend_used == "cake" and cpu_plan.backend_used == "cpu_reference"
    for name in ("variant", "grouped", "shrink_launch", "schedule_id"):
        assert getattr(gpu_plan, name) == getattr(cpu_plan, name), name
    gpu_plan.y_accum.fill_(float("nan"))  # poison: every element must be written
    y = gpu_plan.run()
    torch.cuda.synchronize()
    y_cpu = cpu_plan.run()
    assert torch.equal(bits(gpu_plan.shrink_out), bits(cpu_plan.shrink_out))
    if gpu_plan.grouped_mma:  # tensor-core expand: the CPU order within 1e-5 (spec §3.2)
        scale = y_cpu.abs().max().item()
        assert (y.cpu() - y_cpu).abs().max().item() <= 1e-5 * scale
    else:
        assert torch.equal(bits(y), bits(y_cpu))
    # And against the fp64 oracle, expanding the plan's own rows.
    ref = as_numpy_f32(cpu)
    y_own, _ = oracle(ref, shrink_rows=cpu_plan.shrink_out.float().numpy())
    np.testing.assert_allclose(y.cpu().numpy(), y_own, rtol=1e-5, atol=1e-6 * np.abs(y_own).max())
    y_ref, _ = oracle(ref)
    np.testing.assert_allclose(y.cpu().numpy(), y_ref, rtol=1e-2, atol=1e-2)


def test_replays_bitwise_on_a_side_stream_and_owner_stream_rule():
    gpu, _ = problem_pair(31, 4, 2688, 32, 2, 4, 64, torch.bfloat16)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        plan = cakemoe.prepare_bgmv_moe(**gpu)
        first = bits(plan.run()).clone()
        for _ in range(7):
            y = plan.run()
            assert y is plan.y_accum
            assert torch.equal(bits(y), first)
    with pytest.raises(RuntimeError, match="original CUDA stream"):
        plan.run()  # torch's current stream is the default one again
    plan.close()
    plan.run()  # close() forgets the owner: a new capture on the default stream
    torch.cuda.synchronize()
    assert torch.equal(bits(plan.y_accum), first)


def test_outer_torch_graph_capture_passes_through():
    gpu, _ = problem_pair(32, 16, 3072, 16, 2, 4, 128, torch.bfloat16, pad=2)
    plan = cakemoe.prepare_bgmv_moe(**gpu)
    plan.run()  # eager first run, as serving engines do before capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        plan.run()
    gpu["x"].mul_(0.5)  # replays read the current contents
    plan.y_accum.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    y_ref, _ = oracle(as_numpy_f32(gpu))
    np.testing.assert_allclose(plan.y_accum.cpu().numpy(), y_ref, rtol=1e-2, atol=1e-2)


def test_column_slice_y_accum_keeps_nan_canaries():
    gpu, _ = problem_pair(33, 24, 2048, 32, 2, 4, 64, torch.float16)
    wide = torch.full((24, 2048 + 64), float("nan"), device="cuda")
    plan = cakemoe.prepare_bgmv_moe(**gpu, y_accum=wide[:, 32:32 + 2048])
    y = plan.run()
    torch.cuda.synchronize()
    assert torch.isnan(wide[:, :32]).all() and torch.isnan(wide[:, 32 + 2048:]).all()
    y_ref, _ = oracle(as_numpy_f32(gpu))
    np.testing.assert_allclose(y.cpu().numpy(), y_ref, rtol=1e-2, atol=1e-2)


def test_rebinding_raises():
    gpu, _ = problem_pair(34, 8, 1024, 16, 2, 2, 8, torch.bfloat16)
    plan = cakemoe.prepare_bgmv_moe(**gpu)
    plan.run()
    gpu["x"].set_(torch.empty_like(gpu["x"]))
    with pytest.raises(RuntimeError, match="x: tensor storage, shape or stride changed"):
        plan.run()


def test_typed_errors_and_nothing_written():
    gpu, cpu = problem_pair(35, 8, 1024, 16, 2, 2, 8, torch.bfloat16)
    canary = torch.full((8, 1024), 3.0, device="cuda")
    bad = dict(gpu, lora_indices=gpu["lora_indices"].clone())
    bad["lora_indices"][2] = 2  # L = 2
    with pytest.raises(cakemoe.InvalidArgument) as info:
        cakemoe.prepare_bgmv_moe(**bad, y_accum=canary)
    assert info.value.argument == "lora_indices" and isinstance(info.value, ValueError)
    mixed = dict(gpu, expert_ids=cpu["expert_ids"])  # a host tensor beside CUDA ones
    with pytest.raises(cakemoe.InvalidArgument) as info:
        cakemoe.prepare_bgmv_moe(**mixed, y_accum=canary)
    assert info.value.argument == "expert_ids"
    torch.cuda.synchronize()
    assert (canary == 3.0).all()


def test_portable_fallback_two_slices_and_strict_mode():
    gpu, _ = problem_pair(36, 40, 2048, 16, 2, 2, 8, torch.bfloat16, S=2)
    seen = []
    previous = cakemoe.set_warning_hook(seen.append)
    try:
        plan = cakemoe.prepare_bgmv_moe(**gpu)
    finally:
        cakemoe.set_warning_hook(previous)
    assert plan.backend_used == "portable" and "slice" in plan.fallback_reason
    assert len(seen) <= 1  # once per reason per process (another test may have reported it)
    y = plan.run()
    torch.cuda.synchronize()
    y_ref, _ = oracle(as_numpy_f32(gpu))
    np.testing.assert_allclose(y.cpu().numpy(), y_ref, rtol=1e-2, atol=1e-2)
    with pytest.raises(cakemoe.Unsupported):
        cakemoe.prepare_bgmv_moe(**gpu, fallback=False)


def test_weights_that_require_grad_are_accepted():
    gpu, _ = problem_pair(37, 4, 1024, 16, 2, 2, 8, torch.bfloat16)
    gpu["lora_a_weights"] = [w.requires_grad_(True) for w in gpu["lora_a_weights"]]
    plan = cakemoe.prepare_bgmv_moe(**gpu)
    y = plan.run()
    torch.cuda.synchronize()
    y_ref, _ = oracle(as_numpy_f32({k: ([w.detach() for w in v] if k == "lora_a_weights" else v)
                                    for k, v in gpu.items()}))
    np.testing.assert_allclose(y.cpu().numpy(), y_ref, rtol=1e-2, atol=1e-2)
