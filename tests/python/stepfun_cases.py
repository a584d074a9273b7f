"""Every public StepFun entry of the Python package against the C++ results of stepfun_golden, bit
for bit. Shared by the numpy (CPU), torch CPU and torch CUDA test files: a Backend turns the
golden numpy arrays into the framework's arrays and results back into raw numpy bits."""

import json
import os
import pathlib
import subprocess

import numpy as np
import pytest

import cakemoe

FAMILIES = ["bf16", "fp8", "mxfp8", "nvfp4", "nvfp4_bf16tok"]
WEIGHT_KEYS = [
    "gemm1_weights",
    "gemm1_weights_scale",
    "gemm2_weights",
    "gemm2_weights_scale",
    "output1_scale_scalar",
    "output1_scale_gate_scalar",
    "output2_scale_scalar",
    "gemm1_clamp_limit",
]
ACT_KEYS = ["hidden_states", "hidden_states_scale", "per_token_scale"]
STAGE_BUFFERS = [
    "topk_weights", "topk_packed", "expert_count_histogram", "total_num_padded_tokens",
    "expanded_idx_to_permuted_idx", "permuted_idx_to_token_idx", "cta_idx_xy_to_batch_idx",
    "cta_idx_xy_to_mn_limit", "num_non_exiting_ctas", "num_tokens_per_expert", "gemm1_output",
    "gemm1_output_scale", "requant_output", "requant_output_scale", "requant_per_token_scale",
    "gemm2_output", "output",
]


def golden_binary():
    path = os.environ.get("CAKEMOE_STEPFUN_GOLDEN")
    if path:
        return path
    # <build>/python/cakemoe/__init__.py -> <build>/tests/stepfun_golden
    guess = pathlib.Path(cakemoe.__file__).resolve().parents[2] / "tests" / "stepfun_golden"
    if guess.exists():
        return str(guess)
    pytest.fail("stepfun_golden not found: set CAKEMOE_STEPFUN_GOLDEN (ctest does)")


class Golden:
    """The C++ results: npy files (bf16 as uint16, 8-bit formats as uint8) and a manifest."""

    def __init__(self, directory, cuda=False, run=True):
        if run:
            args = [golden_binary(), str(directory)] + (["--cuda"] if cuda else [])
            subprocess.run(args, check=True)
        self.dir = pathlib.Path(directory)
        self.manifest = json.loads((self.dir / "manifest.json").read_text())
        self.dims = self.manifest["dims"]

    def has(self, name):
        return (self.dir / f"{name}.npy").exists()

    def __getitem__(self, name):
        return np.load(self.dir / f"{name}.npy")


class NumpyBackend:
    """numpy arrays on the CPU engine (bf16 as uint16 bits)."""

    device = "cpu"

    def array(self, a):
        return np.ascontiguousarray(a).copy()

    def bits(self, x):
        return np.asarray(x)


class TorchBackend:
    """torch tensors on `device` (bf16 as torch.bfloat16, bytes as uint8)."""

    def __init__(self, device):
        import torch

        self.torch = torch
        self.device = device

    def array(self, a):
        torch = self.torch
        if a.dtype == np.uint16:  # bf16 bits
            return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16).to(self.device)
        return torch.from_numpy(a.copy()).to(self.device)

    def bits(self, x):
        torch = self.torch
        x = x.detach().cpu()
        if x.dtype == torch.bfloat16:
            return x.view(torch.int16).numpy().view(np.uint16)
        if x.dtype in (torch.float8_e4m3fn,):
            return x.view(torch.uint8).numpy()
        return x.numpy()


def assert_same_bits(backend, result, expected, what):
    got = backend.bits(result)
    assert got.shape == expected.shape, f"{what}: shape {got.shape} != {expected.shape}"
    assert got.dtype.itemsize == expected.dtype.itemsize, f"{what}: dtype {got.dtype}"
    same = got.reshape(-1).view(np.uint8) == expected.reshape(-1).view(np.uint8)
    assert same.all(), f"{what}: {np.count_nonzero(~same)} bytes differ from the C++ result"


