"""bitfold.dsl: programs built in Python are the programs the C++ DSL and
the text format give (same canonical text, same hash), and its op table is
dsl/Ops.def's.

Equality is decided by the library: a program registered with
kernel_from_source under a name accepts the same program again under that
name and rejects a different one ("taken by a different program"), so each
test registers the builder's text, then the reference text (a doc example,
an example .bfk, or a stock kernel's canonical text printed by the CLI,
`bitfold interp KERNEL --print-text`) renamed to the same name. No GPU:
kernel_from_source parses and verifies only.
"""
import os
import re
import subprocess
import sys
import unittest

import bitfold
from bitfold import dsl

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
CLI = os.environ.get("BITFOLD_TEST_CLI")


def read(*parts):
    with open(os.path.join(ROOT, *parts)) as f:
        return f.read()


def doc_example(name):
    text = read("docs", "kernel-format.md")
    for block in re.findall(r"```kernel\n(.*?)```", text, re.S):
        if block.startswith(f"bitfold.row_program {name} "):
            return block
    raise KeyError(name)


def renamed(text, name):
    return re.sub(r"bitfold\.row_program \w+ v1", f"bitfold.row_program {name} v1", text, 1)


def sum_combiner(name="sum", square=False):
    return dsl.Combiner(name, ["acc"], [0.0], ["acc"],
                        push=lambda acc, v: acc + (v * v if square else v),
                        combine=lambda a, b: a + b, finish=lambda a: a)


def residual_add():
    p = dsl.Program("residual_add")
    x, r = p.input("x", "bf16"), p.input("r", "bf16")
    p.output("y", "bf16", dsl.round(x.load() + r.load(), "bf16"))
    return p


def modulate():
    p = dsl.Program("modulate")
    s = p.dim("S")
    x = p.input("x", "bf16")
    scale = p.input("scale", "bf16", index=dsl.per_batch(s))
    w = p.input("weight", "bf16", index=dsl.per_column)
    p.output("y", "bf16", dsl.round(x.load() * scale.load() * w.load(), "bf16"))
    return p


def bias_cl():
    p = dsl.Program("bias_cl", guard=(4, 4, 4096))
    x = p.input("x", "f16", "channels_last", align=4)
    b = p.input("bias", "f32", index=dsl.per_column)
    p.output("y", "f16", dsl.round(x.load() + b.load(), "f16"), "channels_last", align=4)
    return p


def add_eps():
    p = dsl.Program("add_eps")
    x = p.input("x", "f32")
    eps, gain = p.scalar("eps", default=1e-6), p.scalar("gain")
    p.output("y", "f32", (x.load() + eps) * gain)
    return p


def relu():
    p = dsl.Program("relu")
    xf = dsl.extend(p.input("x", "bf16").load())
    zero = dsl.const(xf, 0.0)
    keep = dsl.or_(dsl.cmp_gt(xf, zero), dsl.cmp_ne(xf, xf))
    p.output("y", "bf16", dsl.round(dsl.select(keep, xf, zero), "bf16"))
    return p


def row_sum():
    p = dsl.Program("row_sum", guard=(1, 1, 65536))
    x = p.input("x", "f32").load()
    s = p.fold(x, dsl.FoldOrder.serial(), sum_combiner())["acc"]
    p.output("y", "f32", x - s)
    return p


def mean_and_center():
    p = dsl.Program("mean_and_center", guard=(1, 1, 65536))
    x = p.input("x", "f32").load()
    s = p.fold(x, dsl.FoldOrder.serial(), sum_combiner())["acc"]
    mean = s / p.dim_value("cols")
    p.output("y", "f32", x - mean)
    p.output("mean", "f32", mean, index=dsl.per_row)
    return p


