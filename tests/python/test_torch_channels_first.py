"""bitfold.torch on CPU (skipped, visibly, without torch): which kernel
variant serves a pixel tensor's layout. A dense NC[D]HW tensor with more than
one pixel per image takes the channels-first variant with aten's
output_vec_size for its D*H*W (the norm also a frames-major one, as the
images N*T); channels-last tensors keep the channels-last
variant; every other layout (permuted, sliced, expanded, one pixel per
image) keeps the channels-last variant too, which
the library's binding refuses, so the op serves it eagerly with eager's
bits.
"""
import contextlib
import unittest

try:
    import torch
except ImportError:
    torch = None

if torch is not None:
    from test_torch_norm_ops import StubRuntime, channels_last, rand


@contextlib.contextmanager
def wan_on_a_stub_runtime(ops):
    """wan_rmsnorm_silu on a StubRuntime (host tensors allowed, stats reset,
    auto mode, verify off); the default runtime restored after."""
    import bitfold
    import bitfold.torch as bt
    from bitfold.torch import _ops
    wan = ops.WAN_RMSNORM_SILU
    saved = (bitfold.default_runtime, _ops._ALLOW_HOST)
    rt = StubRuntime()
    try:
        bitfold.default_runtime = lambda: rt
        wan.new_kernels()
        _ops._ALLOW_HOST = True
        bt.reset_stats()
        bt.configure(mode="auto", verify="off")
        yield rt
    finally:
        bitfold.default_runtime, _ops._ALLOW_HOST = saved
        wan.new_kernels()


@unittest.skipIf(torch is None, "torch not installed: bitfold.torch tests skipped")
class ChannelsFirstDispatch(unittest.TestCase):
    def setUp(self):
        from bitfold.torch import _table
        self.ops = _table

    def params(self, x):
        return self.ops._channels_first_params(x)

    def test_dense_ncdhw_takes_the_channels_first_variant_with_its_output_vector(self):
        for shape, ovs in (((1, 96, 4, 8, 8), 4), ((2, 12, 1, 5, 6), 2),
                           ((1, 33, 1, 3, 5), 1), ((1, 96, 30, 52), 4)):
            self.assertEqual(self.params(rand(*shape)),
                             f",layout=channels_first,outvec={ovs}", shape)

    def test_conv_bias_asks_for_the_layout_only(self):
        # An elementwise epilogue has no reduction order: no outvec (the
        # template would refuse the parameter).
        self.assertEqual(self.ops._channels_first_params(rand(1, 96, 4, 8, 8), outvec=False),
                         ",layout=channels_first")
        self.assertEqual(self.ops.CONV_BIAS.params(self.ops.CONV_BIAS.variant(
            (rand(1, 96, 4, 8, 8), rand(96, seed=2), None))),
            "dtype=bf16,bias_dtype=bf16,residual=0,layout=channels_first")

    def test_other_layouts_keep_the_channels_last_variant(self):
        x = rand(2, 96, 4, 8, 8)
        cases = {
            "channels-last": channels_last(x),
            "permuted H/W": x.transpose(3, 4),
            "sliced channels": x[:, ::2],
            "sliced width": x[..., :5],
            "expanded batch": x[:1].expand(3, -1, -1, -1, -1),
            "one pixel per image": rand(2, 96, 1, 1, 1),
            "one channel": rand(2, 1, 4, 8, 8),
            "3-D": rand(2, 96, 64),
        }
        for what, t in cases.items():
            self.assertEqual(self.params(t), "", what)

    def test_every_wan_vae_width_takes_the_channels_first_variant(self):
        # Rows wider than one thread's registers run rolled (a loop over C):
        # the Wan VAE's 192 and 384 channels, odd widths, up to the
        # template's 1024; the conv bias at any C.
        for c in (96, 128, 160, 192, 200, 333, 384, 512, 1024):
            self.assertEqual(self.params(rand(1, c, 2, 4, 4)),
                             ",layout=channels_first,outvec=4", c)
            self.assertEqual(self.ops._channels_first_params(rand(1, c, 2, 4, 4), outvec=False),
                             ",layout=channels_first", c)
        wan = self.ops.WAN_RMSNORM_SILU
        for conv in (None, rand(384, seed=3)):
            key = wan.variant((rand(1, 384, 2, 4, 4), rand(384, 1, 1, 1, seed=1), None,
                               conv, "x"))
            self.assertTrue(wan.params(key).endswith(",layout=channels_first,outvec=4"), key)
        # Beyond the template's limit: the channels-last variant (refused, eager).
        self.assertEqual(self.ops._channels_first_params(rand(1, 1025, 2, 2, 2), 1024), "")

    def test_wan_asks_for_the_channels_first_kernel_for_ncdhw(self):
        import bitfold.torch as bt
        with wan_on_a_stub_runtime(self.ops) as rt:
            x = rand(1, 96, 2, 4, 6)
            y = bt.wan_rmsnorm_silu(x, rand(96, 1, 1, 1, seed=1), None, None, "f32")
            self.assertEqual(rt.kernels[-1].params,
                             "dtype=bf16,form=f32,gamma=bf16,bias=0,conv_bias=0,"
                             "layout=channels_first,outvec=4")
            self.assertEqual(rt.kernels[-1].launches[-1]["tensors"][0][2], tuple(x.stride()))
            self.assertTrue(y.is_contiguous())

    def test_frames_major_x_takes_the_channels_first_variant_with_the_images_outvec(self):
        # The Wan VAE's frame reshapes give x (N, C, T, H, W) stored as
        # (N, T, C, H, W): aten folds C over N*T images of H*W pixels, so
        # the outvec is H*W's (not T*H*W's); the library binds x as it is.
        import bitfold.torch as bt
        with wan_on_a_stub_runtime(self.ops) as rt:
            for (n, t, h, w), ovs in (((1, 4, 6, 6), 4), ((2, 3, 5, 6), 2), ((1, 2, 3, 5), 1)):
                x = rand(n, t, 96, h, w).transpose(1, 2)
                self.assertFalse(x.is_contiguous())
                for _ in range(2):  # the checked path, then the prepared site
                    y = bt.wan_rmsnorm_silu(x, rand(96, 1, 1, 1, seed=1), None, None, "x")
                    self.assertEqual(rt.kernels[-1].params,
                                     "dtype=bf16,form=x,gamma=bf16,bias=0,conv_bias=0,"
                                     f"layout=channels_first,outvec={ovs}")
                    xs, ys = (rt.kernels[-1].launches[-1]["tensors"][i] for i in (0, -1))
                    self.assertEqual(xs[1:], (tuple(x.shape), tuple(x.stride())))
                    self.assertEqual(y.stride(), x.stride())  # as eager's result
            self.assertEqual(bt.stats()["wan_rmsnorm_silu"]["fallbacks"], {})
            self.assertEqual(self.ops._channels_first_params(
                rand(1, 4, 96, 6, 6).transpose(1, 2), outvec=False), ",layout=channels_first")
            # Images of C x W (H outer) follow the same rule; H and W swapped
            # or channels-last do not.
            self.assertEqual(self.params(rand(1, 3, 4, 96, 8).permute(0, 3, 1, 2, 4)),
                             ",layout=channels_first,outvec=4")
            self.assertEqual(self.params(rand(1, 4, 96, 6, 8).transpose(1, 2).transpose(3, 4)), "")

if __name__ == "__main__":
    unittest.main()
