"""The iso-depth scaling law's claims (../shared/seeds/002_452eaacac022864f.txt, a Chinese summary of
Schwethelm, Rueckert and Kaissis, "How Much Is One Recurrence Worth?"): every number as printed, on
the lines cited. Record types: `analysis/claims_base.py`; the rule: `analysis/claims.py`.

The summary states no seeds, device or noise level, and prints φ without an interval, so its own
numbers resolve none of these claims under the rule (`own_evidence`); our fit's bootstrap interval is
what a verdict rests on.
"""

from __future__ import annotations

from looplab.analysis.claims_base import Claim, Comparison, Metric, Point, Quote, Scale, Side, Study, Unit

STUDY = Study(
    key="iso-depth",
    file="002_452eaacac022864f.txt",
    title="How Much Is One Recurrence Worth? Iso-Depth Scaling Laws for Looped Language Models",
    sha256="801f74dfa96a36d7926e8c75d18a02b4dc23cc5dd3603064f0464c8f14236c31",
)
SWEEP = Scale(note="L_eff 20; r in 1, 2, 4, 8; 6 FLOP budgets from 4.64e17 to 2.15e19; 116 runs; FineWeb-Edu")
SWEEP_QUOTES = (Quote("20"), Quote("4.64 \\times 10^{17}"), Quote("2.15 \\times 10^{19}"), Quote("116"))
FIT = "iso_depth.fit_iso_depth (analysis/iso_depth.py) on the iso_depth runs"
NO_INTERVAL = "the summary prints the fitted figure without an interval"
NO_VALUES = "directional: the summary prints no values for it"


def _fit(column: str, at: str = "", note: str = "") -> Metric:
    return Metric("runs (iso_depth fit)", column, (), at, note or FIT)


PHI = (Point("phi", "fit", Quote("0.46")),)
BUDGETS = (
    "the summary says 50 budgets (line 36) where its method section says 6 budgets spanning about 50× "
    "(line 105): 2.15e19 / 4.64e17 is the span, not a count"
)


def _phi_claims() -> list[Claim]:
    return [
        Claim(
            "iso.phi_below_one",
            STUDY.key,
            "3A 循环等价指数 φ 的测定",
            (36, 128),
            "a block looped r times is worth r^φ distinct blocks with φ ≈ 0.46: less than one per loop (φ < 1)",
            Comparison.EXPONENT,
            Side.BELOW,
            Unit.EXPONENT,
            SWEEP,
            _fit("phi", note="φ of L = E + A (N_once + r^φ N_rec)^-α + B D^-β; " + FIT),
            terms=("phi", "fit", None),
            points=PHI,
            line=1.0,
            quotes=(*SWEEP_QUOTES, Quote("0.997"), Quote("50"), Quote("6")),
            contradiction=BUDGETS,
            own_evidence=NO_INTERVAL,
        ),
        Claim(
            "iso.phi_above_zero",
            STUDY.key,
            "abstract",
            (5, 5),
            "looping helps at all: φ > 0 (a recurrence adds capacity, if less than a distinct block)",
            Comparison.EXPONENT,
            Side.ABOVE,
            Unit.EXPONENT,
            SWEEP,
            _fit("phi"),
            terms=("phi", "fit", None),
            points=(Point("phi", "fit", Quote("0.46")),),
            line=0.0,
            quotes=(Quote("116"),),
            own_evidence=NO_INTERVAL,
        ),
        Claim(
            "iso.worth_at_4",
            STUDY.key,
            "3A, 具体案例",
            (123, 126),
            "at r = 4 a looped block is worth 4^φ distinct blocks, under the 4 it costs",
            Comparison.EXPONENT,
            Side.BELOW,
            Unit.EXPONENT,
            SWEEP,
            _fit("blocks", at="r = 4", note="iso_depth.recurrence_worth"),
            terms=("phi", "fit", 4),
            points=(Point("phi", "fit", Quote("0.46")),),
            stated=(Quote("1.86"),),
            line=4.0,
            contradiction="prints 4^0.46 ≈ 1.86 (lines 50 and 126); 4 ** 0.46 computes to more "
            "(analysis.claims.self_check shows the figure)",
            own_evidence=NO_INTERVAL,
        ),
    ]