def rmsnorm():
    p = dsl.Program("rmsnorm", guard=(8, 8, 8192))
    xf = dsl.extend(p.input("x", "bf16").load())
    w = p.input("w", "bf16", index=dsl.per_column)
    eps = p.scalar("eps", default=1e-6)
    ss = p.fold(xf, dsl.FoldOrder.warp_butterfly(8), sum_combiner("sum_of_squares", True))
    rstd = dsl.rsqrt_approx_ftz(ss["acc"] / p.dim_value("cols") + eps)
    p.output("y", "bf16", dsl.round(xf * rstd * w.load(), "bf16"))
    return p


def pair_swap():
    """docs/kernel-format.md "Index ops": each element's partner column."""
    p = dsl.Program("pair_swap", guard=(2, 2, 65536))
    x = p.input("x", "bf16")
    c = p.col_index()
    even = dsl.icmp_eq(dsl.irem(c, 2), 0)
    partner = dsl.iselect(even, dsl.iadd(c, 1), dsl.isub(c, 1))
    p.output("y", "bf16", dsl.round(dsl.gather(x, partner), "bf16"))
    return p


ATEN_SOFTMAX_BLOCK = dsl.FoldOrder(
    "aten_softmax_block", 1024, 8,
    [("shfl_down", o) for o in (16, 8, 4, 2, 1)] + [("cross_warp", o)
                                                    for o in (512, 256, 128, 64, 32)])


def zoo_cross_entropy():
    """examples/zoo/cross_entropy.bfk: a per_row i32 input and a gather."""
    p = dsl.Program("zoo_cross_entropy", guard=(8192, 8192, 16777216))
    x = p.input("x", "bf16", align=8)
    target = p.input("target", "i32", index=dsl.per_row)
    xf = dsl.extend(x.load())
    amax = dsl.Combiner("aten_max", ["m"], [float.fromhex("-0x1.fffffep127")], ["m"],
                        push=lambda m, v: dsl.max_num(m, v),
                        combine=lambda a, b: dsl.select(dsl.cmp_lt(a, b), b, a),
                        finish=lambda a: a)
    mx = p.fold(xf, ATEN_SOFTMAX_BLOCK, amax)["m"]
    total = p.fold(dsl.exp_libdevice(xf - mx), ATEN_SOFTMAX_BLOCK, sum_combiner())["acc"]
    t = target.load()
    lp = dsl.round(dsl.gather(x, t) - mx - dsl.log_libdevice(total), "bf16")
    skip = dsl.icmp_eq(t, -100)
    loss = dsl.select(skip, 0.0, -dsl.extend(lp))
    p.output("loss", "bf16", dsl.round(loss, "bf16"), index=dsl.per_row)
    return p


def welford_ops():
    """aten's WelfordOps (reduce, combine) with nvcc's contractions."""
    def push(mean, m2, nf, v):
        n1 = nf + 1.0
        delta = v - mean
        mean1 = mean + delta / n1
        return mean1, dsl.fma_rn(delta, v - mean1, m2), n1

    def combine(am, am2, an, bm, bm2, bn):
        zero = dsl.const(an, 0.0)  # one node, as the text's %zero
        aempty, bempty = dsl.cmp_eq(an, zero), dsl.cmp_eq(bn, zero)
        delta = bm - am
        n = an + bn
        nb = bn / n
        mean = dsl.fma_rn(delta, nb, am)
        m2 = dsl.fma_rn(delta * delta * an, nb, am2 + bm2)
        keep = [dsl.select(bempty, a, c) for a, c in ((am, mean), (am2, m2), (an, n))]
        return tuple(dsl.select(aempty, b, k) for b, k in zip((bm, bm2, bn), keep))
    return dsl.Combiner("welford_ops", ["mean", "m2", "nf"], [0.0, 0.0, 0.0],
                        ["mean", "m2", "nf"], push=push, combine=combine,
                        finish=lambda mean, m2, nf: (mean, m2, nf))


