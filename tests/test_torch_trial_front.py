"""Issue 36: ``pt.compile``'s trials choose from a lazily priced front what the whole front
gives (:class:`planner.torch.trial_front.TrialFront`), pricing fewer candidates."""

import itertools

import pytest

torch = pytest.importorskip("torch", reason="the torch extra is not installed")
nn = torch.nn

from planner.torch.compiled import (TORCH_DEFAULT, TRIAL_FRONT,  # noqa: E402
                                    CompiledStep, HGraphPartitioner, fresh_function)
from planner.torch.trial_front import choose_on  # noqa: E402


def blocks():
    """Three pre-norm MLP blocks: layer norms, GELUs and residuals give the front plans of
    both graphs, plans the merged graph's front drops, and min-cut partitions."""
    torch.manual_seed(0)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln, self.fc1, self.fc2 = nn.LayerNorm(32), nn.Linear(32, 64), nn.Linear(64, 32)

        def forward(self, x):
            return x + self.fc2(nn.functional.gelu(self.fc1(self.ln(x))))

    net = nn.Sequential(*(Block() for _ in range(3)), nn.LayerNorm(32), nn.Linear(32, 4))
    return net.double(), torch.randn(16, 32, dtype=torch.float64)


@pytest.fixture(scope="module")
def fronts():
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    m, x = blocks()
    part = HGraphPartitioner("80%", progress="off", whole_front=True)
    part.trial = TORCH_DEFAULT
    step = torch.compile(fresh_function(lambda v: m(v).mean()), dynamic=False)
    with inductor_config.patch(custom_partitioner_fn=part, fx_graph_cache=False), \
            functorch_config.patch(enable_autograd_cache=False):
        step(x).backward()
    (key,) = part.keys
    whole, merged_gm = part.fronts[key][0], part.fronts[key][2]
    return whole, part.fronts[(TRIAL_FRONT, key)][0], part.defaults[key], merged_gm


def ident(c, merged_gm):
    return (c.keep, c.source, c.joint is merged_gm)


def test_trial_choices_are_the_whole_fronts_pricing_fewer(fronts):
    whole, lazy, dflt, merged_gm = fronts
    assert any(c.source == "min-cut" for c in whole) and len(whole) >= 4
    peaks = sorted({c.step_peak for c in whole})
    m0 = peaks[len(peaks) // 2]
    checked = 0
    for lowest, scale, target in itertools.product(
            (False, True), (0.8, 1.0, 1.3), [peaks[0] - 1, *peaks, peaks[-1] * 2]):
        left_whole = [c for c in whole if not (c.source == "min-cut" and c.keep == dflt.keep)]
        left_lazy = {i for i in range(len(lazy)) if lazy.plan[i] or lazy.keep[i] != dflt.keep}
        for _ in range(3):          # three trials, each removing its choice, as _search does
            want = choose_on(left_whole, dflt, scale, target, m0, lowest)
            i = CompiledStep._next(lazy, left_lazy, dflt, scale, target, m0, lowest)
            if want is None:
                assert i is None
                break
            got = lazy.priced[i]
            assert ident(got, merged_gm) == ident(want, merged_gm)
            assert (got.step_peak, got.recompute_flops) == (want.step_peak, want.recompute_flops)
            left_whole.remove(want)
            left_lazy.discard(i)
            checked += 1
    assert checked > 20


def test_a_trial_front_prices_fewer_than_the_whole_front_for_a_choice():
    import torch._functorch.config as functorch_config
    import torch._inductor.config as inductor_config

    m, x = blocks()
    part = HGraphPartitioner("80%", progress="off")
    part.trial = TORCH_DEFAULT
    step = torch.compile(fresh_function(lambda v: m(v).mean()), dynamic=False)
    with inductor_config.patch(custom_partitioner_fn=part, fx_graph_cache=False), \
            functorch_config.patch(enable_autograd_cache=False):
        step(x).backward()
    (key,) = part.keys
    assert key not in part.fronts                   # no whole front planned
    lazy, dflt = part.fronts[(TRIAL_FRONT, key)][0], part.defaults[key]
    assert lazy.priced == {}                        # nothing priced before a trial asks
    left = set(range(len(lazy)))
    i = CompiledStep._next(lazy, left, dflt, 1.0, 0.8 * dflt.step_peak, dflt.step_peak, False)
    assert i is not None and len(lazy.priced) < len(lazy)
