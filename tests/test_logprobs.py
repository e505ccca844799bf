import torch
from transformers import AutoModelForCausalLM

from agentic_rl.logprobs import common_prefix_len, sequence_logprobs


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
