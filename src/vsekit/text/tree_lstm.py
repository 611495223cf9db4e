"""The dependency Tree-LSTM sentence encoder of the T-LSTM seed (sec. 3.2.1 and appendix A, Eq. 2-9).

Every word of a caption is a node of its dependency tree (:mod:`vsekit.text.parse`); a node's input is
its word vector ``x``, its children are split into left children (words before it) and right children
(words after it), each side ordered from the nearest word outwards. With ``p`` the number of child slots
per side (the seed's "T-LSTM N Children"), left child ``k < p`` has a slot of its own and children ``p ..
m`` share slot ``p``, whose state and output are their sums (Eq. 2); the same on the right. Then, with
``h_lk, c_lk`` (``h_rk, c_rk``) the output and state of left (right) slot ``k``:

    i   = sigmoid(W_i x + sum_k U_ik h_lk + sum_k V_ik h_rk + b_i)                      (Eq. 9)
    o   = sigmoid(W_o x + sum_k U_ok h_lk + sum_k V_ok h_rk + b_o)                      (Eq. 8)
    u   = tanh   (W_u x + sum_k U_uk h_lk + sum_k V_uk h_rk + b_u)                      (Eq. 7)
    l_j = sigmoid(W_f x + sum_k U^l_jk h_lk + sum_k V^l_jk h_rk + b_f)   j = 1..p       (Eq. 5)
    r_j = sigmoid(W_f x + sum_k U^r_jk h_lk + sum_k V^r_jk h_rk + b_f)   j = 1..p       (Eq. 6)
    c   = i * u + sum_k l_k * c_lk + sum_k r_k * c_rk                                    (Eq. 4)
    h   = o * tanh(c)                                                                    (Eq. 3)

and the root's ``h`` is the sentence vector. The paper leaves the activations ``a_j`` unnamed; these are
Tai et al.'s (sigmoid gates, tanh update). ``W_f, b_f`` are shared by all forget gates (Eq. 5-6 use the
same ``W^(f)`` and ``b^(f)``); every ``U``, ``V`` block is its own ``H x H`` matrix, so there are
``2p (3 + 2p)`` of them. An absent child slot has ``h = c = 0``, which is exactly the equations' sums
over the children that exist.

**Batched execution.** No recursion per sentence: :func:`build_forest` orders the nodes of a whole batch
by height (leaves first), and :class:`TreeLSTMEncoder` runs one level at a time across all trees: each
level gathers its children's ``(h, c)`` by index, sums them into slots with one ``index_add``, multiplies
all ``U``/``V`` blocks at once (one ``[n, 2pH] x [2pH, (3 + 2p)H]`` product) and applies the gates. The
``W x`` products of all nodes are one matrix product before the first level.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import torch
from torch import nn

from vsekit.data.vocab import Vocabulary
from vsekit.text.encoders import TextEncoder, word_table
from vsekit.text.lru import LRUCache

__all__ = ["CACHE_SIZE", "TreeLSTMEncoder", "build_forest", "child_slots"]

_GATES = 3  # i, o, u; the 2p forget gates follow them in the U/V product


def child_slots(heads: Sequence[int], p: int) -> list[tuple[int, int, int]]:
    """``(child, parent, slot)`` for every edge of one tree given by its head indices.

    Slots ``0 .. p-1`` are the left side (nearest left child first, children beyond the p-th in slot
    ``p-1``), ``p .. 2p-1`` the right side (Eq. 2).
    """
    out = []
    for parent in range(len(heads)):
        left = [c for c in range(parent - 1, -1, -1) if heads[c] == parent]  # nearest first
        right = [c for c in range(parent + 1, len(heads)) if heads[c] == parent]
        out += [(c, parent, min(k, p - 1)) for k, c in enumerate(left)]
        out += [(c, parent, p + min(k, p - 1)) for k, c in enumerate(right)]
    return out


def _heights(heads: Sequence[int]) -> list[int]:
    """Height of every node (leaves 0); raises ValueError unless ``heads`` is one tree."""
    n = len(heads)
    roots = [i for i, h in enumerate(heads) if h < 0]
    if n == 0 or len(roots) != 1 or any(not -1 <= h < n or h == i for i, h in enumerate(heads)):
        raise ValueError(f"head indices {list(heads)} are not a tree with one root")
    children: list[list[int]] = [[] for _ in range(n)]
    for i, h in enumerate(heads):
        if h >= 0:
            children[h].append(i)
    height = [0] * n
    order, stack = [], [roots[0]]
    while stack:  # preorder, then reversed: every child before its parent
        node = stack.pop()
        order.append(node)
        stack.extend(children[node])
    if len(order) != n:
        raise ValueError(f"head indices {list(heads)} contain a cycle")
    for node in reversed(order):
        height[node] = max((height[c] + 1 for c in children[node]), default=0)
    return height


def build_forest(
    words: Sequence[Sequence[int]], heads: Sequence[Sequence[int]], p: int
) -> dict[str, torch.Tensor]:
    """The level schedule of a batch of trees (CPU int64 tensors; see the module docstring).

    * ``words [N]``: word id of every node, nodes ordered by (height, sentence, position);
    * ``level_sizes [L]``: nodes per height;
    * ``child [E]``, ``dst [E]``: for every edge, the child's node index and ``parent's position within
      its level * 2p + slot``; edges grouped by the parent's level, ``edge_sizes [L]`` per level;
    * ``roots [B]``: the node index of each sentence's root.
    """
    if len(words) != len(heads):
        raise ValueError(f"{len(words)} word lists but {len(heads)} trees")
    keyed = []  # (height, sentence, position)
    for s, (w, h) in enumerate(zip(words, heads, strict=True)):
        if len(w) != len(h):
            raise ValueError(f"sentence {s}: {len(w)} words but {len(h)} head indices")
        keyed += [(height, s, i) for i, height in enumerate(_heights(h))]
    keyed.sort()
    index = {(s, i): k for k, (_, s, i) in enumerate(keyed)}
    n_levels = keyed[-1][0] + 1 if keyed else 0
    level_sizes = [0] * n_levels
    for height, _, _ in keyed:
        level_sizes[height] += 1
    level_start = [sum(level_sizes[:k]) for k in range(n_levels)]
    edges = []  # (parent level, child index, dst)
    for s, h in enumerate(heads):
        for child, parent, slot in child_slots(h, p):
            node = index[(s, parent)]
            level = keyed[node][0]
            edges.append((level, index[(s, child)], (node - level_start[level]) * 2 * p + slot))
    edges.sort()
    edge_sizes = [0] * n_levels
    for level, _, _ in edges:
        edge_sizes[level] += 1
    roots = [index[(s, h.index(-1))] for s, h in enumerate(heads)]
    return {
        "words": torch.tensor([words[s][i] for _, s, i in keyed], dtype=torch.int64),
        "level_sizes": torch.tensor(level_sizes, dtype=torch.int64),
        "child": torch.tensor([e[1] for e in edges], dtype=torch.int64),
        "dst": torch.tensor([e[2] for e in edges], dtype=torch.int64),
        "edge_sizes": torch.tensor(edge_sizes, dtype=torch.int64),
        "roots": torch.tensor(roots, dtype=torch.int64),
    }


#: Sentences whose parses a TreeLSTMEncoder keeps by default (a few hundred bytes each: some 2 MB).
CACHE_SIZE = 4096


def _parse_in_memory(texts: list[str]) -> dict[str, list[int]]:
    """``{text: heads}`` parsed now, without the disk cache."""
    from vsekit.text.parse import parse_texts

    return dict(zip(texts, parse_texts(texts), strict=True))


class TreeLSTMEncoder(TextEncoder):
    """Dependency Tree-LSTM (T-LSTM appendix A): the root output ``h`` is the ``hidden_dim`` sentence vector.

    Args:
        vocab: the training vocabulary (tree nodes are its words; unknown words are <unk>).
        hidden_dim: H, the T-LSTM hidden size (the seed's "T-LSTM Hidden Dim"; its output size).
        p: child slots per side (the seed's "T-LSTM N Children"): p-1 own slots, the rest summed (Eq. 2).
        word_dim: size of the word vectors when ``glove`` is off.
        glove: initialise a 50-d word table from GloVe 6B (the seed used 300-d GloVe; 50-d is what
            installs offline here). ``W`` maps the word vectors to the gates directly.
        freeze_words: keep the word table fixed.
        parse_cache: read/write the per-corpus parse cache in :meth:`precompute` (off: parse in memory).
        cache_size: how many sentences' parses to keep in memory (a bounded LRU, least recently used
            dropped first); :meth:`precompute` makes room for a whole training corpus, so a long-lived
            model parses each new query once and keeps no more than this.
    """

    name = "tree-lstm"

    def __init__(
        self,
        vocab: Vocabulary,
        hidden_dim: int = 300,
        p: int = 2,
        word_dim: int = 300,
        glove: bool = False,
        freeze_words: bool = False,
        parse_cache: bool = True,
        cache_size: int = CACHE_SIZE,
    ) -> None:
        super().__init__()
        if hidden_dim < 1 or p < 1 or word_dim < 1:
            raise ValueError(f"hidden_dim, p and word_dim must be >= 1 (got {hidden_dim}, {p}, {word_dim})")
        from vsekit.text.glove import GLOVE_DIM

        self.vocab = vocab
        self.hidden_dim, self.p, self.word_dim = int(hidden_dim), int(p), int(word_dim)
        self.glove, self.freeze_words, self.parse_cache = bool(glove), bool(freeze_words), bool(parse_cache)
        self.output_dim = self.hidden_dim
        self.glove_coverage: float | None = None
        self._parses: LRUCache[str, list[int]] = LRUCache(cache_size)

        table_dim = GLOVE_DIM if self.glove else self.word_dim
        self.embed, self.glove_coverage = word_table(vocab, table_dim, self.glove, self.freeze_words)
        H = self.hidden_dim
        # W x + b for the gates i, o, u and the shared forget input W_f x + b_f, in that order: [N, 4H]
        self.W = nn.Linear(table_dim, 4 * H)
        # All U / V blocks as one matrix: rows are the 2p child slots (left 1..p, right 1..p), columns the
        # gates i, o, u, then the forget gates l_1..l_p, r_1..r_p. Block (slot, gate) is U/V_{gate,slot}.
        self.U = nn.Parameter(torch.empty(2 * self.p * H, (_GATES + 2 * self.p) * H))
        bound = 1.0 / H**0.5
        nn.init.uniform_(self.U, -bound, bound)
        nn.init.uniform_(self.W.weight, -bound, bound)
        nn.init.uniform_(self.W.bias, -bound, bound)

    # -- the paper's parameter names (the reference implementation in the tests reads these) ----------

    def block(self, gate: str, side: str, k: int, j: int | None = None) -> torch.Tensor:
        """The ``[H, H]`` block (row-vector convention: ``h @ block``) of gate ``gate`` for slot ``k`` of
        ``side`` (``"l"``: the U matrices, ``"r"``: the V matrices), 0-based. ``gate`` is ``"i"``, ``"o"``,
        ``"u"``, or ``"l"`` / ``"r"`` for the forget gate ``l_j`` / ``r_j`` (then ``j`` is needed)."""
        H, p = self.hidden_dim, self.p
        row = (0 if side == "l" else p) + k
        col = {"i": 0, "o": 1, "u": 2}.get(gate)
        if col is None:
            assert j is not None
            col = _GATES + (0 if gate == "l" else p) + j
        return self.U[row * H : (row + 1) * H, col * H : (col + 1) * H]

    # -- the TextEncoder interface ------------------------------------------------------------------

    def config(self) -> dict:
        return {
            "name": self.name,
            "hidden_dim": self.hidden_dim,
            "p": self.p,
            "word_dim": self.word_dim,
            "glove": self.glove,
            "freeze_words": self.freeze_words,
            "parse_cache": self.parse_cache,
        }

    def precompute(
        self, texts: Sequence[str], cache_root: str | os.PathLike[str] | None = None, progress: bool = False
    ) -> None:
        """Parse ``texts`` once (through the on-disk cache when ``parse_cache``) and keep all their trees."""
        from vsekit.text.parse import cached_parses

        def parse(todo: list[str]) -> dict[str, list[int]]:
            if self.parse_cache:
                return cached_parses(todo, cache_root=cache_root, progress=progress)
            return _parse_in_memory(todo)

        self._parses.reserve(len(dict.fromkeys(texts)))
        self._parses.lookup(texts, parse)

    def share_frozen(self, other: TextEncoder) -> None:
        """Share the parsed trees with ``other`` (members of an ensemble parse each caption once)."""
        if isinstance(other, TreeLSTMEncoder) and other is not self:
            other._parses.reserve(self._parses.maxsize)
            other._parses.update(self._parses.as_dict())
            self._parses = other._parses

    def prepare(self, texts: Sequence[str]) -> dict[str, torch.Tensor]:
        """The level schedule of the texts' trees (:func:`build_forest`); unseen texts are parsed now."""
        from vsekit.text.parse import tree_tokens

        if isinstance(texts, str):
            raise TypeError("prepare() takes a sequence of texts, not a single string")
        texts = list(texts)
        heads = self._parses.lookup(texts, _parse_in_memory)
        words = [[self.vocab.index(w) for w in tree_tokens(t)] for t in texts]
        return build_forest(words, heads, self.p)

    def forward(
        self,
        words: torch.Tensor,
        level_sizes: torch.Tensor,
        child: torch.Tensor,
        dst: torch.Tensor,
        edge_sizes: torch.Tensor,
        roots: torch.Tensor,
    ) -> torch.Tensor:
        H, slots = self.hidden_dim, 2 * self.p
        wx = self.W(self.embed(words))  # [N, 4H]: W x + b of every node at once
        hs: list[torch.Tensor] = []
        cs: list[torch.Tensor] = []
        node, edge = 0, 0
        for n, e in zip(level_sizes.tolist(), edge_sizes.tolist(), strict=True):
            pre = wx[node : node + n]
            gates = pre[:, : _GATES * H]
            if e:  # children: gather by index, sum into slots (Eq. 2), all U/V blocks in one product
                h_done, c_done = torch.cat(hs), torch.cat(cs)
                ch, to = child[edge : edge + e], dst[edge : edge + e]
                h_slot = h_done.new_zeros(n * slots, H).index_add(0, to, h_done[ch]).view(n, slots * H)
                c_slot = c_done.new_zeros(n * slots, H).index_add(0, to, c_done[ch]).view(n, slots, H)
                z = h_slot @ self.U  # [n, (3 + 2p) H]
                gates = gates + z[:, : _GATES * H]
                forget = torch.sigmoid(
                    pre[:, _GATES * H :].unsqueeze(1) + z[:, _GATES * H :].view(n, slots, H)
                )
            i, o, u = gates.split(H, dim=1)
            c = torch.sigmoid(i) * torch.tanh(u)  # Eq. 4, the i * u term
            if e:
                c = c + (forget * c_slot).sum(dim=1)  # Eq. 4, the forget-gated children
            hs.append(torch.sigmoid(o) * torch.tanh(c))  # Eq. 3
            cs.append(c)
            node, edge = node + n, edge + e
        return torch.cat(hs)[roots]  # [B, H]: each sentence's root output
