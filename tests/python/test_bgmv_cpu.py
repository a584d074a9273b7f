"""cakemoe.prepare_bgmv_moe from Python with numpy arrays (the CPU reference engine): results
against the fp64 oracle, the plan object's contract, typed errors, fallback warnings."""

import gc
import os
import sys
import warnings

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(__file__))
import cakemoe  # noqa: E402
from bgmv_oracle import make_problem, oracle  # noqa: E402


def prepare(problem, **options):
    return cakemoe.prepare_bgmv_moe(**problem, **options)


@pytest.mark.parametrize(
    "T,H,R,k,L,E",
    [(1, 256, 16, 2, 2, 4), (24, 256, 16, 2, 2, 8), (40, 512, 32, 6, 3, 16), (9, 1000, 8, 20, 2, 32)],
)
def test_matches_fp64_oracle(T, H, R, k, L, E):
    rng = np.random.default_rng(1000 + T)
    problem = make_problem(rng, T, H, R, k, L, E)
    plan = prepare(problem)
    assert plan.backend_used == "cpu_reference"
    y = plan.run()
    assert y.shape == (T, H) and y.dtype == np.float32
    y_ref, rows_ref = oracle(problem)
    # Spec §11: the fp64 oracle's atol = rtol = 1e-2 (the weight-dtype rounding of the rows).
    np.testing.assert_allclose(y, y_ref, atol=1e-2, rtol=1e-2)
    # The rows: one rounding of an fp32 sum, so at most one unit in the last place of fp16.
    rows = plan.shrink_out.astype(np.float64)
    np.testing.assert_allclose(rows, rows_ref.astype(np.float64), rtol=2.0**-10, atol=1e-6)
    # The expand of the plan's own rows: fp32 sums of exact products, far inside 1e-5.
    y_own, _ = oracle(problem, shrink_rows=plan.shrink_out)
    np.testing.assert_allclose(y, y_own, atol=1e-6 * np.abs(y_own).max(), rtol=1e-5)
    # Tokens without a LoRA get exact zeros.
    assert not y[problem["lora_indices"] < 0].any()


def test_run_returns_y_accum_and_replays_read_current_contents():
    rng = np.random.default_rng(7)
    problem = make_problem(rng, 16, 256, 16, 2, 2, 8)
    plan = prepare(problem)
    first = plan.run()
    bits = first.copy()
    for _ in range(3):
        assert plan.run() is first
        assert np.array_equal(first.view(np.uint32), bits.view(np.uint32))
    problem["x"] *= np.float16(0.5)  # contents may change freely between runs
    np.testing.assert_allclose(plan.run(), oracle(problem)[0], atol=1e-2, rtol=1e-2)
    assert plan.y_accum is first and plan.x is problem["x"]


def test_plan_keeps_its_arrays_alive():
    rng = np.random.default_rng(8)
    problem = make_problem(rng, 8, 256, 16, 2, 2, 4)
    expected = oracle(problem)[0]
    plan = prepare({k: (v.copy() if hasattr(v, "copy") else v) for k, v in problem.items()})
    gc.collect()
    np.testing.assert_allclose(plan.run(), expected, atol=1e-2, rtol=1e-2)


def test_column_slice_y_accum_leaves_other_columns():
    rng = np.random.default_rng(9)
    T, H = 12, 256
    problem = make_problem(rng, T, H, 16, 2, 2, 4)
    wide = np.full((T, H + 64), np.nan, dtype=np.float32)
    plan = prepare(problem, y_accum=wide[:, 16:16 + H])
    y = plan.run()
    assert y.base is wide
    np.testing.assert_allclose(y, oracle(problem)[0], atol=1e-2, rtol=1e-2)
    assert np.isnan(wide[:, :16]).all() and np.isnan(wide[:, 16 + H:]).all()


def test_plan_attributes():
    rng = np.random.default_rng(10)
    plan = prepare(make_problem(rng, 4, 256, 32, 2, 2, 4))
    assert plan.variant in ("generic", "specialized")
    assert plan.grouped in (True, False) and plan.order_remap in (True, False)
    assert plan.pdl_mode in (0, 1, 2)
    assert plan.fallback_reason == ""
    launch = plan.shrink_launch
    assert launch is None or (len(launch) == 2 and launch[1] >= 1)
    index = plan.route_index
    assert index is None or index.dtype == np.int32
    assert "cpu_reference" in repr(plan)


