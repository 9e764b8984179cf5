"""Drop-in patches for diffusers models: bitfold.torch.patch(model).

Sites, each patched only where its original code is the one the bitfold
form was written against (a fingerprint of the forward's tokens, diffusers
0.42.1); any other version of a site is left alone with a warning unless
force=True. verify="once" (the default here) compares each op's first call
per shape class with eager and disables the op on any difference.

  GlmImageAdaLayerNormZero        LayerNorm + modulate x2 -> ln_modulate
  GlmImageTransformerBlock        attn/ff gates -> residual_gate (per batch),
                                  norm2(_context) + modulate -> ln_modulate
  GlmImageAttnProcessor           norm_q + norm_k -> qk_layernorm, one launch
  GlmImageAdaLayerNormContinuous  LayerNorm + modulate -> ln_modulate
  WanResidualBlock                conv2's bias + the residual `x + h` ->
                                  conv_bias with residual (same conditions)
  WanCausalConv3d                 conv bias epilogue -> conv_bias, where aten
                                  itself adds the bias after cuDNN (CUDA,
                                  groups 1, cuDNN on); the kernel runs where
                                  the activations are channels_last_3d, the
                                  default NCDHW layout falls back to eager
  WanResidualBlock                norm1/norm2 (WanRMS_norm) + SiLU ->
                                  wan_rmsnorm_silu, form "f32" (diffusers'
                                  norm on x.float()); channels-last only,
                                  like conv_bias
  RMSNorm (diffusers)             -> hf_rmsnorm where the weight has x's
                                  dtype and there is no bias (there the two
                                  forms round identically; an f32 weight on
                                  bf16 x rounds differently: left to eager)

Not patched: WanRMS_norm without a following SiLU (WanAttentionBlock), and
the decoders' norm_out + SiLU (inside WanEncoder3d/WanDecoder3d.forward).
"""
import hashlib
import inspect
import io
import textwrap
import tokenize
import types
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import _table

KNOWN = {  # diffusers 0.42.1
    "GlmImageAdaLayerNormZero.forward": "e30747ee538473da",
    "GlmImageTransformerBlock.forward": "520fc196abad7337",
    "GlmImageAttnProcessor.__call__": "b11f4dc8cabe46fa",
    "GlmImageAdaLayerNormContinuous.forward": "02e5315b7f03fdb4",
    "WanCausalConv3d.forward": "af8e1196477e73a0",
    "WanResidualBlock.forward": "5abf5935c447b9a3",
    "WanRMS_norm.forward": "5641c5d163deb9a1",
    "RMSNorm.forward": "c982fbc131df54ad",
}

CACHE_T = 2  # diffusers' autoencoder_kl_wan.CACHE_T (frames a conv caches)

_SKIP = (tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
         tokenize.ENDMARKER)


def fingerprint(fn):
    """sha256 (16 hex) of fn's source tokens, comments and layout ignored."""
    src = textwrap.dedent(inspect.getsource(fn))
    toks = [t.string for t in tokenize.generate_tokens(io.StringIO(src).readline)
            if t.type not in _SKIP]
    return hashlib.sha256(" ".join(toks).encode()).hexdigest()[:16]


def _op(name, module):
    """The custom op while torch.compile traces, else the direct op."""
    verify = getattr(module, "_bitfold_verify", "once")
    if torch.compiler.is_compiling():
        fn = getattr(torch.ops.bitfold, name)
        return lambda *a: fn(*a, verify=verify)
    fn = getattr(_table, name)
    return lambda *a: fn(*a, verify=verify)


def _plain_ln(m):
    return isinstance(m, nn.LayerNorm) and m.weight is None and m.bias is None


# ---- GLM-Image ---------------------------------------------------------------

