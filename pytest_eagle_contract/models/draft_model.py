"""An EAGLE-3 draft checkpoint, loaded and run on CPU without a transformers model class.

The forward, as SGLang's and vLLM's ``llama_eagle3`` run it (and SpecForge trains it)::

    g   = fc(cat(aux_1 .. aux_n))                        # [T, n*H_target] -> [T, H]
    res = g            (vLLM norm_before_residual: hidden_norm(g))
    x   = cat(input_layernorm(embed(token)), hidden_norm(g))          # [T, 2H]
    h   = o_proj(attention(q/k/v_proj(x))) + res
    pre = mlp(post_attention_layernorm(h)) + h
    logits = lm_head(norm(pre))                          # [T, draft_vocab_size]
    target id = argmax + d2t[argmax]

Later chain steps take ``pre`` (the pre-norm output) in place of ``g``. Two layouts of the
weights are read: SpecForge/SGLang (``midlayer.*``) and speculators/vLLM (``layers.0.*``),
with or without a ``model.`` prefix.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..engines.draft_config import read_draft_json
from ..errors import UsageError
from .draft import weight_files
from .draft_shapes import config_problems, refuse, run_problems, weight_problems

if TYPE_CHECKING:
    import torch

LAYER = "midlayer."
_PROJ = ("q_proj", "k_proj", "v_proj", "o_proj")
_MLP = ("gate_proj", "up_proj", "down_proj")
_NORMS = ("input_layernorm", "hidden_norm", "post_attention_layernorm")


def draft_tensors(directory: Path) -> dict[str, torch.Tensor]:
    """Every tensor of the draft's safetensors files, under normalised names
    (``model.`` dropped, ``layers.0.`` read as ``midlayer.``)."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    files = weight_files(directory)
    if not files:
        raise UsageError(f"draft {directory}: no safetensors files")
    out: dict[str, torch.Tensor] = {}
    for file in files:
        try:
            tensors = load_file(str(file))
        except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
            raise UsageError(f"draft {directory}: cannot read {file.name}: {exc}") from None
        for key, value in tensors.items():
            name = key.removeprefix("model.")
            out[LAYER + name[len("layers.0.") :] if name.startswith("layers.0.") else name] = value
    return out


def draft_json(directory: Path) -> dict[str, Any]:
    """config.json, with the speculators ``transformer_layer_config`` fields brought up."""
    data = read_draft_json(directory / "config.json")
    inner = data.get("transformer_layer_config")
    return {**inner, **data} if isinstance(inner, dict) else data


DEFAULT_MAX_POSITIONS = 2048  # LlamaConfig's, which engines build a draft's config with


