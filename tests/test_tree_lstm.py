"""The dependency Tree-LSTM (T-LSTM seed, appendix A Eq. 2-9): the batched level-by-level encoder against a
naive recursive implementation written from the equations, forward and gradients, on random trees."""

from __future__ import annotations

import random

import pytest
import torch

from vsekit.data.vocab import Vocabulary
from vsekit.errors import VsekitError
from vsekit.text import build_text_encoder, encoder_spec
from vsekit.text.tree_lstm import TreeLSTMEncoder, build_forest, child_slots


def _vocab(n: int = 30) -> Vocabulary:
    return Vocabulary([f"w{i}" for i in range(n)])


def _random_tree(rng: random.Random, n: int) -> list[int]:
    """Random head indices: each node but the root hangs off an earlier-built node (any position)."""
    order = list(range(n))
    rng.shuffle(order)
    heads = [-1] * n
    for k, node in enumerate(order[1:], start=1):
        heads[node] = order[rng.randrange(k)]
    return heads


def _reference(enc: TreeLSTMEncoder, words: list[int], heads: list[int]) -> torch.Tensor:
    """Root output by recursion over one tree, Eq. 2-9 literally (no batching, no packed product)."""
    p, H = enc.p, enc.hidden_dim
    Wi, Wo, Wu, Wf = enc.W.weight.split(H, dim=0)
    bi, bo, bu, bf = enc.W.bias.split(H)

    def node(t: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = enc.embed.weight[words[t]]
        left = [c for c in range(t - 1, -1, -1) if heads[c] == t]  # nearest first
        right = [c for c in range(t + 1, len(heads)) if heads[c] == t]
        slots = {}
        for side, kids in (("l", left), ("r", right)):
            states = [node(c) for c in kids]
            # Eq. 2: children p.. (1-based) are summed into slot p
            merged = states[: p - 1]
            if len(states) >= p:
                merged.append((sum(s[0] for s in states[p - 1 :]), sum(s[1] for s in states[p - 1 :])))
            slots[side] = merged

        def pre(W: torch.Tensor, b: torch.Tensor, gate: str, j: int | None = None) -> torch.Tensor:
            z = W @ x + b
            for side in ("l", "r"):
                for k, (h_k, _) in enumerate(slots[side]):
                    z = z + h_k @ enc.block(gate, side, k, j)
            return z

        i = torch.sigmoid(pre(Wi, bi, "i"))  # Eq. 9
        o = torch.sigmoid(pre(Wo, bo, "o"))  # Eq. 8
        u = torch.tanh(pre(Wu, bu, "u"))  # Eq. 7
        c = i * u
        for side in ("l", "r"):
            for k, (_, c_k) in enumerate(slots[side]):
                forget = torch.sigmoid(pre(Wf, bf, side, k))  # Eq. 5 (l_k) / Eq. 6 (r_k)
                c = c + forget * c_k  # Eq. 4
        return o * torch.tanh(c), c  # Eq. 3

    return node(heads.index(-1))[0]


@pytest.mark.parametrize("p", [1, 2, 3])
def test_batched_forward_and_gradients_match_the_recursive_reference(p: int) -> None:
    torch.manual_seed(p)
    rng = random.Random(p)
    enc = TreeLSTMEncoder(_vocab(), hidden_dim=6, p=p, word_dim=5).double()
    # a star with 5 left and 4 right children (more than p on both sides), a chain, one word, random trees
    trees = [[5, 5, 5, 5, 5, -1, 5, 5, 5, 5], [1, 2, 3, -1], [-1]]
    trees += [_random_tree(rng, rng.randint(2, 14)) for _ in range(7)]
    words = [[rng.randrange(4, len(enc.vocab)) for _ in t] for t in trees]  # no <pad> (its row gets no grad)

    out = enc(**build_forest(words, trees, p))
    ref = torch.stack([_reference(enc, w, t) for w, t in zip(words, trees, strict=True)])
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-12)

    weights = torch.randn_like(out)
    grads = torch.autograd.grad((out * weights).sum(), list(enc.parameters()))
    ref_grads = torch.autograd.grad((ref * weights).sum(), list(enc.parameters()))
    for g, r in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(g, r, rtol=1e-9, atol=1e-12)
    assert grads[-1].abs().sum() > 0  # the U/V blocks did get gradient


def test_parameter_count_is_the_papers() -> None:
    """4 input maps W (i, o, u, and the shared forget W_f), 2p(3 + 2p) H x H child blocks (Eq. 5-9)."""
    H, d, p = 7, 5, 2
    enc = TreeLSTMEncoder(_vocab(), hidden_dim=H, p=p, word_dim=d)
    assert enc.U.numel() == 2 * p * (3 + 2 * p) * H * H
    assert enc.W.weight.shape == (4 * H, d) and enc.W.bias.shape == (4 * H,)


def test_child_slots_sum_beyond_p_and_order_nearest_first() -> None:
    heads = [3, 3, 3, -1, 3, 3, 3]  # three left and three right children of node 3
    assert sorted(child_slots(heads, 2)) == [
        (0, 3, 1),  # farthest left shares slot p with the second
        (1, 3, 1),
        (2, 3, 0),  # nearest left child: slot 1 (index 0)
        (4, 3, 2),  # nearest right child
        (5, 3, 3),
        (6, 3, 3),
    ]


def test_forest_levels_and_roots() -> None:
    forest = build_forest([[1, 2, 3], [4]], [[1, -1, 1], [-1]], p=2)
    assert forest["level_sizes"].tolist() == [3, 1]  # leaves 0, 2 and the one-word tree; then node 1
    assert forest["words"].tolist() == [1, 3, 4, 2]
    assert forest["roots"].tolist() == [3, 2]
    assert forest["edge_sizes"].tolist() == [0, 2]
    with pytest.raises(ValueError, match="not a tree"):
        build_forest([[1, 2]], [[-1, -1]], p=2)
    with pytest.raises(ValueError, match="cycle"):
        build_forest([[1, 2, 3]], [[-1, 2, 1]], p=2)


def test_registered_and_rebuilt_from_its_config() -> None:
    vocab = _vocab()
    enc = build_text_encoder("tree-lstm", vocab, hidden_dim=8, p=3, word_dim=4)
    name, kwargs = encoder_spec(enc)
    again = build_text_encoder(name, vocab, **kwargs)
    assert name == "tree-lstm" and again.config() == enc.config() and again.output_dim == 8
    with pytest.raises(VsekitError, match="unknown option"):
        build_text_encoder("tree-lstm", vocab, children=2)