def _adaln_zero_forward(self, hidden_states, encoder_hidden_states, temb):
    emb = self.linear(temb)
    (shift_msa, c_shift_msa, scale_msa, c_scale_msa, gate_msa, c_gate_msa, shift_mlp,
     c_shift_mlp, scale_mlp, c_scale_mlp, gate_mlp, c_gate_mlp) = emb.chunk(12, dim=1)
    ln = _op("ln_modulate", self)
    hidden_states = ln(hidden_states, scale_msa, shift_msa, self.norm.eps)
    encoder_hidden_states = ln(encoder_hidden_states, c_scale_msa, c_shift_msa,
                               self.norm_context.eps)
    return (hidden_states, gate_msa, shift_mlp, scale_mlp, gate_mlp, encoder_hidden_states,
            c_gate_msa, c_shift_mlp, c_scale_mlp, c_gate_mlp)


def _block_forward(self, hidden_states, encoder_hidden_states, temb=None, image_rotary_emb=None,
                   attention_mask=None, attention_kwargs=None, kv_cache=None):
    (norm_hidden_states, gate_msa, shift_mlp, scale_mlp, gate_mlp, norm_encoder_hidden_states,
     c_gate_msa, c_shift_mlp, c_scale_mlp, c_gate_mlp) = self.norm1(
        hidden_states, encoder_hidden_states, temb)
    attn_hidden_states, attn_encoder_hidden_states = self.attn1(
        hidden_states=norm_hidden_states, encoder_hidden_states=norm_encoder_hidden_states,
        image_rotary_emb=image_rotary_emb, attention_mask=attention_mask, kv_cache=kv_cache,
        **(attention_kwargs or {}))
    gate, ln = _op("residual_gate", self), _op("ln_modulate", self)
    hidden_states = gate(hidden_states, attn_hidden_states, gate_msa.unsqueeze(1))
    encoder_hidden_states = gate(encoder_hidden_states, attn_encoder_hidden_states,
                                 c_gate_msa.unsqueeze(1))
    norm_hidden_states = ln(hidden_states, scale_mlp, shift_mlp, self.norm2.eps)
    norm_encoder_hidden_states = ln(encoder_hidden_states, c_scale_mlp, c_shift_mlp,
                                    self.norm2_context.eps)
    ff_output = self.ff(norm_hidden_states)
    ff_output_context = self.ff(norm_encoder_hidden_states)
    hidden_states = gate(hidden_states, ff_output, gate_mlp.unsqueeze(1))
    encoder_hidden_states = gate(encoder_hidden_states, ff_output_context,
                                 c_gate_mlp.unsqueeze(1))
    return hidden_states, encoder_hidden_states


def _adaln_continuous_forward(self, x, conditioning_embedding):
    emb = self.linear(conditioning_embedding.to(x.dtype))
    scale, shift = torch.chunk(emb, 2, dim=1)
    return _op("ln_modulate", self)(x, scale, shift, self.norm.eps)


def _glm_mask(attention_mask, query, batch_size, text_len, image_len):
    """GlmImageAttnProcessor's (B, text) mask -> its attention matrix."""
    text_attn_mask = attention_mask.float().to(query.device)
    mix = torch.ones((batch_size, text_len + image_len), device=query.device)
    mix[:, :text_len] = text_attn_mask
    mix = mix.unsqueeze(2)
    return ((mix @ mix.transpose(1, 2)) > 0).unsqueeze(1).to(query.dtype)


def _glm_kv(kv_cache, key, value):
    if kv_cache is not None:
        if kv_cache.mode == "write":
            kv_cache.store(key, value)
        elif kv_cache.mode == "read":
            key, value = kv_cache.get(key, value)
    return key, value


