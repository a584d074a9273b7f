"""cakemoe.stepfun_ep with torch CUDA tensors. One GPU: a world of one rank (communicator from a
unique id or from a gloo process group) gives exactly the plain layer's bits, eagerly and from a
CUDA graph, in both schemes. Two GPUs (one process per GPU, torch.multiprocessing, gloo and nccl
process groups): each rank's output passes the bf16 family check against the single-GPU
``prepare_stepfun_moe`` result on the same inputs (the C++ EP GPU test's check), is bitwise stable
across launches and graph replays, and a bad argument on one rank makes every rank raise.
NVLink multicast stays off (NCCL_NVLS_ENABLE=0). Skips without torch, CUDA or NCCL."""

import os

import pytest

torch = pytest.importorskip("torch")
import cakemoe  # noqa: E402
from cakemoe import stepfun_ep  # noqa: E402

if not (cakemoe.with_cuda and stepfun_ep.available() and torch.cuda.is_available()):
    pytest.skip("needs a CUDA build of cakemoe with NCCL and a CUDA device",
                allow_module_level=True)

import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

os.environ["NCCL_NVLS_ENABLE"] = "0"  # NVLink multicast stays off on the shared machines
pytestmark = pytest.mark.filterwarnings("ignore::cakemoe.ExperimentalWarning")

SCHEMES = ["all_to_all", "all_gather"]
E, H, I, K = 16, 512, 256, 4  # the C++ EP GPU test's layer


def make_problem(total_tokens, seed=7):
    """bf16 weights, hidden states and fp32 logits of all tokens and experts, on the CPU (the same
    on every rank: a fixed seed)."""
    g = torch.Generator().manual_seed(seed)
    w1 = (torch.randn(E, 2 * I, H, generator=g) / H**0.5).bfloat16()
    w2 = (torch.randn(E, H, I, generator=g) / I**0.5).bfloat16()
    hidden = torch.randn(total_tokens, H, generator=g).bfloat16()
    logits = torch.randn(total_tokens, E, generator=g)
    return w1, w2, hidden, logits


def plain_output(problem, device):
    """The single-GPU layer with every expert on every token: bf16 [T, H]."""
    w1, w2, hidden, logits = (t.to(device) for t in problem)
    w = cakemoe.prepare_weights(w1, w2, family="bf16", step_limits=7.0)
    layer = cakemoe.prepare_stepfun_moe(family="bf16", hidden_states=hidden, routing_logits=logits,
                                        num_experts=E, top_k=K, **w.tensors())
    layer.launch()
    torch.cuda.synchronize(device)
    return layer.outputs()[0].clone()


def prepare_rank(comm, problem, tokens, scheme, **changes):
    """Rank comm.rank's EP layer: its slice of the tokens, its equal share of the experts."""
    device = torch.device("cuda", comm.device)
    rank, world = comm.rank, comm.world_size
    first = sum(tokens[:rank])
    w1, w2, hidden, logits = problem
    per_rank = E // world
    w = cakemoe.prepare_weights(w1.to(device), w2.to(device), family="bf16", step_limits=7.0,
                                local_expert_offset=rank * per_rank, local_num_experts=per_rank)
    args = dict(family="bf16", hidden_states=hidden[first:first + tokens[rank]].to(device),
                routing_logits=logits[first:first + tokens[rank]].to(device), num_experts=E,
                top_k=K, local_expert_offset=rank * per_rank, local_num_experts=per_rank,
                **w.tensors())
    args.update(changes)
    return stepfun_ep.prepare_ep(comm, scheme=scheme, **args), first


def bits(t):
    return t.view(torch.int16)