def test_invalid_inputs_raise_typed_errors_naming_the_argument():
    rng = np.random.default_rng(11)
    problem = make_problem(rng, 8, 256, 16, 2, 2, 4)
    canary = np.full((8, 256), 7.0, dtype=np.float32)

    bad = dict(problem, expert_ids=problem["expert_ids"].copy())
    bad["expert_ids"][3] = 4  # E = 4
    with pytest.raises(cakemoe.InvalidArgument) as info:
        prepare(bad, y_accum=canary)
    assert info.value.argument == "expert_ids" and "expert_ids" in str(info.value)
    assert isinstance(info.value, ValueError) and isinstance(info.value, cakemoe.Error)
    assert (canary == 7.0).all()  # nothing written

    with pytest.raises(cakemoe.InvalidArgument) as info:
        prepare(problem, backend="blackwell")
    assert info.value.argument == "backend"

    with pytest.raises(cakemoe.InvalidArgument) as info:
        prepare(dict(problem, x=problem["x"].astype(np.float32)))
    assert "dtype" in info.value.rule or "BF16" in info.value.rule

    with pytest.raises(cakemoe.InvalidArgument) as info:
        prepare(dict(problem, lora_indices=problem["lora_indices"].astype(np.int32)))
    assert info.value.argument == "lora_indices"

    with pytest.raises(cakemoe.InvalidArgument) as info:
        transposed = np.zeros((256, 8), dtype=np.float32).T  # [8, 256] with column stride 8
        prepare(problem, y_accum=transposed)
    assert info.value.argument == "y_accum" and "last dimension" in info.value.rule

    with pytest.raises(cakemoe.InvalidArgument) as info:
        prepare(dict(problem, x=problem["x"].astype(np.float64)))
    assert info.value.argument == "x"


def test_changed_binding_raises_at_run():
    rng = np.random.default_rng(12)
    problem = make_problem(rng, 8, 256, 16, 2, 2, 4)
    plan = prepare(problem)
    plan.run()
    problem["x"].resize((16, 128), refcheck=False)  # the same array object, a new shape
    with pytest.raises(RuntimeError, match="x: tensor storage, shape or stride changed"):
        plan.run()


def test_fallback_warns_once_per_reason_and_strict_mode_raises():
    rng = np.random.default_rng(13)
    problem = make_problem(rng, 8, 256, 24, 2, 2, 4)  # rank 24: not a Cake rank
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plan = prepare(problem)
        prepare(problem)  # the same reason again: no second warning
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(messages) == 1 and "got 24" in messages[0]
    assert "24" in plan.fallback_reason and plan.variant == "portable"
    np.testing.assert_allclose(plan.run(), oracle(problem)[0], atol=1e-2, rtol=1e-2)
    with pytest.raises(cakemoe.Unsupported) as info:
        prepare(problem, fallback=False)
    assert isinstance(info.value, ValueError) and "24" in str(info.value)


def test_warning_hook_redirects():
    rng = np.random.default_rng(14)
    problem = make_problem(rng, 4, 256, 16, 2, 2, 4, S=2)  # two slices: portable
    seen = []
    previous = cakemoe.set_warning_hook(seen.append)
    try:
        plan = prepare(problem)
    finally:
        cakemoe.set_warning_hook(previous)
    assert len(seen) == 1 and "slice" in seen[0]
    y = plan.run()
    assert y.shape == (4, 512)
    np.testing.assert_allclose(y, oracle(problem)[0], atol=1e-2, rtol=1e-2)


def test_grouped_pipeline_matches_per_route():
    # Spec §5 / §11 "grouped forced": shrink rows bitwise equal, y within 1e-5.
    rng = np.random.default_rng(15)
    problem = make_problem(rng, 60, 512, 32, 4, 3, 8)
    grouped = prepare(problem, grouped=True)
    per_route = prepare(problem, grouped=False)
    assert grouped.grouped and not per_route.grouped
    y_g = grouped.run().copy()
    y_p = per_route.run().copy()
    assert np.array_equal(grouped.shrink_out.view(np.uint16), per_route.shrink_out.view(np.uint16))
    np.testing.assert_allclose(y_g, y_p, rtol=1e-5, atol=1e-5)
    assert not grouped.grouped_mma  # the CPU engine keeps the canonical partials


def test_order_remap_with_grouped_is_rejected():
    rng = np.random.default_rng(16)
    problem = make_problem(rng, 8, 256, 16, 2, 2, 4)
    with pytest.raises(cakemoe.InvalidArgument) as info:
        prepare(problem, grouped=True, order_remap=True)
    assert info.value.argument == "order_remap"