def _glm_attn_call(self, attn, hidden_states, encoder_hidden_states, attention_mask=None,
                   image_rotary_emb=None, kv_cache=None):
    """GlmImageAttnProcessor.__call__ with q and k normalised in one launch."""
    from diffusers.models.attention_dispatch import dispatch_attention_fn
    dtype = encoder_hidden_states.dtype
    batch_size, text_seq_length, _ = encoder_hidden_states.shape
    image_seq_length = hidden_states.shape[1]
    hidden_states = torch.cat([encoder_hidden_states, hidden_states], dim=1)
    query = attn.to_q(hidden_states).unflatten(2, (attn.heads, -1))
    key = attn.to_k(hidden_states).unflatten(2, (attn.heads, -1))
    value = attn.to_v(hidden_states).unflatten(2, (attn.heads, -1))
    query, key = _op("qk_layernorm", self._bitfold_owner)(query, key, attn.norm_q.eps)
    query, key = query.to(dtype=dtype), key.to(dtype=dtype)
    if image_rotary_emb is not None:
        from diffusers.models.embeddings import apply_rotary_emb
        for t in (query, key):
            t[:, text_seq_length:, :, :] = apply_rotary_emb(
                t[:, text_seq_length:, :, :], image_rotary_emb, sequence_dim=1,
                use_real_unbind_dim=-2)
    key, value = _glm_kv(kv_cache, key, value)
    if attention_mask is not None:
        assert attention_mask.dim() == 2, \
            "the shape of text_attn_mask should be (batch_size, text_seq_length)"
        attention_mask = _glm_mask(attention_mask, query, batch_size, text_seq_length,
                                   image_seq_length)
    hidden_states = dispatch_attention_fn(
        query, key, value, attn_mask=attention_mask, dropout_p=0.0, is_causal=False,
        backend=self._attention_backend, parallel_config=self._parallel_config)
    hidden_states = hidden_states.flatten(2, 3).to(query.dtype)
    hidden_states = attn.to_out[1](attn.to_out[0](hidden_states))
    encoder_hidden_states, hidden_states = hidden_states.split(
        [text_seq_length, hidden_states.size(1) - text_seq_length], dim=1)
    return hidden_states, encoder_hidden_states


_PROCESSOR_CLASSES = {}


def _bitfold_processor(original, owner):
    """An instance of a subclass of original's class whose __call__ is
    _glm_attn_call (attention backend and parallel config carried over).
    One subclass per class, made once: a new class at every patch() would
    pile up and start each patched model's forward cold."""
    cls = type(original)
    sub = _PROCESSOR_CLASSES.get(cls)
    if sub is None:
        sub = type("Bitfold" + cls.__name__, (cls,), {"__call__": _glm_attn_call})
        _PROCESSOR_CLASSES[cls] = sub
    proc = sub.__new__(sub)
    proc.__dict__.update(original.__dict__)
    proc._bitfold_owner = owner
    return proc


# ---- Wan VAE -------------------------------------------------------------------

def _wan_conv_input(conv, x, cache_x):
    """WanCausalConv3d's causal padding (with its frame cache)."""
    padding = list(conv._padding)
    if cache_x is not None and conv._padding[4] > 0:
        cache_x = cache_x.to(x.device)
        x = torch.cat([cache_x, x], dim=2)
        padding[4] -= cache_x.shape[2]
    return F.pad(x, padding)


def _wan_conv_bias(conv, x, cache_x=None, residual=None):
    """conv(x, cache_x) [+ residual] with the bias (and residual) added by
    conv_bias where aten itself adds the bias after the bias-free cuDNN call
    (Convolution.cpp, ConvBackend::Cudnn: output.add_(bias.view(1, C, 1,
    1, 1))). Other backends (CPU, grouped, cuDNN off) fuse the bias into the
    convolution: there the original forward runs."""
    x = _wan_conv_input(conv, x, cache_x)
    if conv.bias is None or conv.padding_mode != "zeros" or not x.is_cuda \
            or conv.groups != 1 or not torch.backends.cudnn.enabled:
        y = nn.Conv3d.forward(conv, x)
        return y if residual is None else y + residual
    y = F.conv3d(x, conv.weight, None, conv.stride, conv.padding, conv.dilation, conv.groups)
    if not torch.compiler.is_compiling() and _table.CONV_BIAS.remembered((y, conv.bias, residual)):
        # A layout the kernel refused: aten's own epilogue, in place on the
        # fresh output (conv_bias's eager chain would copy it first).
        y = y.add_(conv.bias.to(y.dtype).view(1, -1, *([1] * (y.dim() - 2))))
        return y if residual is None else y + residual
    return _op("conv_bias", conv)(y, conv.bias, residual)


