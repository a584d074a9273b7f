"""cakemoe.stepfun from Python with numpy arrays (the CPU reference engine): every entry against
the C++ results bit for bit, the launch objects' contract, the unified configuration's errors,
CAKEMOE_STEPFUN_FULL_PATH and the ExperimentalWarning."""

import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import cakemoe  # noqa: E402
import stepfun_cases as sc  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::cakemoe.ExperimentalWarning")


@pytest.fixture(scope="module")
def golden(tmp_path_factory):
    return sc.Golden(tmp_path_factory.mktemp("golden"))


@pytest.mark.parametrize("family", sc.FAMILIES)
@pytest.mark.parametrize("check", sc.ENTRY_CHECKS, ids=lambda f: f.__name__[len("check_"):])
def test_entry_matches_cpp(golden, family, check):
    check(sc.Case(golden, sc.NumpyBackend(), family))


def test_plans_match_cpp(golden):
    sc.check_plans(golden, "cpu")


def test_ml_dtypes_bf16_inputs_match_uint16_bits(golden):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    case = sc.Case(golden, sc.NumpyBackend(), "mxfp8")
    w1 = golden["w1"].view(ml_dtypes.bfloat16)
    w2 = golden["w2"].view(ml_dtypes.bfloat16)
    w = cakemoe.prepare_weights(w1, w2, family="mxfp8", step_limits=[7.0, 16.0, 7.0, 16.0])
    case.check_weights(w, "W")
    act = cakemoe.prepare_activations(golden["hidden"].view(ml_dtypes.bfloat16), family="mxfp8")
    # float8 views of the e4m3 bytes are taken too
    out = cakemoe.stepfun_moe(
        family="mxfp8", hidden_states=act.hidden_states.view(ml_dtypes.float8_e4m3fn),
        hidden_states_scale=act.hidden_states_scale, routing_logits=golden["logits_fp32"],
        num_experts=case.E, top_k=case.K, routed_scaling_factor=1.5, **w.tensors())
    case.check_list(out, "moe_logits_")


def make_layer(golden, family="bf16", **overrides):
    case = sc.Case(golden, sc.NumpyBackend(), family)
    kwargs = dict(family=family, routing_logits=golden["logits_fp32"], num_experts=case.E,
                  top_k=case.K, **case.activations(), **case.weights("W"))
    kwargs.update(overrides)
    return kwargs


def test_launch_reads_current_contents_and_checks_bindings(golden):
    kwargs = make_layer(golden)
    layer = cakemoe.prepare_stepfun_moe(**kwargs)
    layer.launch()
    (out,) = layer.outputs()
    first = out.copy()
    assert layer.outputs()[0] is out  # the same array after every launch
    kwargs["routing_logits"][:] = kwargs["routing_logits"][:, ::-1]  # contents may change
    layer.launch()
    assert not np.array_equal(out, first)
    kwargs["routing_logits"][:] = kwargs["routing_logits"][:, ::-1]
    layer.launch()
    assert np.array_equal(out, first)
    repr(layer)


def test_output_argument_is_written_and_returned(golden):
    out = np.full((8, 128), 0xFFFF, np.uint16)
    expected = cakemoe.stepfun_moe(**make_layer(golden))[0]
    layer = cakemoe.prepare_stepfun_moe(**make_layer(golden), output=out)
    layer.launch()
    assert layer.outputs()[0] is out and np.array_equal(out, expected)


def test_explicit_plan_and_default_plan(golden):
    plans = cakemoe.plans_for(family="bf16", num_tokens=8, top_k=2, local_num_experts=4,
                              hidden_size=128, intermediate_size=64)
    assert plans[0] == cakemoe.default_plan(family="bf16", num_tokens=8, top_k=2,
                                            local_num_experts=4, hidden_size=128,
                                            intermediate_size=64)
    layer = cakemoe.prepare_stepfun_moe(**make_layer(golden), plan=plans[-1])
    assert layer.plan == plans[-1] and layer.plan.tile > plans[0].tile
    with pytest.raises(cakemoe.InvalidArgument, match="plan"):
        fp8_plan = cakemoe.default_plan(family="fp8", num_tokens=8, top_k=2, local_num_experts=4,
                                        hidden_size=128, intermediate_size=64)
        cakemoe.prepare_stepfun_moe(**make_layer(golden), plan=fp8_plan)
    plan = cakemoe.Plan(family="bf16", tile=8, fc1_kernel="a", fc2_kernel="b",
                        act_sf_layout="r8c4", routing_variant="c", finalize_variant="d")
    assert (plan.family, plan.tile, plan.act_sf_layout) == ("bf16", 8, "r8c4")


