"""A FLOP budget buys a family the tokens its own FLOPs per token allow, in every place that counts them:
the spec's budget tokens (its data's `max_tokens: budget`, its run shape) agree with the planner's cost and
so with the trainer (it was priced with the stand-in LoopedLM config's FLOPs: 1.8 x too few tokens for this Huginn)."""

from looplab.model.counts import tokens_for_flops
from looplab.workers.train.cost import cost
from looplab.workers.train.spec import Spec

HUGINN = {
    "recipe": "fixed4",
    "size": "tiny",
    "family": "families.huginn:factory",
    "family_config": {"d_model": 64, "n_heads": 4, "mlp": 128, "mean_recurrence": 4, "backprop_depth": 2},
    "model": {"loops": 4},
    "batch_size": 8,
    "seq_len": 64,
}


def test_a_familys_flop_budget_is_priced_by_its_own_flops_everywhere():
    spec = Spec.from_dict({**HUGINN, "flops": 1.26e11})
    priced = cost(spec)
    assert spec.budget_tokens() == priced.steps * priced.tokens_per_step  # one count for both
    spent = priced.flops_per_token * spec.budget_tokens()
    assert 1.26e11 - priced.flops_per_token * 512 < spent <= 1.26e11  # whole steps within the budget
    cfg = spec.resolved_model_config()
    looped = tokens_for_flops(cfg, 1.26e11, 8, 64)  # what looplab's own model would buy
    assert spec.budget_tokens() > 1.7 * looped  # the family is cheaper per token: it trains more
    assert Spec.from_dict({**HUGINN, "flops": 1.26e11}).run_shape().tokens == spec.budget_tokens()
