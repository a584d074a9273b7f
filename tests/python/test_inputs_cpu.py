"""Bad input at the Python boundary of both pipelines (numpy, CPU engine): read-only outputs,
absurd shapes, values of the wrong Python type, zero-row arrays. Every error is one of the
package's classes (ValueError / TypeError subclasses) naming the argument, and nothing is
allocated or written first."""

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import cakemoe  # noqa: E402
from bgmv_oracle import make_problem, oracle  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::cakemoe.ExperimentalWarning")
HUGE = 2**40


def bgmv_problem(T=8):
    return make_problem(np.random.default_rng(100 + T), T, 256, 16, 2, 2, 4)


def read_only(array):
    array.setflags(write=False)
    return array


def from_bytes(shape, dtype):
    size = int(np.prod(shape)) * np.dtype(dtype).itemsize
    return np.frombuffer(bytes(size), dtype).reshape(shape)


def raises_named(error, argument, fn, *args, **kwargs):
    with pytest.raises(error) as info:
        fn(*args, **kwargs)
    assert info.value.argument == argument, str(info.value)
    assert argument in str(info.value)
    assert isinstance(info.value, cakemoe.Error)
    assert "incompatible function arguments" not in str(info.value)  # no binding signature dump
    return info.value


@pytest.mark.parametrize("make", [read_only, lambda a: from_bytes(a.shape, a.dtype)])
@pytest.mark.parametrize("name", ["y_accum", "shrink_out"])
def test_bgmv_read_only_outputs_are_rejected(make, name):
    problem = bgmv_problem()
    shapes = {"y_accum": ((8, 256), np.float32), "shrink_out": ((1, problem["x"].shape[0] * 2, 16),
                                                               np.float16)}
    shape, dtype = shapes[name]
    array = make(np.zeros(shape, dtype))
    raises_named(cakemoe.InvalidArgument, name, cakemoe.prepare_bgmv_moe, **problem,
                 **{name: array})
    assert not array.any()


def test_bgmv_read_only_inputs_are_fine():
    problem = bgmv_problem()
    frozen = {k: read_only(v.copy()) if isinstance(v, np.ndarray) else v
              for k, v in problem.items()}
    y = cakemoe.prepare_bgmv_moe(**frozen).run()
    np.testing.assert_allclose(y, oracle(problem)[0], atol=1e-2, rtol=1e-2)


def test_bgmv_huge_stride_zero_input_is_a_clear_error_not_a_memory_error():
    problem = bgmv_problem()
    x = np.lib.stride_tricks.as_strided(np.zeros(256, np.float16), (HUGE, 256), (0, 2))
    lora = np.lib.stride_tricks.as_strided(np.full(1, -1, np.int64), (HUGE,), (0,))
    raises_named(cakemoe.InvalidArgument, "x", cakemoe.prepare_bgmv_moe,
                 **dict(problem, x=x, lora_indices=lora))
    with pytest.raises(cakemoe.InvalidArgument) as info:  # x or the [T] lora_indices is named
        cakemoe.prepare_bgmv_moe(**dict(problem, x=x))
    assert info.value.argument in ("x", "lora_indices")