@pytest.mark.parametrize("family", ["bf16", "nvfp4_bf16tok"])
def test_autotune_picks_a_candidate_and_caches_it(golden, family):
    cakemoe.stepfun.clear_autotune_cache()
    case = sc.Case(golden, sc.NumpyBackend(), family)
    plans = cakemoe.plans_for(family=family, num_tokens=case.T, top_k=case.K,
                              local_num_experts=case.E, hidden_size=case.H,
                              intermediate_size=case.I)
    assert len(plans) >= 2
    kwargs = dict(family=family, routing_logits=case.input("logits_fp32"), num_experts=case.E,
                  top_k=case.K, routed_scaling_factor=1.5, **case.activations(),
                  **case.weights("W"))
    layer = cakemoe.prepare_stepfun_moe(**kwargs, autotune=True, autotune_reps=2)
    assert layer.plan in plans
    assert cakemoe.stepfun.autotune_cache_size() == 1
    layer.launch()
    # The CPU engine's candidates agree bitwise, so the C++ golden (default plan) must match.
    case.check_list(layer.outputs(), "moe_logits_")
    again = cakemoe.prepare_stepfun_moe(**kwargs, autotune=True)  # a hit: the same plan
    assert again.plan == layer.plan and cakemoe.stepfun.autotune_cache_size() == 1
    case.check_list(cakemoe.stepfun_moe(**kwargs, autotune=True), "moe_logits_")
    assert cakemoe.stepfun.autotune_cache_size() == 1
    given = cakemoe.prepare_stepfun_moe(**kwargs, autotune=True, plan=plans[-1])
    assert given.plan == plans[-1]  # an explicit plan wins
    cakemoe.stepfun.clear_autotune_cache()
    assert cakemoe.stepfun.autotune_cache_size() == 0


def test_autotune_arguments_are_checked(golden):
    cakemoe.stepfun.clear_autotune_cache()
    for name, value in [("autotune_reps", 0), ("autotune_reps", 1001), ("autotune_reps", 2**40),
                        ("autotune", 1)]:
        with pytest.raises(cakemoe.InvalidArgument) as e:
            cakemoe.prepare_stepfun_moe(**make_layer(golden), **{"autotune": True, name: value})
        assert e.value.argument == name, str(e.value)
    assert cakemoe.stepfun.autotune_cache_size() == 0


def test_stage_buffers_are_validated_before_writing(golden):
    case = sc.Case(golden, sc.NumpyBackend(), "bf16")
    out = np.full((case.T, case.H), 7, np.uint16)
    args = dict(gemm2_output=np.zeros((40, case.H), np.uint16),
                expert_weights=np.zeros((case.T, case.K), np.float32),
                expanded_idx_to_permuted_idx=np.zeros(case.T * case.K, np.int32),
                total_num_padded_tokens=np.full(1, 40, np.int32), output=out, num_experts=case.E)
    for name, bad in [("expert_weights", np.zeros((case.T, case.K), np.int32)),
                      ("expanded_idx_to_permuted_idx", np.zeros(case.T, np.int32)),
                      ("num_experts", 4.0), ("enable_pdl", 1)]:
        with pytest.raises(cakemoe.InvalidArgument) as e:
            cakemoe.finalize(**{**args, name: bad})
        assert e.value.argument == name, str(e.value)
        assert (out == 7).all()
    cakemoe.finalize(**args)
    assert (out == 0).all()


def test_config_rejects_what_the_backend_does_not_serve(golden):
    def config(**changes):
        base = dict(routing=cakemoe.RoutingConfig(num_experts=4, top_k=2),
                    quant=cakemoe.QuantConfig.bf16(),
                    experts=cakemoe.ExpertConfig(intermediate_size=64),
                    activation=cakemoe.SwiGLUStep(7.0),
                    backend=cakemoe.CakeStepFunConfig(backend="cake_stepfun"))
        base.update(changes)
        return cakemoe.MoEConfig(**base)

    assert config().validate() == "bf16"
    cases = [
        (dict(backend=cakemoe.CakeStepFunConfig(backend="trtllm")), cakemoe.InvalidArgument,
         "backend"),
        (dict(activation=cakemoe.Activation(cakemoe.ActivationType.SwiGLU)), cakemoe.Unsupported,
         "activation"),
        (dict(quant=cakemoe.QuantConfig(cakemoe.QuantFormat.MXFP4, cakemoe.QuantFormat.MXFP4)),
         cakemoe.Unsupported, "quant"),
        (dict(routing=cakemoe.RoutingConfig(num_experts=4, top_k=2,
                                            method=cakemoe.RoutingMethodType.DeepSeekV3)),
         cakemoe.Unsupported, "routing.method"),
        (dict(routing_input=cakemoe.RoutingInputMode.PackedPrecomputed), cakemoe.Unsupported,
         "routing_input"),
        (dict(lora_deltas=True), cakemoe.Unsupported, "lora_deltas"),
        (dict(routing=cakemoe.RoutingConfig(num_experts="4", top_k=2)), cakemoe.ArgumentTypeError,
         "routing.num_experts"),
        (dict(experts=None), cakemoe.ArgumentTypeError, "experts"),
        (dict(routing=cakemoe.RoutingConfig(num_experts=4, top_k=2, method="Sigmoid")),
         cakemoe.InvalidArgument, "routing.method"),
    ]
    for changes, error, argument in cases:
        with pytest.raises(error) as e:
            config(**changes).validate()
        assert e.value.argument == argument, (changes, str(e.value))
    assert isinstance(e.value, ValueError)
    assert cakemoe.CakeStepFunConfig.supported(90) and not cakemoe.CakeStepFunConfig.supported(120)