def assert_nontrivial(expected, what):
    # A result that is all zeros or all poison would let a broken binding pass.
    flat = expected.reshape(-1).view(np.uint8)
    assert np.unique(flat).size > 2, f"{what}: the C++ result is degenerate"


class Case:
    """One family's inputs (golden arrays in the backend's framework) and expected results."""

    def __init__(self, golden, backend, family):
        self.g, self.b, self.family = golden, backend, family
        self.prefix = f"{family}_"
        self.a_gs = golden.manifest[f"{family}_a_gs"]
        d = golden.dims
        self.T, self.H, self.I, self.E, self.K = d["T"], d["H"], d["I"], d["E"], d["K"]

    def input(self, name):
        return self.b.array(self.g[name])

    def weights(self, tag):
        return {k: self.input(self.prefix + f"{tag}_{k}") for k in WEIGHT_KEYS
                if self.g.has(self.prefix + f"{tag}_{k}")}

    def activations(self, tag="A"):
        return {k: self.input(self.prefix + f"{tag}_{k}") for k in ACT_KEYS
                if self.g.has(self.prefix + f"{tag}_{k}")}

    def check_weights(self, w, tag):
        scales = self.g.manifest[self.prefix + f"{tag}_scales"]
        assert w.family == self.family
        assert [w.hidden_states_scale_global, w.intermediate_scale_global] == scales
        for key in WEIGHT_KEYS:
            name = self.prefix + f"{tag}_{key}"
            if self.g.has(name):
                assert_same_bits(self.b, w[key], self.g[name], name)
            else:
                assert w[key] is None, f"{name}: the C++ view has none"

    def check_list(self, results, tag):
        names = sorted((n for n in os.listdir(self.g.dir) if n.startswith(self.prefix + tag)),
                       key=lambda n: int(n[len(self.prefix + tag):-4]))
        assert len(results) == len(names) > 0
        expected = [np.load(self.g.dir / name) for name in names]
        if len(results) == 3:
            # do_finalize=False: gemm2_output rows are meaningful only where e2p points (spec
            # §7.3); padded rows hold whatever the buffer held.
            slots = expected[2][expected[2] >= 0]
            assert np.array_equal(self.b.bits(results[2]), expected[2]), names[2]
            results = [self.b.bits(results[0])[slots]] + list(results[1:])
            expected = [expected[0][slots]] + expected[1:]
            results[0] = self.b.array(results[0]) if not isinstance(self.b, NumpyBackend) else \
                results[0]
        for result, exp, name in zip(results, expected, names):
            assert_nontrivial(exp, name)
            assert_same_bits(self.b, result, exp, name)

    def quant(self):
        return {
            "bf16": cakemoe.QuantConfig.bf16(),
            "fp8": cakemoe.QuantConfig.fp8_per_tensor(),
            "mxfp8": cakemoe.QuantConfig.mxfp8(),
            "nvfp4": cakemoe.QuantConfig.nvfp4(),
            "nvfp4_bf16tok": cakemoe.QuantConfig.nvfp4(per_token_scale=True),
        }[self.family]

    def config(self, precomputed):
        # tests/python/stepfun_golden.cpp config_for()
        if precomputed:
            return cakemoe.MoEConfig(
                routing=cakemoe.RoutingConfig(num_experts=self.E, top_k=self.K),
                quant=self.quant(),
                experts=cakemoe.ExpertConfig(intermediate_size=self.I, local_expert_offset=1,
                                             local_num_experts=2),
                activation=cakemoe.SwiGLUStep(limit=16.0),
                backend=cakemoe.CakeStepFunConfig(backend="cake_stepfun"),
                routing_input=cakemoe.RoutingInputMode.UnpackedPrecomputed,
                finalize=cakemoe.MoEFinalizeConfig(do_finalize=False),
            )
        return cakemoe.MoEConfig(
            routing=cakemoe.RoutingConfig(num_experts=self.E, top_k=self.K,
                                          routed_scaling_factor=2.0),
            quant=self.quant(),
            experts=cakemoe.ExpertConfig(intermediate_size=self.I),
            activation=cakemoe.SwiGLUStep(limit=16.0),
            backend=cakemoe.CakeStepFunConfig(backend="cake_stepfun"),
        )


