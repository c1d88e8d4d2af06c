"""Multi-scale deformable attention (Zhu et al. 2021, Deformable DETR, section 4.1, Eq. 3).

    MSDeformAttn(z_q, p_q, {x^l}) = sum_m W_m [ sum_l sum_k A_mlqk * W'_m x^l(phi_l(p_q) + delta p_mlqk) ]

Each query attends to K sampled points per head m and feature level l around its reference point
p_q, instead of to every key: the offsets delta p and the weights A (softmax over the L*K points)
are linear functions of the query. Sampling is bilinear, written with `grid_sample` (pure
PyTorch, no compiled kernel). A 4-d reference (a box cx, cy, w, h) scales the offsets by half
the box size (the paper's iterative refinement variant, appendix A.4).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def value_maps(value: Tensor, shapes: Sequence[tuple[int, int]]) -> list[Tensor]:
    """value: (batch, keys, heads, head_dim), the levels' (height, width) maps flattened one after the other
    -> per level (batch * heads, head_dim, height, width), the layout `grid_sample` reads: each level's keys
    sliced first, then laid out in one copy."""
    batch, _, heads, head_dim = value.shape
    return [level.permute(0, 2, 3, 1).contiguous().view(batch * heads, head_dim, *shape)
            for level, shape in zip(value.split([h * w for h, w in shapes], dim=1), shapes)]


class ValueProjection(nn.Linear):
    """W'_m x^l of Eq. 3 for all heads, written per level straight into the layout `grid_sample` reads.

    A Linear's output is key-major, (batch, keys, d_model), and the sampling reads (batch * heads,
    head_dim, h, w): laying it out took a masked copy and a transposing copy of every projected key.
    Here each level's product is taken the other way round, W' X^T, which the matrix multiply reads
    transposed in place, so its output is already channel-major and each head's block a view of it.
    Its weight is read as a tensor, so dynamic int8 quantization leaves it float32 (nn.quantize)."""

    def maps(self, keys: Tensor, shapes: Sequence[tuple[int, int]], padding: Tensor | None,
             heads: int) -> list[Tensor]:
        """keys: (batch, keys, d_model), the levels of SHAPES flattened one after the other; padding: (batch,
        keys), True on padding, or None -> per level (batch * heads, head_dim, h, w), zero on padding."""
        batch, sizes = keys.shape[0], [h * w for h, w in shapes]
        pads = padding.split(sizes, 1) if padding is not None else [None] * len(shapes)
        maps = []
        for level, pad, shape in zip(keys.split(sizes, 1), pads, shapes):
            value = torch.baddbmm(self.bias[:, None], self.weight.expand(batch, -1, -1), level.transpose(1, 2))
            if pad is not None:  # value: (batch, d_model, h * w)
                value.masked_fill_(pad[:, None, :], 0.0)
            maps.append(value.view(batch * heads, -1, *shape))
        return maps


def deformable_sampling(value: Tensor | Sequence[Tensor], shapes: Sequence[tuple[int, int]], locations: Tensor,
                        weights: Tensor) -> Tensor:
    """The inner sums of Eq. 3: bilinearly sampled values, weighted by A.

    value: (batch, keys, heads, head_dim), the levels' (height, width) maps flattened one after the
    other, or already per level (batch * heads, head_dim, height, width) (`value_maps`); locations:
    (batch, queries, heads, levels, points, 2) as (x, y) in [0, 1] of each map; weights: (batch,
    queries, heads, levels, points). Returns (batch, queries, heads * head_dim).
    Points outside a map read zeros.
    """
    maps = value_maps(value, shapes) if isinstance(value, Tensor) else value
    batch, queries, heads, levels, points = locations.shape[:5]
    head_dim = maps[0].shape[1]
    # float32 arithmetic under mixed precision, as in the reference kernels (CPU autocast runs grid_sample in
    # float32 anyway; in bfloat16 it is 2-3x slower); float64 stays float64
    dtype, work = maps[0].dtype, torch.promote_types(maps[0].dtype, torch.float32)
    # laid out level first and copied contiguous: grid_sample is 2-3x slower on a strided grid or map (and
    # `.to` does not copy when the dtype already matches); points before queries, so that each point's samples
    # are whole rows of queries; each level's samples are weighted and added before the next level's are read
    grids = (2 * locations - 1).to(work).permute(3, 0, 2, 4, 1, 5).flatten(1, 2).contiguous()
    # grids: (levels, batch * heads, points, queries, 2), grid_sample's [-1, 1] coordinates
    weights = weights.to(work).permute(3, 0, 2, 4, 1).reshape(levels, batch * heads, 1, points, queries)
    weights = weights.contiguous()
    output = None
    for value_level, grid, weight in zip(maps, grids, weights):  # value_level: (batch * heads, head_dim, h, w)
        sampled = F.grid_sample(value_level.to(work), grid, mode="bilinear", padding_mode="zeros",
                                align_corners=False)  # (batch * heads, head_dim, points, queries)
        # each point's weighted samples added into the output in place: PyTorch's CPU product and sum over the
        # points write and read a second such tensor, and the sum over a middle dimension copies it again
        for point in range(points):
            if output is None:
                output = sampled[:, :, point] * weight[:, :, point]  # (batch * heads, head_dim, queries)
            else:
                output.addcmul_(sampled[:, :, point], weight[:, :, point])
    assert output is not None  # there is at least one level
    return output.view(batch, heads * head_dim, queries).transpose(1, 2).to(dtype)  # (batch, queries, heads * head_dim)


def bilinear_corners(locations: Tensor, shapes: Sequence[tuple[int, int]]) -> tuple[Tensor, Tensor]:
    """The four keys around each sampling location and their bilinear weights, as `grid_sample` reads them
    (align_corners=False: pixel centres at half-integers; zeros outside the map).

    locations: (..., levels, points, 2) as (x, y) in [0, 1] of each level's map -> indices into the levels'
    keys flattened one after the other, and weights, each (..., levels, points, 4); a neighbour outside its
    map has weight 0 (and an index inside the map)."""
    levels, extra = locations.shape[-3], locations.dim() - 3
    # (2 [x, y], levels, ..., points): each level's sizes broadcast over whole blocks, which vectorizes
    pixel = locations.movedim(-1, 0).movedim(-2, 1).contiguous()
    size = torch.tensor([[w for _, w in shapes], [h for h, _ in shapes]], dtype=pixel.dtype,
                        device=pixel.device).view(2, levels, *[1] * (extra + 1))  # (2, levels, 1, ..., 1)
    pixel = pixel * size - 0.5
    low = pixel.floor()
    fraction = pixel - low
    weights = [(1 - fraction) * ((low >= 0) & (low <= size - 1)), fraction * ((low >= -1) & (low <= size - 2))]
    corners = [low.clamp(min=0).minimum(size - 1).long(), (low + 1).clamp(min=0).minimum(size - 1).long()]
    start = torch.tensor([0, *[h * w for h, w in shapes]], device=pixel.device).cumsum(0)[:-1]
    start = start.view(levels, *[1] * (extra + 1))
    width = size[0].long()
    rows = [start + corner[1] * width for corner in corners]  # the first key of each neighbour's row
    index = torch.stack([rows[y] + corners[x][0] for y in (0, 1) for x in (0, 1)], -1)
    bilinear = torch.stack([weights[y][1] * weights[x][0] for y in (0, 1) for x in (0, 1)], -1)
    return index.movedim(0, -3).contiguous(), bilinear.movedim(0, -3).contiguous()  # (..., levels, points, 4)


def sampled_then_projected(keys: Tensor, padding: Tensor | None, shapes: Sequence[tuple[int, int]],
                           locations: Tensor, weights: Tensor, projection: nn.Linear) -> Tensor:
    """Eq. 3's inner sums with W'_m taken out of them: sum_lk A_mlqk x^l(p) sampled from the keys themselves,
    then one W'_m per query and head.

    Sampling is bilinear and the sum weighted, both linear, so W'_m [sum A x(p)] = sum A (W'_m x)(p) exactly;
    the bias enters with the weights the in-map, unpadded neighbours carry (the values it replaces were zero
    elsewhere). Projecting all keys costs keys * d_model^2, this queries * heads * levels * points * 4 * d_model:
    far less where few queries read many keys (the decoder's 100 queries, 13,125 keys at 800 px).
    keys: (batch, keys, d_model); padding: (batch, keys) True on padding, or None; locations, weights as
    `deformable_sampling`'s. Returns (batch, queries, d_model), before the output projection."""
    batch, queries, heads = locations.shape[:3]
    count, d_model = keys.shape[1:]
    work = torch.promote_types(keys.dtype, torch.float32)  # as `deformable_sampling`: float32 under autocast
    index, bilinear = bilinear_corners(locations.to(work), shapes)  # (batch, queries, heads, levels, points, 4)
    index = index + (torch.arange(batch, device=keys.device) * count).view(batch, 1, 1, 1, 1, 1)
    bilinear = bilinear * weights.to(work)[..., None]
    if padding is not None:
        bilinear = bilinear.masked_fill(padding.flatten()[index], 0.0)
    bags, bilinear = index.view(batch * queries * heads, -1), bilinear.view(batch * queries * heads, -1)
    summed = F.embedding_bag(bags, keys.reshape(batch * count, d_model).to(work), per_sample_weights=bilinear,
                             mode="sum")  # (batch * queries * heads, d_model): sum_lk A x(p) per query and head
    weight = projection.weight.to(work).view(heads, -1, d_model)  # (heads, head_dim, d_model)
    out = torch.einsum("nhc,hdc->nhd", summed.view(-1, heads, d_model), weight)
    out = out + bilinear.sum(-1).view(-1, heads, 1) * projection.bias.to(work).view(heads, -1)
    return out.reshape(batch, queries, d_model).to(keys.dtype)  # (batch, queries, heads * head_dim)


# sampling first pays at inference once projecting all keys (keys * d_model^2) costs this many times the gathered
# neighbours (queries * heads * levels * points * 4 * d_model): break-even measured at 7-8x on this CPU
GATHER_PAYS = 10.0


class MultiScaleDeformableAttention(nn.Module):
    """Eq. 3 with M heads, L levels and K points per head and level; batch first throughout."""

    def __init__(self, d_model: int, num_heads: int, num_levels: int, num_points: int) -> None:
        super().__init__()
        if d_model % num_heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by num_heads ({num_heads})")
        self.num_heads, self.num_levels, self.num_points = num_heads, num_levels, num_points
        self.sampling_offsets = nn.Linear(d_model, num_heads * num_levels * num_points * 2)
        self.attention_weights = nn.Linear(d_model, num_heads * num_levels * num_points)
        self.value_proj = ValueProjection(d_model, d_model)
        self.output_proj = nn.Linear(d_model, d_model)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """The paper's start: offsets point to a ring of K points per head direction, weights uniform."""
        nn.init.zeros_(self.sampling_offsets.weight)
        angles = torch.arange(self.num_heads, dtype=torch.float32) * (2 * math.pi / self.num_heads)
        directions = torch.stack([angles.cos(), angles.sin()], -1)  # (heads, 2)
        directions = directions / directions.abs().max(-1, keepdim=True).values
        ring = directions[:, None, None, :] * torch.arange(1, self.num_points + 1)[None, None, :, None]
        with torch.no_grad():
            self.sampling_offsets.bias.copy_(ring.expand(-1, self.num_levels, -1, -1).flatten())
        nn.init.zeros_(self.attention_weights.weight)
        nn.init.zeros_(self.attention_weights.bias)
        for linear in (self.value_proj, self.output_proj):
            nn.init.xavier_uniform_(linear.weight)
            nn.init.zeros_(linear.bias)

    def forward(self, query: Tensor, reference: Tensor, value: Tensor, shapes: Sequence[tuple[int, int]],
                padding: Tensor | None = None) -> Tensor:
        """query: (batch, queries, d_model); reference: (batch, queries, levels, 2 or 4) in [0, 1] of each
        level's map; value: (batch, keys, d_model) with keys = sum of h * w over SHAPES; padding:
        (batch, keys), True where a key is padding. Returns (batch, queries, d_model)."""
        locations, weights = self.sampling(query, reference, shapes)
        if self.samples_pay(query, value):
            return self.output_proj(sampled_then_projected(value, padding, shapes, locations, weights,
                                                           self.value_proj))
        maps = self.value_proj.maps(value, shapes, padding, self.num_heads)
        return self.output_proj(deformable_sampling(maps, shapes, locations, weights))

    def samples_pay(self, query: Tensor, value: Tensor) -> bool:
        """Whether to sample the keys and project the samples (`sampled_then_projected`) rather than project
        every key: at inference on the CPU, in eager mode (exports and compiled graphs keep one form; in training
        its backward, a scatter, gained little or lost where the presets train), when the keys' projection costs
        GATHER_PAYS times the gathered neighbours or more (BENCHMARKS.md, "Sampling the keys, projecting the
        samples")."""
        if value.device.type != "cpu" or torch.compiler.is_compiling() or torch.is_grad_enabled():
            return False
        gathered = query.shape[1] * self.num_heads * self.num_levels * self.num_points * 4
        return value.shape[1] * value.shape[2] >= GATHER_PAYS * gathered

    def sampling(self, query: Tensor, reference: Tensor, shapes: Sequence[tuple[int, int]]) -> tuple[Tensor, Tensor]:
        """Where each query reads and how much: the sampling locations phi_l(p_q) + delta p_mlqk
        (batch, queries, heads, levels, points, 2), as (x, y) in [0, 1] of each level's map, and the
        weights A_mlqk (batch, queries, heads, levels, points), summing to 1 over each head's L * K points.

        `forward` reads its points through this; the attention pictures ask it again for them
        (app/visualize/deformable_capture.py), so a model run without pictures computes nothing more."""
        batch, queries, _ = query.shape
        offsets = self.sampling_offsets(query).view(batch, queries, self.num_heads, self.num_levels,
                                                    self.num_points, 2)
        weights = short_softmax(self.attention_weights(query).view(batch, queries, self.num_heads, -1))
        weights = weights.view(batch, queries, self.num_heads, self.num_levels, self.num_points)
        return sampling_locations(reference, offsets, shapes), weights


def short_softmax(logits: Tensor) -> Tensor:
    """Softmax over the last dimension, a short one (the L * K points of a head), in float32.

    Written out because PyTorch's CPU softmax kernel is slow on many short rows (several times slower here,
    forward and backward: BENCHMARKS.md). The maximum is subtracted for range, detached as softmax ignores shifts.
    """
    logits = logits.float()
    exp = (logits - logits.detach().amax(-1, keepdim=True)).exp()
    return exp / exp.sum(-1, keepdim=True)


def sampling_locations(reference: Tensor, offsets: Tensor, shapes: Sequence[tuple[int, int]]) -> Tensor:
    """phi_l(p_q) + delta p: reference (batch, queries, levels, 2 or 4), offsets (batch, queries, heads,
    levels, points, 2) in pixels of each level (a point reference) or in units of half the box over
    K (a box reference) -> (batch, queries, heads, levels, points, 2)."""
    if reference.shape[-1] == 2:
        size = torch.tensor([[w, h] for h, w in shapes], dtype=offsets.dtype, device=offsets.device)  # (levels, 2)
        return torch.addcmul(reference[:, :, None, :, None, :], offsets, 1 / size[:, None, :])
    centre, size = reference[:, :, None, :, None, :2], reference[:, :, None, :, None, 2:]
    return torch.addcmul(centre, offsets, size * (0.5 / offsets.shape[-2]))