def _wan_conv_forward(self, x, cache_x=None):
    return _wan_conv_bias(self, x, cache_x)


def _wan_call(conv, x, cache_x, residual):
    """conv(x, cache_x) [+ residual]; the residual goes into conv_bias unless
    the conv module has hooks (offloading...), which need its __call__."""
    if residual is None:
        return conv(x) if cache_x is None else conv(x, cache_x)
    if conv._forward_hooks or conv._forward_pre_hooks:
        return (conv(x) if cache_x is None else conv(x, cache_x)) + residual
    return _wan_conv_bias(conv, x, cache_x, residual)


def _wan_cached_conv(conv, x, feat_cache, feat_idx, residual=None):
    """WanResidualBlock's conv step with its frame cache bookkeeping."""
    if feat_cache is None:
        return _wan_call(conv, x, None, residual)
    idx = feat_idx[0]
    cache_x = x[:, :, -CACHE_T:, :, :].clone()
    if cache_x.shape[2] < 2 and feat_cache[idx] is not None:
        cache_x = torch.cat([feat_cache[idx][:, :, -1, :, :].unsqueeze(2).to(cache_x.device),
                             cache_x], dim=2)
    x = _wan_call(conv, x, feat_cache[idx], residual)
    feat_cache[idx] = cache_x
    feat_idx[0] += 1
    return x


def _wan_norm_fits(norm, act):
    """Whether act(norm(x)) is diffusers' WanRMS_norm + SiLU, as the kernel
    computes it (channel-first, bias a tensor or the float 0., no hooks)."""
    return (type(norm).__name__ == "WanRMS_norm" and norm.channel_first
            and type(act) is nn.SiLU and not norm._forward_hooks
            and not norm._forward_pre_hooks
            and (isinstance(norm.bias, torch.Tensor) or norm.bias == 0.0))


def _wan_norm_silu(owner, norm, x):
    """owner.nonlinearity(norm(x)), as one wan_rmsnorm_silu (form "f32")
    where patch() checked WanRMS_norm's code and the modules still fit."""
    act = owner.nonlinearity
    if not owner._bitfold_wan_norm or not _wan_norm_fits(norm, act):
        return act(norm(x))
    bias = norm.bias if isinstance(norm.bias, torch.Tensor) else None
    return _op("wan_rmsnorm_silu", owner)(x, norm.gamma, bias, None, "f32")


def _wan_residual_forward(self, x, feat_cache=None, feat_idx=[0]):  # noqa: B006 (diffusers' default)
    """WanResidualBlock.forward with each norm + SiLU in one
    wan_rmsnorm_silu, and conv2's bias and `+ h` in one conv_bias."""
    h = self.conv_shortcut(x)
    x = _wan_norm_silu(self, self.norm1, x)
    x = _wan_cached_conv(self.conv1, x, feat_cache, feat_idx)
    x = self.dropout(_wan_norm_silu(self, self.norm2, x))
    return _wan_cached_conv(self.conv2, x, feat_cache, feat_idx, residual=h)


# ---- diffusers RMSNorm ------------------------------------------------------------

def _rmsnorm_forward(self, hidden_states):
    """diffusers RMSNorm.forward through hf_rmsnorm where both round the
    same: a weight of x's dtype, no bias, one normalized dim, not on NPU
    (whose branch calls npu_rms_norm)."""
    w = self.weight
    if w is None or self.bias is not None or len(self.dim) != 1 \
            or w.dtype != hidden_states.dtype or hidden_states.device.type == "npu":
        return type(self).forward(self, hidden_states)
    out = _op("hf_rmsnorm", self)(hidden_states, w, self.eps)
    return out[0] if isinstance(out, list) else out  # the custom op returns [y]


# ---- patch / unpatch -------------------------------------------------------------