def zoo_group_norm_affine():
    """examples/zoo/group_norm_affine.bfk: vector(C) inputs, `dim C : i32`."""
    p = dsl.Program("zoo_group_norm_affine", guard=(1, 512, 16777216))
    C = p.dim("C")
    x = p.input("x", "bf16")
    gamma = p.input("gamma", "bf16", index=dsl.vector(C))
    beta = p.input("beta", "bf16", index=dsl.vector(C))
    eps = p.scalar("eps", default=1e-5)
    xf = dsl.extend(x.load())
    order = dsl.FoldOrder("aten_block_reduce_512", 512, 1,
                          [("shfl_down", o) for o in (16, 8, 4, 2, 1)] +
                          [("cross_warp", o) for o in (256, 128, 64, 32)])
    m = p.fold(xf, order, welford_ops())
    rstd = dsl.rsqrt_cuda(m["m2"] / m["nf"] + dsl.extend(dsl.round(eps, "bf16")))
    per_group = dsl.idiv(p.dim_index(C), 32)
    hw = dsl.idiv(p.dim_index("cols"), per_group)
    channel = dsl.iadd(dsl.imul(dsl.irem(p.row_index(), 32), per_group),
                       dsl.idiv(p.col_index(), hw))
    # aten reads mean and rstd back from their bf16 tensors.
    a = dsl.extend(dsl.round(rstd, "bf16")) * dsl.gather(gamma, channel)
    b = dsl.fma_rn(-a, dsl.extend(dsl.round(m["mean"], "bf16")), dsl.gather(beta, channel))
    p.output("y", "bf16", dsl.round(dsl.fma_rn(a, xf, b), "bf16"))
    return p


def user_add_rmsnorm():
    """examples/user_kernels/add_rmsnorm.bfk."""
    p = dsl.Program("user_add_rmsnorm", guard=(8, 8, 8192))
    x, r = p.input("x", "bf16"), p.input("r", "bf16")
    w = p.input("w", "bf16", index=dsl.per_column)
    eps = p.scalar("eps", default=1e-6)
    h = dsl.round(x.load() + r.load(), "bf16")
    hf = dsl.extend(h)
    ss = p.fold(hf, dsl.FoldOrder.warp_butterfly(8), sum_combiner("sum_of_squares", True))
    rstd = dsl.rsqrt_approx_ftz(ss["acc"] / p.dim_value("cols") + eps)
    p.output("h", "bf16", h)
    p.output("y", "bf16", dsl.round(dsl.round(hf * rstd, "bf16") * w.load(), "bf16"))
    return p


def user_bias_gelu_erf():
    """examples/user_kernels/bias_gelu_erf.bfk: ATen's erf GELU."""
    p = dsl.Program("user_bias_gelu_erf")
    x, b = p.input("x", "bf16"), p.input("bias", "bf16", index=dsl.per_column)
    v = dsl.extend(dsl.round(x.load() + b.load(), "bf16"))
    e1 = 1.0 + dsl.erf_libdevice(v * float.fromhex("0x1.6a09e6p-1"))  # M_SQRT1_2 in f32
    p.output("y", "bf16", dsl.round(v * 0.5 * e1, "bf16"))
    return p


def stock_rmsnorm_modulate():
    """templates' rmsnorm_modulate at D = 2048, bf16: flashinfer's order."""
    p = dsl.Program("rmsnorm_modulate", guard=(2048, 2048, 2048))
    s = p.dim("S")
    xf = dsl.extend(p.input("x", "bf16").load())
    w = p.input("weight", "bf16", index=dsl.per_column)
    scale = p.input("scale", "bf16", index=dsl.per_batch(s))
    shift = p.input("shift", "bf16", index=dsl.per_batch(s))
    eps = p.scalar("eps", default=1e-6)
    order = dsl.FoldOrder("flashinfer_rmsnorm_tpr32", 32, 8,
                          [("bfly_xor", 1 << i) for i in range(5)])
    ss = p.fold(xf, order, sum_combiner("sum_of_squares", True))["acc"]
    rstd = dsl.rsqrt_approx_ftz(ss / p.dim_value("cols") + eps)
    y = dsl.round(xf * rstd * (w.load() + 0.0), "bf16")
    y = dsl.round(y * dsl.round(1.0 + scale.load(), "bf16"), "bf16")
    p.output("y", "bf16", dsl.round(y + shift.load(), "bf16"))
    return p


