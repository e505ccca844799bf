import pytest
import torch
from transformers import AutoModelForCausalLM

from agentic_rl.train.logprobs import SharedPrefix, common_prefix_len, micro_batches, sequence_logprobs


def _plain(model, seq):
    ids = torch.tensor([seq])
    logp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), -1)
    return logp.gather(1, ids[0, 1:, None])[:, 0]


def test_shared_prefix_matches_plain_forward_in_values_and_gradients(tiny_dir):
    torch.manual_seed(0)
    # float64: the induction-initialised attention is sharp, and in float32 the two (equal) computations then differ
    # by ~1% in some gradient entries from rounding alone; in float64 any real difference in the logic still shows.
    model = AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=torch.float64)
    prefix = torch.randint(5, 1000, (40,)).tolist()
    seqs = [prefix + torch.randint(5, 1000, (n,)).tolist() for n in (7, 12, 3)]
    assert common_prefix_len(seqs) >= 40
    masks = [[0] * 30 + [1] * (len(s) - 30) for s in seqs]
    logp, ent = sequence_logprobs(model, seqs, masks=masks, with_entropy=True)
    loss = -(logp.sum())
    loss.backward()
    g_shared = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    ref_loss = 0
    for b, s in enumerate(seqs):
        ref = _plain(model, s)
        m = torch.tensor(masks[b][1:], dtype=torch.bool)
        assert torch.allclose(logp[b, 1:len(s)][m], ref[m], atol=1e-5)
        assert (logp[b, 1:len(s)][~m] == 0).all()
        ref_loss = ref_loss - ref[m].sum()
    ref_loss.backward()
    for g, p in zip(g_shared, model.parameters()):
        assert torch.allclose(g, p.grad, atol=1e-5, rtol=1e-4)
    assert (ent >= 0).all() and ent.sum() > 0
    assert torch.allclose(loss, ref_loss, atol=1e-4)


def test_temperature_scales_logits(tiny_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_dir)
    seq = list(range(5, 30))
    lp1, _ = sequence_logprobs(model, [seq])
    lp2, _ = sequence_logprobs(model, [seq], temperature=2.0)
    ids = torch.tensor([seq])
    ref = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float() / 2.0, -1).gather(1, ids[0, 1:, None])[:, 0]
    assert torch.allclose(lp2[0, 1:], ref, atol=1e-5) and not torch.allclose(lp1, lp2)


def test_micro_batches_sort_by_length_and_keep_both_limits():
    prefix = [1, 2, 3]
    lengths = [9, 2, 30, 5, 5, 1, 12, 4]
    seqs = [prefix + [7 + i] * n for i, n in enumerate(lengths)]
    groups = micro_batches(seqs, max_rows=3, max_tokens=20)
    assert sorted(i for g in groups for i in g) == list(range(len(seqs)))  # every row exactly once
    flat = [i for g in groups for i in g]
    assert [lengths[i] for i in flat] == sorted(lengths)  # shortest first; ties keep their order (stable)
    for g in groups:
        padded = len(g) * max(lengths[i] for i in g)  # positions beyond the shared prefix
        assert len(g) <= 3 and (padded <= 20 or len(g) == 1)
    assert [lengths[i] for i in groups[-1]] == [30]  # longer than the budget: a micro-batch of its own
    assert micro_batches(seqs, max_rows=3) == [flat[:3], flat[3:6], flat[6:]]  # rows alone without a budget
    with pytest.raises(ValueError, match="≥ 1"):
        micro_batches(seqs, max_rows=0)


def test_micro_batches_bound_their_padding_when_asked():
    """A task's samples (a one-turn answer beside long recoveries): at most a quarter of a micro-batch is padding."""
    prefix = [1, 2, 3] * 20
    lengths = [300, 11, 106, 174, 290]
    seqs = [prefix + [7 + i] * n for i, n in enumerate(lengths)]
    groups = micro_batches(seqs, max_rows=16, max_tokens=2048, max_pad=0.25)
    assert [[lengths[i] for i in g] for g in groups] == [[11], [106, 174], [290, 300]]
    for g in groups:
        padded = len(g) * max(lengths[i] for i in g)
        assert padded - sum(lengths[i] for i in g) <= 0.25 * padded
    assert len(micro_batches(seqs, max_rows=16, max_tokens=2048)) == 1  # without it: one micro-batch, 41 % padding


def test_micro_batched_gradient_equals_one_batch(tiny_dir):
    """Accumulating over length-sorted micro-batches is the same sum as one forward over every row."""
    model = AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=torch.float64)
    torch.manual_seed(1)
    prefix = torch.randint(5, 1000, (20,)).tolist()
    seqs = [prefix + torch.randint(5, 1000, (n,)).tolist() for n in (3, 17, 8, 25, 5, 11)]
    logp, _ = sequence_logprobs(model, seqs)
    logp.sum().backward()
    whole = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    groups = micro_batches(seqs, max_rows=4, max_tokens=30)
    assert len(groups) > 2
    for g in groups:
        part, _ = sequence_logprobs(model, [seqs[i] for i in g])
        part.sum().backward()
    for a, p in zip(whole, model.parameters()):
        assert torch.allclose(a, p.grad, atol=1e-5, rtol=1e-4)  # the tolerance of the shared-prefix test above


def test_prefix_run_once_per_batch_gives_the_same_values_and_gradients(tiny_dir):
    """A SharedPrefix (the batch's prefix run once for all its micro-batches) changes the cost, not the numbers."""
    model = AutoModelForCausalLM.from_pretrained(tiny_dir, dtype=torch.float64)
    torch.manual_seed(2)
    prefix = torch.randint(5, 1000, (30,)).tolist()
    seqs = [prefix + torch.randint(5, 1000, (n,)).tolist() for n in (4, 9, 2, 14, 6)]
    masks = [[0] * 28 + [1] * (len(s) - 28) for s in seqs]  # the last two prefix tokens are trained on too
    groups = micro_batches(seqs, max_rows=2)
    assert len(groups) == 3
    per_micro = []
    for g in groups:
        logp, _ = sequence_logprobs(model, [seqs[i] for i in g], masks=[masks[i] for i in g])
        logp.sum().backward()
        per_micro.append(logp.detach())
    expected = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    shared = SharedPrefix(model, seqs)
    assert shared.length == 30
    for g, before in zip(groups, per_micro):
        logp, _ = sequence_logprobs(model, [seqs[i] for i in g], masks=[masks[i] for i in g], prefix=shared)
        assert torch.allclose(logp, before, atol=1e-10)
        logp.sum().backward()
    shared.backward()
    for e, p in zip(expected, model.parameters()):
        # The tolerance of the tests above: per-micro-batch and whole-batch gradients differ by as much (~1e-7 of
        # the largest entries, float64), and a SharedPrefix equals the whole-batch gradient to that rounding.
        assert torch.allclose(e, p.grad, atol=1e-5, rtol=1e-4)
    with pytest.raises(ValueError, match="SharedPrefix"):
        sequence_logprobs(model, [[1] * 40, [2] * 40], prefix=SharedPrefix(model, seqs))