def check_prepare_weights(case):
    w1, w2 = case.input("w1"), case.input("w2")
    w = cakemoe.prepare_weights(w1, w2, family=case.family, step_limits=[7.0, 16.0, 7.0, 16.0],
                                hidden_states_scale_global=case.a_gs)
    case.check_weights(w, "W")
    local = cakemoe.stepfun.prepare_weights(
        w1, w2, family=case.family, step_limits=[16.0, 7.0], local_expert_offset=1,
        local_num_experts=2, hidden_states_scale_global=case.a_gs)
    case.check_weights(local, "WL")


def check_prepare_activations(case):
    act = cakemoe.prepare_activations(case.input("hidden"), family=case.family,
                                      hidden_states_scale_global=case.a_gs)
    for key in ACT_KEYS:
        name = case.prefix + "A_" + key
        if case.g.has(name):
            assert_same_bits(case.b, getattr(act, key), case.g[name], name)
        else:
            assert getattr(act, key) is None


def check_stepfun_moe(case):
    outputs = cakemoe.stepfun_moe(
        family=case.family, routing_logits=case.input("logits_fp32"), num_experts=case.E,
        top_k=case.K, routed_scaling_factor=1.5, **case.activations(), **case.weights("W"))
    case.check_list(outputs, "moe_logits_")


def check_prepare_stepfun_moe(case):
    topk_weights = case.input("topk_weights_bf16")
    layer = cakemoe.prepare_stepfun_moe(
        family=case.family, topk_ids=case.input("topk_ids"), topk_weights=topk_weights,
        num_experts=case.E, top_k=case.K, local_expert_offset=1, local_num_experts=2,
        do_finalize=False, **case.activations(), **case.weights("WL"))
    assert layer.plan.family == case.family and layer.plan.tile == case.g.manifest[
        case.prefix + "ids_tile"]
    layer.launch()
    outputs = layer.outputs()
    case.check_list(outputs, "moe_ids_")
    assert outputs[1] is topk_weights  # the caller's array comes back as itself
    layer.launch()  # a replay gives the same bits
    case.check_list(layer.outputs(), "moe_ids_")


def check_stages(case):
    """routing (one-shot), fc1 (prepared), requant (one-shot), fc2 (prepared), finalize
    (one-shot) on poisoned buffers shaped like the C++ ones; every buffer compared."""
    poison = case.g.dims["poison"]
    buf = {}
    for name in STAGE_BUFFERS:
        file = case.prefix + "stage_" + name
        if case.g.has(file):
            a = np.empty_like(case.g[file])
            a.view(np.uint8)[...] = poison
            buf[name] = case.b.array(a)
    tile = case.g.manifest[case.prefix + "tile"]
    tables = {k: buf[k] for k in ("cta_idx_xy_to_batch_idx", "cta_idx_xy_to_mn_limit",
                                  "num_non_exiting_ctas")}
    w, act = case.weights("W"), case.activations()
    cakemoe.routing(
        routing_logits=case.input("logits_bf16"), num_experts=case.E, top_k=case.K,
        tile_tokens_dim=tile, **{k: buf[k] for k in STAGE_BUFFERS[:10]})
    fc1_weights = {k: v for k, v in w.items() if not k.startswith(("gemm2", "output2"))}
    cakemoe.prepare_fc1(
        family=case.family, **act, **fc1_weights, **tables,
        permuted_idx_to_token_idx=buf["permuted_idx_to_token_idx"],
        total_num_padded_tokens=buf["total_num_padded_tokens"], gemm1_output=buf["gemm1_output"],
        gemm1_output_scale=buf.get("gemm1_output_scale"), top_k=case.K,
        tile_tokens_dim=tile).launch()
    gemm2_input = {"gemm2_input": buf["gemm1_output"],
                   "gemm2_input_scale": buf.get("gemm1_output_scale")}
    if case.family == "nvfp4_bf16tok":
        cakemoe.requant(
            gemm1_output=buf["gemm1_output"],
            expanded_idx_to_permuted_idx=buf["expanded_idx_to_permuted_idx"],
            output=buf["requant_output"], output_scale=buf["requant_output_scale"],
            per_token_scale=buf["requant_per_token_scale"],
            sf_layout="r8c4" if tile <= 64 else "r128c4")
        gemm2_input = {"gemm2_input": buf["requant_output"],
                       "gemm2_input_scale": buf["requant_output_scale"],
                       "per_token_scale": buf["requant_per_token_scale"]}
    fc2_weights = {k: v for k, v in w.items() if k.startswith(("gemm2", "output2"))}
    cakemoe.prepare_fc2(
        family=case.family, **gemm2_input, **fc2_weights, **tables,
        gemm2_output=buf["gemm2_output"], num_tokens=case.T, top_k=case.K,
        tile_tokens_dim=tile).launch()
    cakemoe.finalize(
        gemm2_output=buf["gemm2_output"], expert_weights=buf["topk_weights"],
        expanded_idx_to_permuted_idx=buf["expanded_idx_to_permuted_idx"],
        total_num_padded_tokens=buf["total_num_padded_tokens"], output=buf["output"],
        num_experts=case.E)
    for name, array in buf.items():
        file = case.prefix + "stage_" + name
        assert_same_bits(case.b, array, case.g[file], file)
    assert_nontrivial(case.g[case.prefix + "stage_output"], "stage output")