def welford_aten():
    """aten's Welford (WelfordOps in SharedReduceOps.h) as nvcc compiles it."""
    def push(n, mean, m2, x):
        n1 = n + 1.0
        delta = x - mean
        new_mean = dsl.fma_rn(delta, dsl.rcp_nvcc(n1), mean)
        return n1, new_mean, dsl.fma_rn(delta, x - new_mean, m2)

    def combine(an, amean, am2, bn, bmean, bm2):
        n = bn + an
        some = dsl.cmp_gt(n, 0.0)
        r = dsl.rcp_nvcc(n)
        nb_over_n, na_over_n = bn * r, r * an
        mean = dsl.fma_rn(bmean, nb_over_n, na_over_n * amean)
        delta = amean - bmean
        m2 = dsl.fma_rn(na_over_n, bn * (delta * delta), bm2 + am2)
        return n, dsl.select(some, mean, 0.0), dsl.select(some, m2, 0.0)
    return dsl.Combiner("welford_aten", ["n", "mean", "m2"], [0.0, 0.0, 0.0],
                        ["n", "mean", "m2"], push, combine, lambda n, mean, m2: (n, mean, m2))


def stock_ln_modulate():
    """templates' ln_modulate, bf16: aten's vectorized LayerNorm order and
    Welford, then adaLN modulation."""
    p = dsl.Program("ln_modulate", guard=(4, 4, 16777216))
    s = p.dim("S")
    xf = dsl.extend(p.input("x", "bf16", align=4).load())
    scale = p.input("scale", "bf16", index=dsl.per_batch(s))
    shift = p.input("shift", "bf16", index=dsl.per_batch(s))
    eps = p.scalar("eps", default=1e-6)
    order = dsl.FoldOrder("aten_vectorized_layer_norm", 128, 4,
                          [("shfl_down", 16 >> i) for i in range(5)] +
                          [("cross_warp", 64), ("cross_warp", 32)])
    st = p.fold(xf, order, welford_aten())
    rstd = dsl.rsqrt_cuda(st["m2"] / p.dim_value("cols") + eps)
    y = dsl.round(rstd * (xf - st["mean"]), "bf16")
    y = dsl.round(y * dsl.round(1.0 + scale.load(), "bf16"), "bf16")
    p.output("y", "bf16", dsl.round(y + shift.load(), "bf16"), align=4)
    return p


def stock_qk_layernorm():
    """templates' qk_layernorm, bf16: two tensor groups (q, k) of one LayerNorm."""
    p = dsl.Program("qk_layernorm", guard=(4, 4, 128), groups=2)
    xf = dsl.extend(p.input("x", "bf16", align=4).load())
    eps = p.scalar("eps", default=1e-6)
    order = dsl.FoldOrder("aten_vectorized_layer_norm", 128, 4,
                          [("shfl_down", 16 >> i) for i in range(5)] +
                          [("cross_warp", 64), ("cross_warp", 32)])
    st = p.fold(xf, order, welford_aten())
    rstd = dsl.rsqrt_cuda(st["m2"] / p.dim_value("cols") + eps)
    p.output("y", "bf16", dsl.round(rstd * (xf - st["mean"]), "bf16"), align=4)
    return p


