"""cakemoe.stepfun with torch CUDA tensors: every entry against the C++ GPU results bit for bit
(stepfun_golden --cuda), torch.cuda.graph capture and replay of a prepared layer and of the
stage launches, torch streams, torch.compile(fullgraph=True) of a model calling the custom ops,
and typed errors for tensors on the wrong device."""

import os
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
sys.path.insert(0, os.path.dirname(__file__))
import cakemoe  # noqa: E402
import stepfun_cases as sc  # noqa: E402

if not (cakemoe.with_cuda and torch.cuda.is_available()):
    pytest.skip("needs a CUDA build of cakemoe and a CUDA device", allow_module_level=True)

import cakemoe.ops  # noqa: E402,F401

pytestmark = pytest.mark.filterwarnings("ignore::cakemoe.ExperimentalWarning")


@pytest.fixture(scope="module")
def golden(tmp_path_factory):
    return sc.Golden(tmp_path_factory.mktemp("golden_cuda"), cuda=True)


@pytest.mark.parametrize("family", sc.FAMILIES)
@pytest.mark.parametrize("check", sc.ENTRY_CHECKS, ids=lambda f: f.__name__[len("check_"):])
def test_entry_matches_cpp(golden, family, check):
    check(sc.Case(golden, sc.TorchBackend("cuda"), family))
    torch.cuda.synchronize()


def test_plans_match_cpp(golden):
    sc.check_plans(golden, "cuda")


def bits(t):
    return t.view(torch.int16) if t.dtype == torch.bfloat16 else t


def prepared_layer(case, **changes):
    args = dict(family=case.family, routing_logits=case.input("logits_fp32"),
                num_experts=case.E, top_k=case.K, routed_scaling_factor=1.5,
                **case.activations(), **case.weights("W"))
    args.update(changes)
    return args, cakemoe.prepare_stepfun_moe(**args)


@pytest.mark.parametrize("family", sc.FAMILIES)
def test_graph_capture_and_replay_of_a_prepared_layer(golden, family):
    case = sc.Case(golden, sc.TorchBackend("cuda"), family)
    args, layer = prepared_layer(case)
    layer.launch()  # eager first, as serving engines do before capture
    torch.cuda.synchronize()
    (out,) = layer.outputs()
    case.check_list([out], "moe_logits_")
    eager = out.clone()

    graph = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        layer.launch()  # on torch's current stream (the side stream here)
    torch.cuda.current_stream().wait_stream(side)
    with torch.cuda.graph(graph):
        layer.launch()
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(bits(out), bits(eager))

    # Replays read the inputs' current contents: new logits give the eager result for them.
    args["routing_logits"].copy_(args["routing_logits"].flip(1))
    graph.replay()
    torch.cuda.synchronize()
    replayed = out.clone()
    (fresh,) = cakemoe.stepfun_moe(**args)
    assert torch.equal(bits(replayed), bits(fresh)) and not torch.equal(bits(fresh), bits(eager))


def test_graph_capture_of_stage_launches(golden):
    case = sc.Case(golden, sc.TorchBackend("cuda"), "bf16")
    poison = case.g.dims["poison"]
    buffers = {}
    for name in sc.STAGE_BUFFERS[:10]:
        a = np.empty_like(case.g["bf16_stage_" + name])
        a.view(np.uint8)[...] = poison
        buffers[name] = case.b.array(a)
    routing = cakemoe.prepare_routing(routing_logits=case.input("logits_bf16"),
                                      num_experts=case.E, top_k=case.K,
                                      tile_tokens_dim=case.g.manifest["bf16_tile"], **buffers)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        routing.launch()
    graph.replay()
    torch.cuda.synchronize()
    for name, t in buffers.items():
        sc.assert_same_bits(case.b, t, case.g["bf16_stage_" + name], name)


def test_explicit_stream_and_current_stream(golden):
    case = sc.Case(golden, sc.TorchBackend("cuda"), "mxfp8")
    _, layer = prepared_layer(case)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    layer.launch(stream=stream)
    stream.synchronize()
    case.check_list(layer.outputs(), "moe_logits_")
    layer.launch(stream=stream.cuda_stream)  # an int handle
    stream.synchronize()
    case.check_list(layer.outputs(), "moe_logits_")


def test_torch_compile_fullgraph_on_cuda(golden):
    case = sc.Case(golden, sc.TorchBackend("cuda"), "nvfp4")
    w, act = case.weights("W"), case.activations()

    def layer(hidden_states, scale, logits):
        (out,) = torch.ops.cakemoe.stepfun_moe(
            case.family, hidden_states, scale, w["gemm1_weights"], w["gemm1_weights_scale"],
            w["output1_scale_scalar"], w["output1_scale_gate_scalar"], w["gemm1_clamp_limit"],
            None, w["gemm2_weights"], w["gemm2_weights_scale"], w["output2_scale_scalar"],
            logits, None, None, case.E, case.K, routed_scaling_factor=1.5)
        return out.float() * 0.5

    inputs = (act["hidden_states"], act["hidden_states_scale"], case.input("logits_fp32"))
    eager = layer(*inputs)
    torch._dynamo.reset()
    got = torch.compile(layer, fullgraph=True)(*inputs)
    torch.cuda.synchronize()
    assert torch.equal(got, eager)


def test_tensors_on_the_wrong_device_are_named(golden):
    case = sc.Case(golden, sc.TorchBackend("cuda"), "bf16")
    out = torch.full((case.T, case.H), 3.0, device="cuda", dtype=torch.bfloat16)
    with pytest.raises(cakemoe.InvalidArgument) as info:
        prepared_layer(case, routing_logits=torch.from_numpy(case.g["logits_fp32"]), output=out)
    assert info.value.argument == "routing_logits" and isinstance(info.value, ValueError)
    torch.cuda.synchronize()
    assert (out == 3.0).all()