def check_config_entries(case):
    w1, w2, hidden = case.input("w1"), case.input("w2"), case.input("hidden")
    config = case.config(precomputed=False)
    assert config.validate() == case.family
    wc = config.prepare_weights(w1, w2, hidden_states_scale_global=case.a_gs)
    case.check_weights(wc, "WC")
    backend_view = cakemoe.CakeStepFunConfig.prepare_weights(
        w1, w2, quant=case.quant(), activation=cakemoe.SwiGLUStep(limit=16.0),
        hidden_size=case.H, intermediate_size=case.I, hidden_states_scale_global=case.a_gs)
    case.check_weights(backend_view, "WC")
    act = config.prepare_activations(wc, hidden)
    for key in ACT_KEYS:
        name = case.prefix + "AC_" + key
        got = getattr(act, key)
        if case.g.has(name):
            assert_same_bits(case.b, got, case.g[name], name)
        else:
            assert got is None
    inputs = {k: v for k, v in act._asdict().items() if v is not None}
    logits = case.input("logits_fp32")
    case.check_list(cakemoe.run_moe(config, wc, routing_logits=logits, **inputs),
                    "run_moe_logits_")
    layer = cakemoe.prepare_moe(config, wc, routing_logits=logits, **inputs)
    layer.launch()
    case.check_list(layer.outputs(), "run_moe_logits_")

    local = case.config(precomputed=True)
    wcl = local.prepare_weights(w1, w2, hidden_states_scale_global=case.a_gs)
    case.check_weights(wcl, "WCL")
    case.check_list(
        cakemoe.run_moe(local, wcl, topk_ids=case.input("topk_ids"),
                        topk_weights=case.input("topk_weights_bf16"), **inputs),
        "run_moe_ids_")


def check_plans(golden, device):
    rows = golden.manifest["plans"]
    assert len(rows) == 20
    for row in rows:
        problem = dict(family=row["family"], num_tokens=row["T"], top_k=8, local_num_experts=64,
                       hidden_size=4096, intermediate_size=1536, logits_input=row["logits"],
                       device=device)
        assert repr(cakemoe.default_plan(**problem)) == row["default"]
        assert [repr(p) for p in cakemoe.plans_for(**problem)] == row["all"]


ENTRY_CHECKS = [
    check_prepare_weights,
    check_prepare_activations,
    check_stepfun_moe,
    check_prepare_stepfun_moe,
    check_stages,
    check_config_entries,
]