def stock_wan_rmsnorm_silu():
    """templates' wan_rmsnorm_silu at (1, 96, 2, 8, 8), bf16, form x, with
    bias: F.normalize(x, dim=1) in aten's order (norm 2 over channels),
    * scale * gamma + bias, then SiLU; every bf16 rounding of the chain."""
    p = dsl.Program("wan_rmsnorm_silu", guard=(1, 1, 1024))
    xf = dsl.extend(p.input("x", "bf16", "channels_last").load())
    gamma = p.input("gamma", "bf16", index=dsl.per_column)
    bias = p.input("bias", "bf16", index=dsl.per_column)
    scale = p.scalar("scale")
    order = dsl.FoldOrder("aten_reduce_c96_r16_vt4_v4_plain", 32, 1,
                          [("shfl_down", 16 >> i) for i in range(5)],
                          {"accumulators": 1, "map": "round-robin", "ctas": 1, "final": [],
                           "rows": (16, 11184810)})
    norm2 = dsl.Combiner("norm_two_aten", ["acc"], [0.0], ["acc"],
                         push=lambda acc, v: dsl.fma_rn(v, v, acc),
                         combine=lambda a, b: a + b, finish=lambda a: a)
    norm = dsl.round(dsl.sqrt_rn(p.fold(xf, order, norm2)["acc"]), "bf16")
    n = dsl.round(xf / dsl.round(dsl.max_nan(norm, 1e-12), "bf16"), "bf16")
    v = dsl.round(dsl.round(dsl.round(n * scale, "bf16") * gamma.load(), "bf16") + bias.load(),
                  "bf16")
    p.output("y", "bf16", dsl.round(v / (1.0 + dsl.exp_libdevice(-v)), "bf16"),
             "channels_last")
    return p


def stock_residual_gate():
    """templates' residual_gate, dtype=bf16, gate=full."""
    p = dsl.Program("residual_gate")
    r, u, g = (p.input(n, "bf16") for n in ("residual", "update", "gate"))
    p.output("y", "bf16", dsl.round(r.load() + dsl.round(u.load() * g.load(), "bf16"),
                                    "bf16"))
    return p


def stock_conv_bias():
    """templates' conv_bias, dtype=bf16 (bias bf16, no residual)."""
    p = dsl.Program("conv_bias", guard=(1, 2, 2147483648))
    x = p.input("x", "bf16", "channels_last")
    b = p.input("bias", "bf16", index=dsl.per_column)
    p.output("y", "bf16", dsl.round(x.load() + dsl.round(b.load(), "bf16"), "bf16"),
             "channels_last")
    return p


def stock_hf_rmsnorm():
    """templates' hf_rmsnorm at (1, 16, 1024), bf16: aten's reduction order
    for 1024 columns and 16+ rows, mean as aten computes it, rsqrtf."""
    p = dsl.Program("hf_rmsnorm", guard=(1, 1, 130560))
    xf = dsl.extend(p.input("x", "bf16").load())
    w = dsl.extend(p.input("weight", "bf16", index=dsl.per_column).load())
    eps = p.scalar("eps", default=1e-6)
    order = dsl.FoldOrder("aten_reduce_c1024_r16_vt4_v4", 32, 4,
                          [("shfl_down", 16 >> i) for i in range(5)],
                          {"accumulators": 4, "map": "by-element", "aligned": True, "ctas": 1,
                           "final": [], "rows": (16, 524287)})
    ss = p.fold(xf * xf, order, sum_combiner())["acc"]
    rows = p.dim_value("rows")
    mean = ss * (rows / (rows * p.dim_value("cols")))
    y = dsl.round(w * dsl.extend(dsl.round(xf * dsl.rsqrt_cuda(mean + eps), "bf16")), "bf16")
    p.output("y", "bf16", y)
    return p


class SameProgram:
    """Registers texts under one fresh name per check."""
    count = 0

    def __init__(self, case):
        self.case = case
        self.rt = bitfold.Runtime(disk_cache=False)

    def assert_same(self, built, reference, what):
        SameProgram.count += 1
        name = f"pydsl_check_{SameProgram.count}"
        self.rt.kernel_from_source(renamed(built, name))
        try:
            self.rt.kernel_from_source(renamed(reference, name))
        except bitfold.BitfoldError as e:
            self.case.fail(f"{what}: the builder's program differs from the reference: "
                           f"{e.message}\n--- builder:\n{built}")