def _site(module):
    """(fingerprint key, kind) for a patchable module, else None."""
    name = type(module).__name__
    if not type(module).__module__.startswith("diffusers."):
        return None
    if name in ("GlmImageAdaLayerNormZero",) and _plain_ln(module.norm) \
            and _plain_ln(module.norm_context):
        return "GlmImageAdaLayerNormZero.forward", "forward"
    if name == "GlmImageTransformerBlock" and _plain_ln(module.norm2) \
            and _plain_ln(module.norm2_context):
        return "GlmImageTransformerBlock.forward", "forward"
    if name == "GlmImageAdaLayerNormContinuous" and _plain_ln(module.norm):
        return "GlmImageAdaLayerNormContinuous.forward", "forward"
    if name == "WanCausalConv3d":
        return "WanCausalConv3d.forward", "forward"
    if name == "WanResidualBlock" and type(module.conv2).__name__ == "WanCausalConv3d":
        return "WanResidualBlock.forward", "forward"
    if name == "RMSNorm" and type(module).__module__ == "diffusers.models.normalization":
        return "RMSNorm.forward", "forward"
    proc = getattr(module, "processor", None)
    if proc is not None and type(proc).__name__ == "GlmImageAttnProcessor" \
            and _plain_ln(getattr(module, "norm_q", None)) \
            and _plain_ln(getattr(module, "norm_k", None)) \
            and module.norm_q.eps == module.norm_k.eps:
        return "GlmImageAttnProcessor.__call__", "processor"
    return None


_FORWARDS = {
    "GlmImageAdaLayerNormZero.forward": _adaln_zero_forward,
    "GlmImageTransformerBlock.forward": _block_forward,
    "GlmImageAdaLayerNormContinuous.forward": _adaln_continuous_forward,
    "WanCausalConv3d.forward": _wan_conv_forward,
    "WanResidualBlock.forward": _wan_residual_forward,
    "RMSNorm.forward": _rmsnorm_forward,
}


def _original(module, key):
    if key == "GlmImageAttnProcessor.__call__":
        return type(module.processor).__call__
    return type(module).forward


def _wan_norms_known(block, force, skipped):
    """Whether block's WanRMS_norm code is the one checked (else its norm +
    SiLU stay eager, and the key is reported as skipped)."""
    norm = block.norm1
    if type(norm).__name__ != "WanRMS_norm":
        return False
    if force or fingerprint(type(norm).forward) == KNOWN["WanRMS_norm.forward"]:
        return True
    skipped.add("WanRMS_norm.forward")
    return False


def patch(model, verify="once", force=False):
    """Swaps model's known diffusers sites for bitfold ops; returns the
    qualified names patched. Idempotent; unpatch(model) restores."""
    patched, skipped = [], set()
    for qual, m in model.named_modules():
        site = _site(m)
        if site is None or getattr(m, "_bitfold_patched", False):
            continue
        key, kind = site
        if not force and fingerprint(_original(m, key)) != KNOWN[key]:
            skipped.add(key)
            continue
        m._bitfold_verify = verify
        if key == "WanResidualBlock.forward":
            m._bitfold_wan_norm = _wan_norms_known(m, force, skipped)
        if kind == "forward":
            m.forward = types.MethodType(_FORWARDS[key], m)
        else:
            m._bitfold_processor = m.processor
            m.processor = _bitfold_processor(m.processor, m)
        m._bitfold_patched = True
        patched.append(qual or type(m).__name__)
    for key in sorted(skipped):
        warnings.warn(f"bitfold.torch.patch: {key} differs from the diffusers 0.42.1 code "
                      "bitfold was checked against; left unpatched (force=True patches it, "
                      "verify='once' still guards)", RuntimeWarning, stacklevel=2)
    return patched


def unpatch(model):
    """Restores every site patch() changed; returns how many."""
    n = 0
    for _, m in model.named_modules():
        if not getattr(m, "_bitfold_patched", False):
            continue
        if "forward" in m.__dict__:
            del m.forward
        if hasattr(m, "_bitfold_processor"):
            m.processor = m._bitfold_processor
            del m._bitfold_processor
        del m._bitfold_patched
        m.__dict__.pop("_bitfold_wan_norm", None)
        n += 1
    return n