@dataclass
class EagleDraft:
    """A loaded draft: its config and tensors, computed in ``dtype``. ``position_limit``:
    RoPE positions at or past it read the limit's last row, as an engine that sizes the
    draft's rotary table from its config and clamps past it (the probe's long bucket)."""

    path: Path
    config: dict[str, Any]
    weights: dict[str, torch.Tensor]
    position_limit: int | None = None

    @classmethod
    def load(cls, directory: str | Path, dtype: torch.dtype | None = None) -> EagleDraft:
        import torch

        directory = Path(directory)
        config = draft_json(directory)
        if config.get("num_hidden_layers", 1) != 1:
            raise UsageError(f"draft {directory}: only one-layer drafts are supported")
        stored = draft_tensors(directory)
        missing = [n for n in _required() if n not in stored]
        if missing:
            raise UsageError(f"draft {directory}: missing tensors {missing}")
        refuse(directory, config_problems(config) + weight_problems(config, stored))
        weights = {
            k: v.to(dtype or torch.float32) if v.is_floating_point() else v
            for k, v in stored.items()
        }
        return cls(directory, config, weights)

    def run_problems(
        self, embedding: torch.Tensor, lm_head: torch.Tensor | None, aux_width: int
    ) -> list[str]:
        """What does not fit between this draft and the target beside it (for aux states
        ``aux_width`` wide); nothing runs until it is empty."""
        fc = self.weights["fc.weight"]
        return run_problems(
            int(fc.shape[0]), int(fc.shape[1]), self.weights, embedding, lm_head, aux_width
        )

    def to(self, device: torch.device | str) -> EagleDraft:
        """The same draft with its tensors on ``device``."""
        return EagleDraft(
            self.path,
            self.config,
            {k: v.to(device) for k, v in self.weights.items()},
            self.position_limit,
        )

    @property
    def hidden(self) -> int:
        return int(self.weights["fc.weight"].shape[0])

    @property
    def heads(self) -> int:
        return int(self.config["num_attention_heads"])

    @property
    def kv_heads(self) -> int:
        return int(self.config.get("num_key_value_heads") or self.heads)

    @property
    def head_dim(self) -> int:
        return int(self.config.get("head_dim") or self.hidden // self.heads)

    @property
    def eps(self) -> float:
        return float(self.config.get("rms_norm_eps", 1e-6))

    @property
    def max_positions(self) -> int:
        """``max_position_embeddings`` of its config (a whole number above 0), else
        LlamaConfig's default, which an engine's draft config then holds."""
        value = self.config.get("max_position_embeddings")
        return value if type(value) is int and value > 0 else DEFAULT_MAX_POSITIONS

    @property
    def norm_before_residual(self) -> bool:
        return bool(self.config.get("norm_before_residual", False))

    def target_ids(self, draft_ids: torch.Tensor) -> torch.Tensor:
        """Draft vocabulary ids as target ids (``d2t`` holds the offsets)."""
        d2t = self.weights.get("d2t")
        return draft_ids if d2t is None else draft_ids + d2t.long()[draft_ids]

    def chain(
        self,
        aux: torch.Tensor,
        input_ids: torch.Tensor,
        embedding: torch.Tensor,
        steps: int,
        lm_head: torch.Tensor | None = None,
        first: int | None = None,
    ) -> torch.Tensor:
        """Greedy chain drafts from every position at once: ``out[s, i]`` is step s+1's
        target token from start i (aux states of tokens 0..i, token i+1 embedded), a
        guess at ``input_ids[i + 2 + s]``. Step 1 attends to starts 0..i; step s also
        to the chain's own steps 2..s (the engine's KV cache during draft decode).

        With ``first``, ``input_ids`` is the target's greedy sequence and only the chains
        :func:`accepted` counts are drafted: from starts ``first`` on, each only while its
        guesses are right (the others read -1; the accepted counts are the same).
        """
        import torch

        dtype = self.weights["fc.weight"].dtype
        head = self.weights.get("lm_head.weight", lm_head)
        if head is None:
            raise UsageError(f"draft {self.path}: no lm_head.weight and no target lm_head")
        head = head.to(dtype)
        n = input_ids.numel() - 1
        rows = torch.arange(n, device=input_ids.device)
        hidden = aux[:n].to(dtype) @ self.weights["fc.weight"].T
        tokens = input_ids[1:]
        cache: list[tuple[torch.Tensor, torch.Tensor]] = []
        out = torch.full((steps, n), -1, dtype=torch.long, device=input_ids.device)
        with torch.no_grad():
            for s in range(steps):
                hidden, k, v = self._layer(embedding[tokens].to(dtype), hidden, rows, s, cache)
                cache.append(_full(k, v, rows, n) if cache else (k, v))
                if s == 0 and first is not None:
                    lo = max(first, 0)
                    keep = rows[lo : max(n - steps, lo)]  # the starts accepted() counts
                    hidden, rows = hidden[keep], keep
                tokens = self.target_ids((self._norm("norm", hidden) @ head.T).argmax(-1))
                out[s, rows] = tokens
                if first is not None:
                    right = tokens == input_ids[rows + 2 + s]
                    hidden, rows, tokens = hidden[right], rows[right], tokens[right]
                    if not rows.numel():
                        break
        return out

    def unrolled_logits(
        self, aux: torch.Tensor, input_ids: torch.Tensor, embedding: torch.Tensor, steps: int = 1
    ) -> list[torch.Tensor]:
        """What a trainer's training-time test computes, with gradients: per step s, the
        draft-vocabulary logits ``[T-1-s, V_d]`` from every start i that has a true token
        ``input_ids[i + 1 + s]`` to embed (later steps take the step before's own output
        as hidden), a guess at ``input_ids[i + 2 + s]``."""
        import torch

        n = input_ids.numel() - 1
        rows = torch.arange(n, device=input_ids.device)
        hidden = aux[:n] @ self.weights["fc.weight"].T
        cache: list[tuple[torch.Tensor, torch.Tensor]] = []
        out = []
        for s in range(min(steps, n)):
            rows = rows[: n - s]
            emb = embedding[input_ids[rows + 1 + s]]
            hidden, k, v = self._layer(emb, hidden[: n - s], rows, s, cache)
            cache.append(_full(k, v, rows, n) if cache else (k, v))
            out.append(self._norm("norm", hidden) @ self.weights["lm_head.weight"].T)
        return out

    def _layer(
        self,
        emb: torch.Tensor,
        hidden: torch.Tensor,
        rows: torch.Tensor,
        step: int,
        cache: list[tuple[torch.Tensor, torch.Tensor]],
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The decoder layer for the chains from starts ``rows`` at ``step`` (0: the
        prefill over every start; later: one token each, with ``cache`` holding the
        prefill's keys and the chain's own, indexed by start)."""
        import torch

        w = self.weights
        normed = self._norm(LAYER + "hidden_norm", hidden)
        residual = normed if self.norm_before_residual else hidden
        x = torch.cat([self._norm(LAYER + "input_layernorm", emb), normed], dim=-1)
        m, hd = x.shape[0], self.head_dim
        q = (x @ w[LAYER + "self_attn.q_proj.weight"].T).view(m, self.heads, hd)
        k = (x @ w[LAYER + "self_attn.k_proj.weight"].T).view(m, self.kv_heads, hd)
        v = (x @ w[LAYER + "self_attn.v_proj.weight"].T).view(m, self.kv_heads, hd)
        cos, sin = self._rope(rows + step, q.dtype)
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        rep = self.heads // self.kv_heads
        k, v = k.repeat_interleave(rep, 1), v.repeat_interleave(rep, 1)
        scale = 1.0 / math.sqrt(hd)
        if not cache:  # the prefill: causal over every start
            causal = torch.ones(m, m, dtype=torch.bool, device=x.device).tril()
            scores = torch.einsum("qhd,khd->hqk", q, k) * scale
            attn = scores.masked_fill(~causal, float("-inf")).softmax(-1)
            mixed = torch.einsum("hqk,khd->qhd", attn, v)
        else:  # a decode step: the prefix up to the start, then the chain's own keys
            k0, v0 = cache[0]
            n = k0.shape[0]
            causal = torch.arange(n, device=x.device)[None, :] <= rows[:, None]
            own = [(kj[rows], vj[rows]) for kj, vj in cache[1:]] + [(k, v)]
            prefix = torch.einsum("qhd,khd->hqk", q, k0) * scale
            prefix = prefix.masked_fill(~causal, float("-inf"))
            diag = torch.stack([(q * kj).sum(-1).T * scale for kj, _ in own], -1)
            attn = torch.cat([prefix, diag], -1).softmax(-1)
            mixed = torch.einsum("hqk,khd->qhd", attn[..., :n], v0)
            for j, (_, vj) in enumerate(own):
                mixed = mixed + attn[..., n + j].T.unsqueeze(-1) * vj
        h = mixed.reshape(m, -1) @ w[LAYER + "self_attn.o_proj.weight"].T + residual
        post = self._norm(LAYER + "post_attention_layernorm", h)
        gate = torch.nn.functional.silu(post @ w[LAYER + "mlp.gate_proj.weight"].T)
        up = post @ w[LAYER + "mlp.up_proj.weight"].T
        out = (gate * up) @ w[LAYER + "mlp.down_proj.weight"].T + h
        return out, k, v

    def _norm(self, name: str, x: torch.Tensor) -> torch.Tensor:
        import torch

        var = x.float().pow(2).mean(-1, keepdim=True)
        normed = (x.float() * torch.rsqrt(var + self.eps)).to(x.dtype)
        return normed * self.weights[name + ".weight"]

    def _rope(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
        import torch

        inv = _inv_freq(self.config, self.head_dim).to(positions.device)
        if self.position_limit is not None:
            positions = positions.clamp(max=self.position_limit - 1)
        angles = positions.float()[:, None] * inv[None, :]
        emb = torch.cat([angles, angles], -1)[:, None, :]
        return emb.cos().to(dtype), emb.sin().to(dtype)


def accepted(drafts: torch.Tensor, input_ids: torch.Tensor, first: int) -> torch.Tensor:
    """Per start ``i >= first`` with every step checkable: how many leading draft tokens
    equal the target's own continuation (``input_ids`` holds the target's greedy tokens)."""
    import torch

    steps, first = drafts.shape[0], max(first, 0)
    last = input_ids.numel() - 2 - steps  # the last start whose K guesses all exist
    if last < first:
        return torch.zeros(0, dtype=torch.long)
    starts = torch.arange(first, last + 1, device=input_ids.device)
    truth = torch.stack([input_ids[starts + 2 + s] for s in range(steps)])
    right = (drafts[:, starts] == truth).long()
    return right.cumprod(0).sum(0)


def _full(
    k: torch.Tensor, v: torch.Tensor, rows: torch.Tensor, n: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """A decode step's keys and values for ``rows``, in buffers indexed by start."""
    import torch

    full_k = torch.zeros((n, *k.shape[1:]), dtype=k.dtype, device=k.device)
    full_v = torch.zeros_like(full_k)
    full_k[rows], full_v[rows] = k, v
    return full_k, full_v


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    import torch

    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], -1)
    return x * cos + rotated * sin


