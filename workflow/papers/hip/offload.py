"""KV-cache offloading during decoding, simulated (the paper's KV cache offloading).

The full KV cache lives in host memory; the GPU keeps the attention sinks and the sliding
window (always needed) and caches of other keys. Every ``refresh_interval`` decoding steps HiP
recomputes its mask with the last ``refresh_interval`` queries as one query block (the official
runner's "prefix query"); in between, the mask is reused. A step reads, from two GPU caches as the
official offload runner keeps them (a masking-key cache and a sparse-attention cache, each with its own
hit ratio, ``simulated_mask_hit_ratio`` / ``simulated_sa_hit_ratio``):

* at a refresh, the representative key blocks the tree search scores at each level
  (:func:`trace_tree`, which also returns the chosen blocks): the mask-estimation reads, served by an
  LRU of ``s * b * log2(T_blocks / b + 1)`` key blocks with ``b = 2 mask_k / block_k`` (the official
  ``perform_lru`` budget, ``lru_budget_log_scale = s``), which grows as ``log T``;
* every step, the ``mask_k`` keys of the current mask (block-sparse attention): the sparse-attention
  reads, served by an LRU of the mask's own ``mask_k / block_k`` blocks (the official
  ``sparse_attention_budget`` less the sliding window, resident here; one key head per query head).

A read of a block that is not in its cache is a miss (a host-to-GPU copy). The simulation counts
hits and misses per cache (:class:`SplitCache`) and measures the working set (distinct
non-resident blocks read per refresh interval).

What claim (d) decides (config ``hip.claims`` says why): the mask-estimation hit rate, the reads that
the paper's O(log T) GPU cache must serve (the tree search touches O(log T) blocks per refresh; the
sparse-attention reads are a fixed ``mask_k``), with the same keys in shuffled block order as its
ablation and planted-locality keys as its positive control; the sparse-attention hit rate is
reported beside it. The tree's representatives move while decoding: the search range grows by one
block every ``block_k`` steps and the chunk bounds ``(L * i) // n`` with it, so not even the first
level's representatives are the same blocks at every refresh (review hip_r9 found 13-16 of 56
level-0 reads hit). Random reads of HiP's volume (:func:`random_trace`) are reported, not decided on. The
diagnostic beside (d) (review hip_r10): the same decoding with the chunk bounds frozen at the first decoded length
(:func:`refresh_inputs`), which tells how much of a falling hit rate the moving bounds account for.
"""
from __future__ import annotations

import dataclasses
import math
from collections import OrderedDict

import torch

import kernels
from papers.hip.evaluate import planted_locality_keys
from papers.hip.methods import HiPConfig

# The planted queries' spread about their head's direction (the positive control of the offloading claim): at 0.5 the
# queries of successive refreshes stay alike, as a decoding model's do, so that locality can make the masks reusable.
PLANTED_QUERY_NOISE = 0.5