@pytest.mark.parametrize(
    "name,value,error",
    [
        ("x", None, cakemoe.InvalidArgument),
        ("x", [[1.0, 2.0]], cakemoe.ArgumentTypeError),
        ("x", "x", cakemoe.ArgumentTypeError),
        ("x", b"\x00" * 16, cakemoe.ArgumentTypeError),
        ("expert_ids", None, cakemoe.InvalidArgument),
        ("topk_weights", [0.5], cakemoe.ArgumentTypeError),
        ("lora_a_weights", "abc", cakemoe.ArgumentTypeError),
        ("lora_b_weights", None, cakemoe.ArgumentTypeError),
        ("num_experts", "4", cakemoe.ArgumentTypeError),
        ("num_experts", 4.9, cakemoe.ArgumentTypeError),
        ("num_experts", 4.0, cakemoe.ArgumentTypeError),
        ("num_experts", True, cakemoe.ArgumentTypeError),
        ("num_experts", None, cakemoe.ArgumentTypeError),
        ("fallback", "no", cakemoe.ArgumentTypeError),
        ("fallback", 0, cakemoe.ArgumentTypeError),
        ("backend", 3, cakemoe.ArgumentTypeError),
        ("grouped", "yes", cakemoe.ArgumentTypeError),
        ("order_remap", 1, cakemoe.ArgumentTypeError),
    ],
)
def test_bgmv_wrong_python_types_name_the_argument(name, value, error):
    problem = bgmv_problem()
    canary = np.full((8, 256), 7.0, np.float32)
    kwargs = dict(problem, y_accum=canary)
    kwargs[name] = value
    raised = raises_named(error, name, cakemoe.prepare_bgmv_moe, **kwargs)
    assert isinstance(raised, ValueError)
    if error is cakemoe.ArgumentTypeError:
        assert isinstance(raised, TypeError)
    assert (canary == 7.0).all()


def test_bgmv_list_entries_are_named_by_index():
    problem = bgmv_problem()
    raises_named(cakemoe.ArgumentTypeError, "lora_a_weights[0]", cakemoe.prepare_bgmv_moe,
                 **dict(problem, lora_a_weights=[None]))


def test_bgmv_numpy_integers_are_integers():
    problem = bgmv_problem()
    y = cakemoe.prepare_bgmv_moe(**dict(problem, num_experts=np.int64(4))).run()
    np.testing.assert_allclose(y, oracle(problem)[0], atol=1e-2, rtol=1e-2)


def test_bgmv_zero_row_arrays_are_contiguous():
    # numpy gives 0-row arrays zero strides; they are valid row-major arrays.
    problem = bgmv_problem(T=1)
    plan = cakemoe.prepare_bgmv_moe(**dict(problem, x=problem["x"][:0],
                                           lora_indices=problem["lora_indices"][:0]))
    y = plan.run()
    assert y.shape == (0, 256) and y.dtype == np.float32


def test_bgmv_default_outputs_come_back_in_the_framework_after_validation():
    problem = bgmv_problem()
    plan = cakemoe.prepare_bgmv_moe(**problem)
    assert isinstance(plan.y_accum, np.ndarray) and plan.y_accum.flags.writeable
    assert plan.shrink_out.shape == (1, problem["sorted_token_ids"].shape[0], 16)
    assert plan.run() is plan.y_accum


# ---- StepFun ------------------------------------------------------------------------------------

E, H, I, T, K = 4, 128, 64, 8, 2


@pytest.fixture(scope="module")
def weights():
    rng = np.random.default_rng(5)
    w1 = (rng.standard_normal((E, 2 * I, H), np.float32) * 0.1).view(np.uint32) >> 16
    w2 = (rng.standard_normal((E, H, I), np.float32) * 0.1).view(np.uint32) >> 16
    return cakemoe.prepare_weights(w1.astype(np.uint16), w2.astype(np.uint16), family="bf16")


def layer_args(weights, **changes):
    rng = np.random.default_rng(6)
    args = dict(family="bf16", hidden_states=np.full((T, H), 0x3F80, np.uint16),
                routing_logits=rng.standard_normal((T, E), np.float32), num_experts=E, top_k=K,
                **weights.tensors())
    args.update(changes)
    return args


def test_stepfun_read_only_output_is_rejected(weights):
    out = from_bytes((T, H), np.uint16)
    raises_named(cakemoe.InvalidArgument, "output", cakemoe.stepfun_moe,
                 **layer_args(weights, output=out))
    out = read_only(np.zeros((T, H), np.uint16))
    raises_named(cakemoe.InvalidArgument, "output", cakemoe.prepare_stepfun_moe,
                 **layer_args(weights, output=out))
    buffers = dict(gemm2_output=np.zeros((40, H), np.uint16),
                   expert_weights=np.zeros((T, K), np.float32),
                   expanded_idx_to_permuted_idx=np.zeros(T * K, np.int32),
                   total_num_padded_tokens=np.full(1, 40, np.int32), num_experts=E)
    raises_named(cakemoe.InvalidArgument, "output", cakemoe.finalize,
                 output=read_only(np.zeros((T, H), np.uint16)), **buffers)