def test_prepare_weights_names_its_own_arguments(golden):
    w1, w2 = golden["w1"], golden["w2"]
    with pytest.raises(cakemoe.InvalidArgument) as e:
        cakemoe.CakeStepFunConfig.prepare_weights(w1, w2, quant=cakemoe.QuantConfig.bf16(),
                                                  intermediate_size=32)
    assert e.value.argument == "intermediate_size"
    with pytest.raises(cakemoe.InvalidArgument) as e:
        cakemoe.CakeStepFunConfig.prepare_weights(w1, w2, quant=cakemoe.QuantConfig.bf16(),
                                                  hidden_size=64)
    assert e.value.argument == "hidden_size"
    with pytest.raises(cakemoe.InvalidArgument) as e:
        cakemoe.CakeStepFunConfig.prepare_weights(w1, w2, quant=cakemoe.QuantConfig.bf16(),
                                                  step_limits=[7.0, 7.0])
    assert e.value.argument == "step_limits"
    with pytest.raises(cakemoe.InvalidArgument) as e:  # spec §9.3: fp8 needs a_gs
        cakemoe.CakeStepFunConfig.prepare_weights(w1, w2,
                                                  quant=cakemoe.QuantConfig.fp8_per_tensor())
    assert e.value.argument == "hidden_states_scale_global"
    w = cakemoe.prepare_weights(w1, w2, family="fp8", hidden_states_scale_global=10.0)
    assert w["output1_scales_scalar"] is w["output1_scale_scalar"] is w.output1_scales_scalar
    assert set(w) == set(sc.WEIGHT_KEYS) and len(w) == 8


ENV_SCRIPT = """
import os, sys, warnings
sys.path[:0] = {path!r}
import numpy as np, cakemoe, stepfun_cases as sc
warnings.simplefilter("ignore", cakemoe.ExperimentalWarning)
g = sc.Golden({golden!r}, run=False)
case = sc.Case(g, sc.NumpyBackend(), "bf16")
config = case.config(precomputed=False)
w = config.prepare_weights(g["w1"], g["w2"])
try:
    cakemoe.run_moe(config, w, hidden_states=g["hidden"], routing_logits=g["logits_fp32"])
    print("ran")
except Exception as e:
    print(type(e).__name__, isinstance(e, NotImplementedError), isinstance(e, ValueError),
          e.argument)
"""


@pytest.mark.parametrize(
    "value,expected",
    [("auto", "ran"), ("1", "ran"), ("", "ran"), (None, "ran"),
     ("0", "UnsupportedPath True True CAKEMOE_STEPFUN_FULL_PATH"),
     ("yes", "InvalidArgument False True CAKEMOE_STEPFUN_FULL_PATH")],
)
def test_full_path_switch(golden, value, expected):
    env = dict(os.environ)
    env.pop("CAKEMOE_STEPFUN_FULL_PATH", None)
    if value is not None:
        env["CAKEMOE_STEPFUN_FULL_PATH"] = value
    script = ENV_SCRIPT.format(path=[os.path.dirname(__file__)], golden=str(golden.dir))
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == expected, out.stderr


WARN_SCRIPT = """
import sys, warnings
sys.path[:0] = {path!r}
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import cakemoe
    {calls}
print(sum(issubclass(w.category, cakemoe.ExperimentalWarning) for w in caught))
"""


@pytest.mark.parametrize(
    "calls,count",
    [
        ("pass", 0),
        ("cakemoe.CakeStepFunConfig(); cakemoe.CakeStepFunConfig(backend='cake_stepfun')", 1),
        ("[cakemoe.default_plan(family='bf16', num_tokens=8, top_k=2, local_num_experts=4, "
         "hidden_size=128, intermediate_size=64) for _ in range(3)]; cakemoe.CakeStepFunConfig()",
         1),
    ],
)
def test_experimental_warning_once_per_process(calls, count):
    script = WARN_SCRIPT.format(path=[os.path.dirname(__file__)], calls=calls)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == str(count), out.stderr
    assert issubclass(cakemoe.ExperimentalWarning, UserWarning)


def test_version_is_the_projects():
    import re

    root = os.path.join(os.path.dirname(__file__), "..", "..")
    cmake = open(os.path.join(root, "CMakeLists.txt")).read()
    version = re.search(r"project\(\s*cakemoe\s+VERSION\s+([0-9.]+)", cmake).group(1)
    assert cakemoe.__version__ == version