def search_range(Tq: int, Tk: int, cfg: HiPConfig) -> tuple[int, int]:
    """``(ns, w_lo)``: the search range ``[ns, w_lo)`` in key blocks of the query block made of
    the last Tq of Tk positions (sink blocks before it, window blocks after it)."""
    nkb = -(-Tk // cfg.block_k)
    ns = min(-(-cfg.sink // cfg.block_k), nkb)
    return ns, max(min(max(Tk - Tq - cfg.window, 0), Tk) // cfg.block_k, ns)


def trace_tree(q: torch.Tensor, k: torch.Tensor, cfg: HiPConfig) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """HiP's tree search (Algorithm 1) for one query block, every level exposed.

    q (H, Tq, D): the last Tq queries (one block; positions Tk - Tq .. Tk - 1); k (H, Tk, D).
    The same steps as ``kernels.hip_select`` (which hides the levels): the search range
    ``[ns, w_lo)`` is cut into ``n`` chunks; ``ceil(log2(ceil(L / n)))`` times every chunk is
    halved, each half scored by its centre block (``max q . k`` over every
    ``block_stride_q``-th query and the block's keys), and the ``n`` best halves kept (ties:
    lower position). Returns ``(tree, visited)``: tree (H, n) chosen blocks (-1 padded),
    visited a list over levels of (H, 2n) scored representative blocks (-1 = empty half).
    """
    H, Tq, D = q.shape
    Tk, bk, n = k.shape[1], cfg.block_k, cfg.n
    ns, w_lo = search_range(Tq, Tk, cfg)
    L = w_lo - ns
    if L <= n:  # nothing to prune: the whole search range is kept
        tree = torch.full((H, n), -1, dtype=torch.int64)
        tree[:, :L] = torch.arange(ns, w_lo)
        return tree, []
    qs = q[:, 0:Tq:cfg.block_stride_q].float()  # (H, NQ, D): the scored queries
    i = torch.arange(n)
    start = ((L * i) // n).expand(H, n)  # n equal chunks, positions in the search range
    size = ((L * (i + 1)) // n - (L * i) // n).expand(H, n)
    visited = []
    for _ in range(math.ceil(math.log2(-(-L // n)))):
        left = size // 2
        h_start = torch.stack([start, start + left], -1).flatten(-2)  # (H, 2n): left_0, right_0, ...
        h_size = torch.stack([left, size - left], -1).flatten(-2)
        rep = ns + h_start + h_size // 2  # centre block of each half
        keys = rep[..., None] * bk + torch.arange(bk)  # (H, 2n, bk)
        kg = torch.gather(k.float(), 1, keys.clamp(max=Tk - 1).flatten(1)[..., None].expand(-1, -1, D))
        s = torch.einsum("hqd,hjd->hqj", qs, kg).amax(1).view(H, 2 * n, bk)  # max over queries
        s = s.masked_fill((keys >= Tk) | (h_size[..., None] == 0), float("-inf")).amax(-1)  # (H, 2n)
        visited.append(torch.where(h_size > 0, rep, -1))
        top = torch.sort(torch.sort(s, dim=-1, descending=True, stable=True).indices[:, :n], dim=-1).values
        start, size = torch.gather(h_start, 1, top), torch.gather(h_size, 1, top)
    return torch.where(size > 0, start + ns, -1), visited


def lru_capacity(T: int, cfg: HiPConfig, scale: float) -> int:
    """Key blocks the LRU may hold at context T: ``s * b * log2(T_blocks / b + 1)``, b = 2n
    (the official budget), at most the T_blocks that exist."""
    b, nkb = 2 * cfg.n, -(-T // cfg.block_k)
    return min(math.ceil(scale * b * math.log2(nkb / b + 1)), nkb)


class LRU:
    """A least-recently-used set of key blocks with a capacity; counts hits and misses, and the hits an unlimited
    cache fed the same reads would have (``unlimited_hits``: reads of a block read before, since the cache started).

    Every hit of the LRU is a hit of the unlimited cache (a block in the LRU was read before), so ``hits /
    unlimited_hits`` is the share of the re-reads the capacity serves: the misses it leaves are capacity misses,
    where ``1 - unlimited_hits / reads`` are the cold misses no cache of any size avoids (review hip_r12: in a
    64-step decode those are most of the fall of the hit rate with T)."""

    def __init__(self, capacity: int):
        self.capacity, self.blocks, self.seen = capacity, OrderedDict(), set()
        self.hits = self.misses = self.unlimited_hits = 0

    def read(self, blocks) -> None:
        for b in blocks:
            if b in self.seen:
                self.unlimited_hits += 1
            else:
                self.seen.add(b)
            if b in self.blocks:
                self.blocks.move_to_end(b)
                self.hits += 1
            else:
                self.misses += 1
                self.blocks[b] = None
                if len(self.blocks) > self.capacity:
                    self.blocks.popitem(last=False)


# The two kinds of reads of a decoding step and the cache each goes to (the official runner's two hit ratios).
READ_KINDS = ("mask", "sa")


class SplitCache:
    """One head's two GPU caches: ``mask``, the mask-estimation (tree search) reads of representative key
    blocks, an LRU of `mask_capacity` blocks; ``sa``, the block-sparse attention reads of the current mask,
    an LRU of `sa_capacity` blocks. Each counts its own hits and misses; a block may sit in one and not in
    the other (the official runner keeps masking keys apart from the sparse-attention keys and values)."""

    def __init__(self, mask_capacity: int, sa_capacity: int):
        self.caches = {"mask": LRU(mask_capacity), "sa": LRU(sa_capacity)}

    def read(self, kind: str, blocks) -> None:
        self.caches[kind].read(blocks)

    def reset_counts(self) -> None:
        """Zero the counts (after the warm-up interval); the caches' contents, and the blocks seen, stay."""
        for c in self.caches.values():
            c.hits = c.misses = c.unlimited_hits = 0

    def counts(self, kind: str) -> tuple[int, int]:
        """(hits, misses) of the reads of `kind`."""
        c = self.caches[kind]
        return c.hits, c.misses

    def unlimited_hits(self, kind: str) -> int:
        """Hits an unlimited cache would have had on the reads of `kind` (:class:`LRU`)."""
        return self.caches[kind].unlimited_hits


def sa_capacity(cfg: HiPConfig) -> int:
    """Blocks of the sparse-attention cache: the mask's ``n = mask_k / block_k`` (the official
    ``sparse_attention_budget`` is ``(mask_k * kv_group + sliding_window) / block_k``; the window is resident
    here and every query head has its own key head)."""
    return cfg.n


def random_mask(H: int, Tq: int, Tk: int, cfg: HiPConfig, generator: torch.Generator) -> torch.Tensor:
    """(H, n): ``min(n, L)`` distinct key blocks drawn uniformly from the search range, -1 padded
    (random blocks in place of the tree search)."""
    ns, w_lo = search_range(Tq, Tk, cfg)
    L = w_lo - ns
    out = torch.full((H, cfg.n), -1, dtype=torch.int64)
    for h in range(H):
        pick = torch.randperm(L, generator=generator)[: cfg.n] + ns if L > 0 else torch.empty(0, dtype=torch.int64)
        out[h, : len(pick)] = pick
    return out


def random_trace(H: int, Tq: int, Tk: int, cfg: HiPConfig,
                 generator: torch.Generator) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The control of the offloading claim: :func:`trace_tree`'s reads with no locality.

    As many reads as HiP's search makes at a refresh (``ceil(log2(ceil(L / n)))`` levels of
    ``2n`` representative blocks, then a mask of ``n`` blocks) but every block drawn at random
    from the search range, anew at every refresh: the same read volume without the overlap of
    successive masks that lets a log T cache serve HiP. (Its first version drew the mask alone,
    ``n`` blocks re-read every step of the interval: fewer distinct reads than HiP's, so its hit
    rate rose to (refresh - 1) / refresh by construction.)"""
    ns, w_lo = search_range(Tq, Tk, cfg)
    L = w_lo - ns
    if L <= cfg.n:
        return trace_tree(torch.zeros(H, Tq, 1), torch.zeros(H, Tk, 1), cfg)  # nothing to prune, nothing to draw
    cfg2 = dataclasses.replace(cfg, mask_k=2 * cfg.mask_k)  # 2n blocks per level
    visited = [random_mask(H, Tq, Tk, cfg2, generator) for _ in range(math.ceil(math.log2(-(-L // cfg.n))))]
    return random_mask(H, Tq, Tk, cfg, generator), visited


def refresh_inputs(q: torch.Tensor, k: torch.Tensor, T: int, steps: int, refresh: int, freeze_bounds: bool = False):
    """The mask refreshes of decoding positions ``T - steps .. T - 1``: yields ``(r0, qb, kb)`` per refresh at
    position r0, qb (H, refresh, D) the last `refresh` queries and kb the keys the search runs over.

    Moving bounds (the default, what decides (d)): kb = the keys up to r0, so the search range grows with the decoded
    length and the first-level chunk bounds ``(L * i) // n`` (:func:`trace_tree`) move at every refresh. Frozen bounds
    (``freeze_bounds``, the diagnostic of review hip_r10): kb = the keys up to the first decoded position ``T - steps``
    at every refresh, so the search range and its chunks stay those of the first refresh (the keys decoded since are
    not searched). The official runner (hip_attn v1_1 attention2_draft_prefetch.py,
    ``masking_iteration_draft_cuda_initialize``) lays the chunks over the current key range at each call, their starts
    snapped to a power-of-two grid: between these two."""
    first = T - steps
    for r0 in range(first, T, refresh):
        yield r0, q[:, r0 - refresh + 1: r0 + 1], k[:, : (first if freeze_bounds else r0) + 1]


def simulate_decode(q: torch.Tensor, k: torch.Tensor, T: int, steps: int, refresh: int, cfg: HiPConfig,
                    scale: float, generator: torch.Generator | None = None, freeze_bounds: bool = False) -> dict:
    """Decode positions ``T - steps .. T - 1`` of one layer; q, k (H, >= T, D) from the model.

    Per head a :class:`SplitCache`: the mask-estimation reads (every level's representatives, at each
    refresh) go to an LRU of :func:`lru_capacity` (T) blocks, the sparse-attention reads (the mask, every
    step) to an LRU of :func:`sa_capacity` blocks; sink and window blocks are resident and not counted. The
    first refresh interval warms the caches up and is not counted. Returns ``mask_hit_rate`` and
    ``sa_hit_rate`` (each cache's hits over its reads), ``hit_rate`` (both pooled), ``mask_unlimited_hit_rate`` (the
    mask-estimation reads' hit rate in an unlimited cache) and ``mask_capacity_share`` (the log T LRU's mask-estimation
    hits over the unlimited cache's: the share of the re-reads its capacity serves), the working set
    (distinct blocks read per refresh interval, mean over heads and intervals), the capacities, and the
    share of refreshes whose traced mask equals ``kernels.hip_select``'s (1.0: the trace is HiP's own
    search). With a ``generator``, each refresh draws random blocks instead (:func:`random_trace`, the control).
    ``freeze_bounds``: the search's chunk bounds frozen at the first decoded length (:func:`refresh_inputs`).
    """
    H = q.shape[0]
    caches = [SplitCache(lru_capacity(T, cfg, scale), sa_capacity(cfg)) for _ in range(H)]
    first, working, agree = T - steps, [], []
    for r0, qb, kb in refresh_inputs(q, k, T, steps, refresh, freeze_bounds):  # the last `refresh` queries
        if generator is not None:  # the control: random blocks, nothing scored
            mask, visited = random_trace(H, refresh, kb.shape[1], cfg, generator)
        else:
            mask, visited = trace_tree(qb, kb, cfg)
            chosen = kernels.hip_select(qb[None], kb[None], **{**cfg.select_kwargs(), "block_q": refresh})[0, :, 0]
            ns, w_lo = search_range(refresh, kb.shape[1], cfg)
            for h in range(H):
                ours, theirs = mask[h][mask[h] >= 0], chosen[h][(chosen[h] >= ns) & (chosen[h] < w_lo)]
                agree.append(sorted(ours.tolist()) == sorted(theirs.tolist()))
        reads = [set() for _ in range(H)]
        for t in range(r0, min(r0 + refresh, T)):
            for h in range(H):
                if t == r0:  # mask estimation: the tree search's representatives, level by level
                    rep = [int(b) for lvl in visited for b in lvl[h] if b >= 0]
                    caches[h].read("mask", rep)
                    reads[h].update(rep)
                sa = [int(b) for b in mask[h] if b >= 0]  # block-sparse attention
                caches[h].read("sa", sa)
                reads[h].update(sa)
        if r0 == first:  # warm-up interval
            for c in caches:
                c.reset_counts()
        else:
            working.append(sum(len(r) for r in reads) / H)
    out = {}
    for kind in READ_KINDS:
        hits, misses = (sum(c.counts(kind)[i] for c in caches) for i in (0, 1))
        out[f"{kind}_hit_rate"] = hits / (hits + misses) if hits + misses else float("nan")
        out[f"{kind}_reads"] = hits + misses
    # the mask-estimation reads against an unlimited cache fed the same reads (review hip_r12): its hit rate (what no
    # capacity can beat) and the share of its hits the log T LRU keeps (what decides (d): the capacity's part)
    unlimited = sum(c.unlimited_hits("mask") for c in caches)
    out["mask_unlimited_hit_rate"] = unlimited / out["mask_reads"] if out["mask_reads"] else float("nan")
    out["mask_capacity_share"] = (sum(c.counts("mask")[0] for c in caches) / unlimited if unlimited
                                  else float("nan"))
    hits = sum(c.counts(kd)[0] for c in caches for kd in READ_KINDS)
    total = out["mask_reads"] + out["sa_reads"]
    return {"hit_rate": hits / max(total, 1), **out, "working_set_blocks": sum(working) / max(len(working), 1),
            "capacity_blocks": caches[0].caches["mask"].capacity, "sa_capacity_blocks": caches[0].caches["sa"].capacity,
            "mask_agreement": sum(agree) / len(agree) if agree else float("nan")}


def planted_decode_qk(T: int, heads: int, head_dim: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """The positive control of the offloading claim (Sec. 3's attention locality, planted): q (1, H, T, D), one random
    direction per head plus ``PLANTED_QUERY_NOISE`` N(0, 1) noise per position (queries that stay alike while
    decoding), and k (1, H, T, D) with planted locality (:func:`papers.hip.evaluate.planted_locality_keys`: a slow
    sinusoid per channel). Locality is there by construction: the same keys in shuffled block order must give HiP's
    reads a lower hit rate."""
    _, k = planted_locality_keys(T, heads, head_dim, generator)
    direction = torch.randn(1, heads, 1, head_dim, generator=generator)
    return direction + PLANTED_QUERY_NOISE * torch.randn(1, heads, T, head_dim, generator=generator), k
