"""Our Muon is torch's update rule with the orthogonalisation dtype chosen per device."""
import torch

from agentic_rl.train import muon as muon_mod
from agentic_rl.train.muon import Muon, ns_dtype_for, orthogonalise


def _params(seed: int) -> list[torch.nn.Parameter]:
    g = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(48, 32, generator=g)), torch.nn.Parameter(torch.randn(16, 40, generator=g))]


def _run(opt_cls: type[torch.optim.Optimizer], params: list[torch.nn.Parameter], steps: int = 3) -> None:
    opt = opt_cls(params, lr=0.02, weight_decay=0.1, adjust_lr_fn="match_rms_adamw")
    g = torch.Generator().manual_seed(7)
    for _ in range(steps):
        for p in params:
            p.grad = torch.randn(p.shape, generator=g)
        opt.step()


def test_in_bfloat16_it_is_torchs_muon_exactly(monkeypatch):
    monkeypatch.setattr(muon_mod, "ns_dtype_for", lambda device: torch.bfloat16)
    ours, theirs = _params(0), _params(0)
    _run(Muon, ours)
    _run(torch.optim.Muon, theirs)
    for a, b in zip(ours, theirs):
        assert torch.equal(a, b)


def test_a_pinned_dtype_wins_over_the_device_rule():
    ours, theirs = _params(4), _params(4)
    _run(lambda ps, **kw: Muon(ps, ns_dtype=torch.bfloat16, **kw), ours)
    _run(torch.optim.Muon, theirs)
    for a, b in zip(ours, theirs):
        assert torch.equal(a, b)


def test_on_a_cpu_it_orthogonalises_in_float32_and_stays_close_to_the_bfloat16_update():
    assert ns_dtype_for(torch.device("cpu")) == torch.float32
    assert ns_dtype_for(torch.device("cuda", 0)) == torch.bfloat16
    ours, theirs = _params(1), _params(1)
    _run(Muon, ours)
    _run(torch.optim.Muon, theirs)
    start = _params(1)
    for a, b, s in zip(ours, theirs, start):
        assert not torch.equal(a, b)  # a different dtype really ran
        da, db = (a - s).flatten(), (b - s).flatten()
        assert torch.nn.functional.cosine_similarity(da, db, dim=0) > 0.99


def test_orthogonalise_pushes_singular_values_towards_one():
    g = torch.Generator().manual_seed(3)
    m = torch.randn(64, 24, generator=g) @ torch.diag(torch.logspace(-1, 1, 24))
    before = torch.linalg.svdvals(m)
    after = torch.linalg.svdvals(orthogonalise(m, (3.4445, -4.7750, 2.0315), 5, 1e-7, torch.float32))
    assert before.max() / before.min() > 100
    assert after.shape == (24,) and after.min() > 0.5 and after.max() < 1.5  # the quintic's band, not exactly 1


def test_a_torch_muon_checkpoint_loads_into_ours():
    theirs = _params(2)
    _run(torch.optim.Muon, theirs, steps=1)
    src = torch.optim.Muon(theirs, lr=0.02)
    for p in theirs:
        p.grad = torch.ones_like(p)
    src.step()
    dst = Muon(_params(2), lr=0.02)
    dst.load_state_dict(src.state_dict())
    bufs = [s["momentum_buffer"] for s in dst.state.values()]
    assert len(bufs) == 2 and all(b.abs().sum() > 0 for b in bufs)