class BuilderTextsAreTheReferencePrograms(unittest.TestCase):
    def setUp(self):
        try:
            self.same = SameProgram(self)
        except (OSError, bitfold.BitfoldError) as e:
            self.skipTest(f"libbitfold.so not loadable here: {e}")

    def test_every_doc_example_built_in_python(self):
        for build in (residual_add, modulate, bias_cl, add_eps, relu, row_sum, rmsnorm,
                      mean_and_center, pair_swap):
            self.same.assert_same(build().text(), doc_example(build.__name__), build.__name__)

    def test_the_user_kernel_examples(self):
        self.same.assert_same(user_add_rmsnorm().text(),
                              read("examples", "user_kernels", "add_rmsnorm.bfk"),
                              "add_rmsnorm.bfk")
        self.same.assert_same(user_bias_gelu_erf().text(),
                              read("examples", "user_kernels", "bias_gelu_erf.bfk"),
                              "bias_gelu_erf.bfk")

    def test_index_ops_and_a_per_row_input_build_the_cross_entropy_zoo_kernel(self):
        self.same.assert_same(zoo_cross_entropy().text(),
                              read("examples", "zoo", "cross_entropy.bfk"), "cross_entropy.bfk")

    def test_vector_inputs_and_integer_dims_build_the_group_norm_zoo_kernel(self):
        self.same.assert_same(zoo_group_norm_affine().text(),
                              read("examples", "zoo", "group_norm_affine.bfk"),
                              "group_norm_affine.bfk")

    def test_the_tutorials_index_op_example_builds_the_interleaved_rope_zoo_kernel(self):
        text = read("docs", "torch-tutorial.md")
        code = [b for b in re.findall(r"```python\n(.*?)```", text, re.S) if "col_index" in b]
        self.assertEqual(len(code), 1, "docs/torch-tutorial.md: one python block with col_index")
        scope = {}
        exec(code[0], scope)  # noqa: S102 (the doc's own example, pasted)
        self.same.assert_same(scope["p"].text(), read("examples", "zoo", "rope_interleaved.bfk"),
                              "docs/torch-tutorial.md index-op example")

    def test_a_different_program_is_told_apart(self):
        other = residual_add()
        other.outputs[0] = ("y", "bf16", "row_major", None,
                            [dsl.round(other._graph.nodes[0] * 2.0, "bf16")], dsl.per_element)
        with self.assertRaises(AssertionError):
            self.same.assert_same(other.text(), doc_example("residual_add"), "changed")

    @unittest.skipUnless(CLI, "BITFOLD_TEST_CLI (the bitfold command) not set")
    def test_stock_kernels_built_in_python(self):
        cases = [(stock_residual_gate, "residual_gate", "1,16,1024", ""),
                 (stock_conv_bias, "conv_bias", "1,96,2,8,8", ""),
                 (stock_hf_rmsnorm, "hf_rmsnorm", "1,16,1024", ""),
                 (stock_rmsnorm_modulate, "rmsnorm_modulate", "1,16,2048", ""),
                 (stock_ln_modulate, "ln_modulate", "1,16,1024", ""),
                 (stock_qk_layernorm, "qk_layernorm", "1,16,4,128", ""),
                 (stock_wan_rmsnorm_silu, "wan_rmsnorm_silu", "1,96,2,8,8", "")]
        for build, kernel, shape, params in cases:
            cmd = [CLI, "interp", kernel, "--shape", shape, "--print-text"]
            out = subprocess.run(cmd + (["--params", params] if params else []), check=True,
                                 capture_output=True, text=True).stdout
            text = out.split("\n# hash ")[0] + "\n"  # the text, then its hash as a comment
            self.same.assert_same(build().text(), text, kernel)