def test_stepfun_huge_stride_zero_input_is_a_clear_error(weights):
    hidden = np.lib.stride_tricks.as_strided(np.zeros(H, np.uint16), (HUGE, H), (0, 2))
    logits = np.lib.stride_tricks.as_strided(np.zeros(E, np.float32), (HUGE, E), (0, 4))
    with pytest.raises(cakemoe.InvalidArgument):
        cakemoe.stepfun_moe(**layer_args(weights, hidden_states=hidden, routing_logits=logits))


@pytest.mark.parametrize(
    "name,value,error",
    [
        ("hidden_states", None, cakemoe.InvalidArgument),
        ("hidden_states", [[1.0]], cakemoe.ArgumentTypeError),
        ("routing_logits", "logits", cakemoe.ArgumentTypeError),
        ("gemm1_weights", b"\x00", cakemoe.ArgumentTypeError),
        ("num_experts", "4", cakemoe.ArgumentTypeError),
        ("num_experts", 4.9, cakemoe.ArgumentTypeError),
        ("top_k", None, cakemoe.ArgumentTypeError),
        ("do_finalize", "no", cakemoe.ArgumentTypeError),
        ("enable_pdl", 1, cakemoe.ArgumentTypeError),
        ("routed_scaling_factor", "2", cakemoe.ArgumentTypeError),
        ("family", 3, cakemoe.ArgumentTypeError),
        ("family", "fp4", cakemoe.InvalidArgument),
        ("plan", "tile8", cakemoe.ArgumentTypeError),
    ],
)
def test_stepfun_wrong_python_types_name_the_argument(weights, name, value, error):
    out = np.full((T, H), 7, np.uint16)
    raised = raises_named(error, name, cakemoe.prepare_stepfun_moe,
                          **layer_args(weights, output=out, **{name: value}))
    assert isinstance(raised, ValueError)
    assert (out == 7).all()


def test_stepfun_unknown_keywords_are_named(weights):
    for entry in (cakemoe.prepare_stepfun_moe, cakemoe.stepfun_moe):
        raises_named(cakemoe.ArgumentTypeError, "num_expert", entry,
                     **layer_args(weights, num_expert=4))
    raises_named(cakemoe.ArgumentTypeError, "outputs", cakemoe.finalize, outputs=0,
                 num_experts=4)


def test_stepfun_zero_rows_are_not_called_non_contiguous(weights):
    error = raises_named(cakemoe.InvalidArgument, "hidden_states", cakemoe.stepfun_moe,
                         **layer_args(weights, hidden_states=np.zeros((0, H), np.uint16),
                                      routing_logits=np.zeros((0, E), np.float32)))
    assert "contiguous" not in str(error)


def test_stepfun_wrong_scalar_types_in_helpers():
    raises_named(cakemoe.ArgumentTypeError, "num_tokens", cakemoe.stepfun.max_padded, "8", 2, 4,
                 8)
    raises_named(cakemoe.InvalidArgument, "device", cakemoe.default_plan, family="bf16",
                 num_tokens=8, top_k=2, local_num_experts=4, hidden_size=H, intermediate_size=I,
                 device="tpu")
    raises_named(cakemoe.ArgumentTypeError, "step_limits", cakemoe.prepare_weights,
                 np.zeros((E, 2 * I, H), np.uint16), np.zeros((E, H, I), np.uint16),
                 family="bf16", step_limits="7")
    raises_named(cakemoe.ArgumentTypeError, "stream", cakemoe.stepfun_moe, stream="default",
                 **layer_args(cakemoe.prepare_weights(np.zeros((E, 2 * I, H), np.uint16),
                                                      np.zeros((E, H, I), np.uint16),
                                                      family="bf16")))