def _size_claims() -> list[Claim]:
    where = ("3A 性能差距", (127, 127))
    sizes = (
        Point("looped r=4", "size", Quote("4.1 亿")),
        Point("non-looped, equal loss", "size", Quote("5.8 亿")),
        Point("non-looped, equal cost", "size", Quote("10 亿")),
    )
    return [
        Claim(
            "iso.r4_worth_larger_plain",
            STUDY.key,
            *where,
            "a 410M model at r = 4 reaches the loss of a 580M non-looped one",
            Comparison.RATIO,
            Side.ABOVE,
            Unit.RATIO,
            Scale("4.1 亿参数", note="r = 4"),
            _fit("n_effective / n_unique", at="r = 4", note="(N_once + 4^φ N_rec) / (N_once + N_rec)"),
            terms=(("non-looped, equal loss", "size"), ("looped r=4", "size")),
            points=sizes,
            quotes=(Quote("410M"),),
            own_evidence=NO_INTERVAL,
        ),
        Claim(
            "iso.r4_costs_more_than_it_is_worth",
            STUDY.key,
            *where,
            "training that r = 4 model costs as much as a 1B non-looped one, more than the 580M it equals",
            Comparison.RATIO,
            Side.ABOVE,
            Unit.RATIO,
            Scale("4.1 亿参数", note="r = 4"),
            _fit("training FLOPs ratio", at="r = 4", note="the equal-cost over the equal-loss size"),
            terms=(("non-looped, equal cost", "size"), ("non-looped, equal loss", "size")),
            points=sizes,
            own_evidence=NO_INTERVAL,
        ),
    ]


def _allocation_claims() -> list[Claim]:
    where = ("3B 计算最优分配", (130, 134))
    optimal = "iso_depth.compute_optimal at the largest budget of the runs, per r"

    def trend(key: str, text: str, side: Side, column: str) -> Claim:
        return Claim(
            f"iso.{key}",
            STUDY.key,
            *where,
            text,
            Comparison.TREND,
            side,
            Unit.FIT,
            SWEEP,
            _fit(column, at="r = 1, 2, 4, 8", note=optimal),
            terms=(column, (1, 2, 4, 8)),
            own_evidence=NO_VALUES,
        )

    return [
        trend("optimal_width_grows", "the compute-optimal width grows with r", Side.ABOVE, "width"),
        trend("optimal_tokens_fall", "the compute-optimal training tokens fall with r", Side.BELOW, "tokens"),
        trend(
            "optimal_params_fall",
            "the compute-optimal unique parameters fall with r",
            Side.BELOW,
            "unique_params",
        ),
        trend("gap_grows_with_r", "the loss gap to r = 1 at equal compute grows with r", Side.ABOVE, "gap"),
        Claim(
            "iso.no_crossover",
            STUDY.key,
            *where,
            "no looped model reaches the loss of r = 1 at equal compute in the budgets studied",
            Comparison.DIFFERENCE,
            Side.ABOVE,
            Unit.LOSS,
            SWEEP,
            _fit("gap", at="r = 2, 4, 8", note=optimal),
            terms=(("gap", 2), ("gap", 4), ("gap", 8)),
            quotes=(Quote("8"),),
            own_evidence=NO_VALUES,
        ),
    ]


def _downstream_claims() -> list[Claim]:
    return [
        Claim(
            "iso.knowledge_follows_loss",
            STUDY.key,
            "3C 下游任务评估",
            (136, 142),
            "knowledge-task accuracy follows the validation-loss order strictly: lower loss, higher accuracy",
            Comparison.RANK,
            Side.BELOW,
            Unit.FRACTION,
            SWEEP,
            Metric("tasks", "accuracy", (), "knowledge tasks against runs.eval_loss, over r", ""),
            terms=("eval_loss", "knowledge accuracy", (1, 2, 4, 8)),
            own_evidence=NO_VALUES,
        ),
        Claim(
            "iso.reasoning_no_signal",
            STUDY.key,
            "3C 下游任务评估",
            (142, 142),
            "reasoning tasks cannot tell the r apart at these budgets",
            Comparison.EQUIVALENT,
            Side.BELOW,
            Unit.ACCURACY,
            SWEEP,
            Metric("tasks", "accuracy", (), "reasoning tasks, over r", ""),
            terms=(("reasoning", 8), ("reasoning", 1)),
            own_evidence="the summary states no margin within which the r count as alike",
        ),
    ]


CLAIMS: tuple[Claim, ...] = (*_phi_claims(), *_size_claims(), *_allocation_claims(), *_downstream_claims())