def _inv_freq(config: dict[str, Any], head_dim: int) -> torch.Tensor:
    """Llama RoPE frequencies, with ``llama3`` rope scaling when the config asks for it."""
    import torch

    params = config.get("rope_parameters") or {}
    theta = float(config.get("rope_theta") or params.get("rope_theta") or 10000.0)
    inv = 1.0 / theta ** (torch.arange(0, head_dim, 2).float() / head_dim)
    scaling = config.get("rope_scaling") or params
    if (scaling.get("rope_type") or scaling.get("type")) != "llama3":
        return inv
    factor, low, high = (
        float(scaling[k]) for k in ("factor", "low_freq_factor", "high_freq_factor")
    )
    original = float(scaling["original_max_position_embeddings"])
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > original / low, inv / factor, inv)
    smooth = (original / wavelen - low) / (high - low)
    medium = (wavelen >= original / high) & (wavelen <= original / low)
    return torch.where(medium, (1 - smooth) * inv / factor + smooth * inv, scaled)


def _required() -> list[str]:
    return (
        ["fc.weight", "norm.weight"]
        + [f"{LAYER}self_attn.{p}.weight" for p in _PROJ]
        + [f"{LAYER}mlp.{p}.weight" for p in _MLP]
        + [f"{LAYER}{p}.weight" for p in _NORMS]
    )