def replay_in_graph(layer):
    """Captures layer.launch() in a CUDA graph and replays it once; the output after the replay."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        layer.launch()  # warm-up on a side stream, as torch.cuda.graph wants
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        layer.launch()
    layer.output().fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    return layer.output().clone()


def family_check_bf16(out, reference):
    """spec stepfun §10.2 for bf16 (as the C++ EP test applies it against the one-GPU layer): no
    NaN, relative Frobenius error <= 1e-2, >= 92.5 % of elements within 0.1 + 0.85 |ref|."""
    a, b = out.float(), reference.float()
    assert not torch.isnan(a).any(), "unwritten (NaN) output rows"
    frobenius = ((a - b).norm() / b.norm()).item()
    within = ((a - b).abs() <= 0.1 + 0.85 * b.abs()).float().mean().item()
    assert frobenius <= 1e-2 and within >= 0.925, (frobenius, within)


# ---- One GPU: a world of one rank equals the plain layer bit for bit

@pytest.fixture
def gloo_world_of_one(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0,
                            world_size=1)
    yield dist.group.WORLD
    dist.destroy_process_group()


def one_rank_communicator(bootstrap, request):
    if bootstrap == "unique_id":
        return stepfun_ep.Communicator.from_unique_id(stepfun_ep.new_unique_id(), rank=0,
                                                      world_size=1, device=0)
    group = request.getfixturevalue("gloo_world_of_one")
    return stepfun_ep.Communicator.from_process_group(group, device="cuda:0")


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("bootstrap", ["unique_id", "process_group"])
def test_one_rank_equals_the_plain_layer_bitwise(bootstrap, scheme, request):
    torch.cuda.set_device(0)
    comm = one_rank_communicator(bootstrap, request)
    assert (comm.rank, comm.world_size, comm.device) == (0, 1, 0)
    tokens = [37]
    problem = make_problem(sum(tokens))
    plain = plain_output(problem, "cuda:0")
    layer, _ = prepare_rank(comm, problem, tokens, scheme)
    assert layer.communicator is comm
    assert (layer.sizes.world_size, layer.sizes.rank, layer.sizes.num_tokens) == (1, 0, 37)
    assert layer.sizes.layer_rows == 37
    layer.launch()
    torch.cuda.synchronize()
    out = layer.output()
    assert out.dtype == torch.bfloat16 and tuple(out.shape) == (37, H)
    assert torch.equal(bits(out), bits(plain))
    assert layer.received_counts().tolist() == [37]
    assert torch.equal(bits(replay_in_graph(layer)), bits(plain))


def test_one_rank_stages_and_caller_output(request):
    torch.cuda.set_device(0)
    comm = one_rank_communicator("unique_id", request)
    problem = make_problem(9)
    plain = plain_output(problem, "cuda:0")
    output = torch.full((9, H), float("nan"), dtype=torch.bfloat16, device="cuda:0")
    layer, _ = prepare_rank(comm, problem, [9], "all_to_all", output=output)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())  # the inputs and the NaN fill
    layer.launch_dispatch(stream)
    layer.launch_layer(stream)
    layer.launch_combine(stream.cuda_stream)  # an int handle works too
    stream.synchronize()
    assert layer.output() is output
    assert torch.equal(bits(output), bits(plain))


def test_one_rank_typed_errors(request):
    torch.cuda.set_device(0)
    comm = one_rank_communicator("unique_id", request)
    problem = make_problem(4)
    with pytest.raises(cakemoe.InvalidArgument) as info:
        prepare_rank(comm, problem, [4], "all_to_all", hidden_states=problem[2])  # on the CPU
    assert info.value.argument == "hidden_states"
    with pytest.raises(cakemoe.InvalidArgument) as info:
        prepare_rank(comm, problem, [4], "all_to_all", do_finalize=False)
    assert info.value.argument == "do_finalize"
    with pytest.raises(cakemoe.InvalidArgument) as info:
        stepfun_ep.Communicator.from_unique_id(stepfun_ep.new_unique_id(), rank=0, world_size=1,
                                               device=torch.cuda.device_count())
    assert info.value.argument == "device"


# ---- Two GPUs: one process per GPU

def two_rank_worker(rank, world, store, backend, scheme, bad_rank):
    os.environ["NCCL_NVLS_ENABLE"] = "0"
    torch.cuda.set_device(rank)
    dist.init_process_group(backend, init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        comm = stepfun_ep.Communicator.from_process_group()
        assert (comm.rank, comm.world_size, comm.device) == (rank, world, rank)
        tokens = [40] * (world - 1) + [1]  # unequal T, and T = 1
        problem = make_problem(sum(tokens))
        if bad_rank is not None:
            changes = {"do_finalize": False} if rank == bad_rank else {}
            try:
                prepare_rank(comm, problem, tokens, scheme, **changes)
            except cakemoe.InvalidArgument as e:
                expected = "do_finalize" if rank == bad_rank else "comm"
                assert e.argument == expected, str(e)
                return
            raise AssertionError("prepare_ep accepted a rank with do_finalize=False")
        plain = plain_output(problem, torch.device("cuda", rank))
        layer, first = prepare_rank(comm, problem, tokens, scheme)
        assert layer.sizes.rows_per_peer == max(tokens)
        layer.launch()
        torch.cuda.synchronize()
        out = layer.output().clone()
        family_check_bf16(out, plain[first:first + tokens[rank]])
        layer.launch()
        torch.cuda.synchronize()
        assert torch.equal(bits(layer.output()), bits(out)), "not stable across launches"
        assert torch.equal(bits(replay_in_graph(layer)), bits(out)), "graph replay differs"
    finally:
        dist.destroy_process_group()


def spawn_two_ranks(tmp_path, backend, scheme, bad_rank=None):
    if torch.cuda.device_count() < 2:
        pytest.skip(f"{torch.cuda.device_count()} GPU(s) visible: the 2-rank tests need >= 2")
    mp.spawn(two_rank_worker, args=(2, str(tmp_path / "store"), backend, scheme, bad_rank),
             nprocs=2, join=True)


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("backend", ["gloo", "nccl"])
def test_two_ranks_match_one_gpu(tmp_path, backend, scheme):
    spawn_two_ranks(tmp_path, backend, scheme)


def test_two_ranks_one_bad_argument_every_rank_raises(tmp_path):
    spawn_two_ranks(tmp_path, "gloo", "all_to_all", bad_rank=1)