class OpTableIsOpsDef(unittest.TestCase):
    def test_every_computed_op_of_ops_def_with_its_arity(self):
        path = os.path.join(ROOT, "dsl", "Ops.def")
        if not os.path.exists(path):
            self.skipTest("dsl/Ops.def not beside the tests")
        ops = re.findall(r'BITFOLD_DSL_OP\(\w+, "(\w+)", (-?\d+), (\w+)',
                         read("dsl", "Ops.def"))
        rules = {"Arith": "arith", "Compare": "compare", "Logic": "logic",
                 "Select": "select"}
        want = {s: (int(n), rules[t]) for s, n, t in ops if t in rules}
        self.assertEqual(dsl.OPS, want)
        int_rules = {"IntArith": "int_arith", "IntCompare": "int_compare",
                     "IntSelect": "int_select", "IntToFloat": "int_to_float"}
        self.assertEqual(dsl.INT_OPS, {s: (int(n), int_rules[t]) for s, n, t in ops
                                       if t in int_rules})
        spelled = {s for s, _, t in ops if t not in rules and t not in int_rules}
        # Leaves, conversions and gather have builders of their own.
        self.assertEqual(spelled, {"const", "scalar", "dim", "load", "fold_value", "arg",
                                   "invalid", "round", "extend", "row_index", "col_index",
                                   "iconst", "gather"})


class BuilderErrors(unittest.TestCase):
    def test_unrounded_output_and_bad_operands_raise_at_the_line_that_built_them(self):
        p = dsl.Program("bad")
        x = p.input("x", "bf16")
        with self.assertRaisesRegex(ValueError, "round it"):
            p.output("y", "bf16", x.load() + 1.0)
        with self.assertRaisesRegex(ValueError, "predicate"):
            dsl.select(x.load(), 1.0, 2.0)
        with self.assertRaisesRegex(ValueError, "layout"):
            p.input("z", "bf16", layout="nchw")

    def test_index_ops_take_index_values_and_ints_only(self):
        p = dsl.Program("bad_index")
        x = p.input("x", "f32")
        with self.assertRaisesRegex(ValueError, "not an index value"):
            dsl.iadd(x.load(), 1)
        with self.assertRaisesRegex(ValueError, "convert it with itof"):
            dsl.add(p.col_index(), 1.0)
        with self.assertRaisesRegex(ValueError, "i32's range"):
            dsl.iadd(p.col_index(), 2**31)
        with self.assertRaisesRegex(ValueError, "an i32 input is per_row"):
            p.input("t", "i32")
        t = p.input("t", "i32", index=dsl.per_row)
        with self.assertRaisesRegex(ValueError, "load it"):
            dsl.gather(t, 0)
        self.assertEqual(dsl.itof(dsl.imul(p.row_index(), 3)).dtype, "f32")
        self.assertIn("= gather x, %", dsl.gather(x, t.load()).line())
        g = p.input("g", "f32", index=dsl.vector("D"))
        with self.assertRaisesRegex(ValueError, "read it with dsl.gather"):
            g.load()

    def test_k_values_per_row_need_per_row_and_print_as_per_row_k(self):
        p = dsl.Program("bad_rows")
        x = p.input("x", "f32").load()
        s = p.fold(x, dsl.FoldOrder.serial(), sum_combiner())["acc"]
        with self.assertRaisesRegex(ValueError, "2 values per row need index=per_row"):
            p.output("st", "f32", [s, s])
        with self.assertRaisesRegex(ValueError, "at least one value"):
            p.output("st", "f32", [], index=dsl.per_row)
        p.output("st", "f32", [s, s * s], index=dsl.per_row)
        self.assertRegex(p.text(), r"output st : f32 row_major per_row\(2\) = %\w+, %\w+\n")

    def test_a_program_the_verifier_rejects_names_the_python_line_that_built_it(self):
        p = dsl.Program("unused_fold")
        x = p.input("x", "f32").load()
        p.fold(x, dsl.FoldOrder.serial(), sum_combiner()); line = sys._getframe().f_lineno  # noqa
        p.output("y", "f32", x)
        try:
            rt = bitfold.Runtime(disk_cache=False)
        except OSError as e:
            self.skipTest(f"libbitfold.so not loadable here: {e}")
        with self.assertRaises(bitfold.BitfoldError) as caught:
            rt.kernel_from_source(p.text())
        self.assertIn("fold 0", caught.exception.message)
        self.assertTrue(p.explain(caught.exception.message).endswith(
            f"(built at test_dsl.py:{line})"), p.explain(caught.exception.message))


if __name__ == "__main__":
    unittest.main()
