"""The loop-design report's claims (../shared/seeds/003_b9e80e8c3dfc3fdb.txt, a Chinese article on a
CUHK / MBZUAI technical report on looped language models): every number as printed, on the lines
cited. Record types: `analysis/claims_base.py`; the rule: `analysis/claims.py`.

The article gives task scores in accuracy points from one model each, with no seeds and no noise level,
so its own numbers resolve none of its claims under the rule (`own_evidence`): a verdict needs our
runs with repeated seeds. Layouts are written P×L (P physical layers looped L times).
"""

from __future__ import annotations

from looplab.analysis.claims_base import Claim, Comparison, Metric, Point, Quote, Scale, Side, Study, Unit

STUDY = Study(
    key="loop-design",
    file="003_b9e80e8c3dfc3fdb.txt",
    title="循环语言模型的秘密:多绕几圈真的能让AI变聪明吗? (the loop-design report)",
    sha256="cbaf0c8084ff59a7eda948a0eb0b37115613e85218ba292b16c11f039e1135c5",
)
LAYERS = Scale(note="Llama3.1-1B and Qwen3-0.6B layer configurations; effective training depth 20")
ONE = "one model per figure and no stated noise: no interval"
NO_VALUES = "directional: the article prints no values for it"
REASONING = "reasoning subset"
KNOWLEDGE = "knowledge subset"


def _tasks(subset: str, at: str, *series: tuple[str, str], note: str = "") -> Metric:
    return Metric("tasks", f"accuracy ({subset})", tuple(series), at, note)


def _claim(key: str, where: str, lines: tuple[int, int], text: str, kind: Comparison, side: Side, **kw):
    kw.setdefault("unit", Unit.ACCURACY)
    kw.setdefault("scale", LAYERS)
    unit, scale, metric = kw.pop("unit"), kw.pop("scale"), kw.pop("metric")
    if not kw.get("points"):
        kw.setdefault("own_evidence", NO_VALUES)
    kw.setdefault("own_evidence", ONE)
    return Claim(f"loop.{key}", STUDY.key, where, lines, text, kind, side, unit, scale, metric, **kw)


def _extrapolation_claims() -> list[Claim]:
    where = "循环真的能让模型变聪明,但只对一部分任务有效"
    base = ("2×10", "base_loop 2×10")
    return [
        _claim(
            "reasoning_gains_beyond_horizon",
            where,
            (35, 35),
            "past the trained depth (20 → 40 layers) BaseLoop 2×10 gains on reasoning tasks",
            Comparison.DIFFERENCE,
            Side.ABOVE,
            metric=_tasks(REASONING, "loops at 2× the trained count against the trained count", base),
            terms=(("2×10 reasoning", 40), ("2×10 reasoning", 20)),
            points=(Point("2×10 reasoning", 20, Quote("28.52")), Point("2×10 reasoning", 40, Quote("31.49"))),
            quotes=(Quote("2×10"), Quote("3")),
            across_models=False,
        ),
        _claim(
            "knowledge_falls_beyond_horizon",
            where,
            (35, 35),
            "past the trained depth (20 → 40 layers) the same model loses about 10 points on knowledge tasks",
            Comparison.DIFFERENCE,
            Side.BELOW,
            metric=_tasks(KNOWLEDGE, "loops at 2× the trained count against the trained count", base),
            terms=(("2×10 knowledge", 40), ("2×10 knowledge", 20)),
            points=(Point("2×10 knowledge", 20, Quote("62.80")), Point("2×10 knowledge", 40, Quote("52.11"))),
            quotes=(Quote("10"),),
            across_models=False,
        ),
        _claim(
            "proofwriter_deep_proofs_gain",
            where,
            (41, 41),
            "at 24 layers (over the trained 20) ProofWriter's deepest proofs gain about 7.5 points",
            Comparison.DIFFERENCE,
            Side.ABOVE,
            metric=Metric("", "", note="needs ProofWriter by proof depth"),
            terms=(("deepest-proof gain", 24),),
            points=(Point("deepest-proof gain", 24, Quote("7.5")),),
            quotes=(Quote("24"), Quote("20")),
            across_models=False,
        ),
        _claim(
            "clutrr_short_chains_gain",
            where,
            (41, 41),
            "CLUTRR's short chains (length 2 and 3) gain over 20 points from extra loops",
            Comparison.DIFFERENCE,
            Side.ABOVE,
            metric=Metric("", "", note="needs CLUTRR by chain length"),
            terms=(("short-chain gain", "2-3"),),
            points=(Point("short-chain gain", "2-3", Quote("20")),),
            across_models=False,
        ),
        _claim(
            "harder_gains_less",
            where,
            (41, 43),
            "the gain from extra loops falls with CLUTRR chain length (lengths 4-10 gain little or lose)",
            Comparison.TREND,
            Side.BELOW,
            metric=Metric("", "", note="needs CLUTRR by chain length"),
            terms=("gain", (2, 3, 4, 10)),
            quotes=(Quote("4"), Quote("10")),
            across_models=False,
        ),
    ]


def _layout_claims_a() -> list[Claim]:
    where = "深度怎么分配:物理层数和循环次数不能乱搭"
    nonloop = ("NonLoop", "non_loop 20×1")
    return [
        _claim(
            "balanced_layout_keeps_improving",
            where,
            (49, 49),
            "a balanced layout (4×5) keeps improving as inference depth grows to 40 layers",
            Comparison.TREND,
            Side.ABOVE,
            metric=_tasks(REASONING, "loops from the trained count to 2×", ("4×5", "base_loop 4×5")),
            terms=("4×5", (20, 30, 40)),
            quotes=(Quote("4×5"), Quote("40")),
            across_models=False,
        ),
        _claim(
            "deep_layout_flat",
            where,
            (49, 49),
            "a deep layout looped twice (10×2) gains almost nothing from extra loops: its curve is flat",
            Comparison.EQUIVALENT,
            Side.BELOW,
            metric=_tasks(REASONING, "loops from the trained count to 2×", ("10×2", "base_loop 10×2")),
            terms=(("10×2", 40), ("10×2", 20)),
            quotes=(Quote("10×2"),),
            across_models=False,
            own_evidence="the article states no margin within which a curve counts as flat",
        ),
        _claim(
            "5x4_beats_nonloop",
            where,
            (53, 53),
            "BaseLoop 5×4 run to 30 layers beats the 20-layer NonLoop model on reasoning",
            Comparison.DIFFERENCE,
            Side.ABOVE,
            metric=_tasks(REASONING, "5×4 at 1.5× its loops; NonLoop", ("5×4", "base_loop 5×4"), nonloop),
            terms=(("5×4", 30), ("NonLoop", 20)),
            points=(Point("NonLoop", 20, Quote("30.25")), Point("5×4", 30, Quote("31.88"))),
        ),
        _claim(
            "4x5_beats_nonloop",
            where,
            (53, 53),
            "BaseLoop 4×5 run to 40 layers beats the 20-layer NonLoop model on reasoning",
            Comparison.DIFFERENCE,
            Side.ABOVE,
            metric=_tasks(REASONING, "4×5 at 2× its loops; NonLoop", ("4×5", "base_loop 4×5"), nonloop),
            terms=(("4×5", 40), ("NonLoop", 20)),
            points=(Point("NonLoop", 20, Quote("30.25")), Point("4×5", 40, Quote("31.49"))),
        ),
    ]


def _layout_claims_b() -> list[Claim]:
    return [
        _claim(
            "coda_softens_under_unrolling",
            "输入层和输出层要不要参与循环,这事儿很讲究",
            (65, 65),
            "with a Coda (CoreLoop) knowledge accuracy decays less when run at fewer loops than trained",
            Comparison.DIFFERENCE,
            Side.ABOVE,
            metric=_tasks(
                KNOWLEDGE,
                "loops under the trained count, as a change from the trained count",
                ("CoreLoop", "core_loop"),
                ("BaseLoop", "base_loop"),
            ),
            terms=(("CoreLoop", "under-unrolled"), ("BaseLoop", "under-unrolled")),
        ),
        _claim(
            "update_falls_beyond_horizon",
            "输入层和输出层要不要参与循环 (反常现象)",
            (71, 71),
            "past the trained loop count the relative update per round keeps falling",
            Comparison.TREND,
            Side.BELOW,
            unit=Unit.UPDATE,
            metric=Metric("round_deltas", "rel_change", (), "rounds past the trained count"),
            terms=("rel_change", ("trained", "beyond")),
            across_models=False,
        ),
        _claim(
            "variance_grows_beyond_horizon",
            "输入层和输出层要不要参与循环 (反常现象)",
            (71, 71),
            "past the trained loop count the variance of the loop state keeps growing",
            Comparison.TREND,
            Side.ABOVE,
            unit=Unit.UPDATE,
            metric=Metric("round_deltas", "state_var", (), "rounds past the trained count"),
            terms=("state_var", ("trained", "beyond")),
            across_models=False,
        ),
    ]


def _layout_claims() -> list[Claim]:
    return [*_layout_claims_a(), *_layout_claims_b()]


def _conditioning_claims_a() -> list[Claim]:
    extrapolated = "loops at 2× the trained count"
    return [
        _claim(
            "stronger_injection_collapses",
            "怎么把之前的思考状态传下去 (初始状态注入)",
            (85, 85),
            "the stronger the initial-state injection (scalar < channel < dense), the worse knowledge "
            "accuracy collapses past the trained depth",
            Comparison.RANK,
            Side.BELOW,
            unit=Unit.FRACTION,
            metric=_tasks(KNOWLEDGE, extrapolated, ("injection", "base_loop with scalar, channel, dense")),
            terms=("injection strength", "knowledge accuracy", ("scalar", "channel", "dense")),
        ),
        _claim(
            "history_window_1_beats_4",
            "历史状态注入",
            (95, 95),
            "history injection with a window of 1 extrapolates better than a window of 4",
            Comparison.DIFFERENCE,
            Side.ABOVE,
            metric=_tasks("all", extrapolated, ("window 1", "history 1"), ("window 4", "history 4")),
            terms=(("window 1", "extrapolated"), ("window 4", "extrapolated")),
            quotes=(Quote("4"),),
        ),
        _claim(
            "branch_gating_helps_7x4",
            "时间步条件化",
            (101, 101),
            "at 7×4, branch gating lifts the total score at doubled depth over BaseLoop",
            Comparison.DIFFERENCE,
            Side.ABOVE,
            metric=_tasks("all", extrapolated, ("branch gating", "branch_gate"), ("BaseLoop", "base_loop")),
            terms=(("branch gating", "7×4"), ("BaseLoop", "7×4")),
            points=(Point("BaseLoop", "7×4", Quote("36.59")), Point("branch gating", "7×4", Quote("38.46"))),
            quotes=(Quote("7×4"),),
        ),
        _claim(
            "timestep_gain_depends_on_layout",
            "时间步条件化",
            (101, 101),
            "timestep conditioning gains less (or nothing) at 2×14 and 4×7 than at 7×4",
            Comparison.DIFFERENCE,
            Side.ABOVE,
            metric=_tasks("all", extrapolated, ("gain", "branch_gate − base_loop per layout")),
            terms=((("gain", "7×4"), ("gain", "2×14")), (("gain", "7×4"), ("gain", "4×7"))),
            quotes=(Quote("2×14"), Quote("4×7")),
        ),
        _claim(
            "history_timestep_best_pair",
            "三种机制放在一起,到底谁和谁最合拍",
            (109, 109),
            "at 3× the trained depth history + timestep (loop gating) is the best pair of conditionings",
            Comparison.LOCATION,
            Side.ABOVE,
            metric=_tasks(
                "all", "loops at 3× the trained count", ("pairs", "the three pairs of conditionings")
            ),
            terms=("pair", "history + timestep", ("initial + history", "initial + timestep")),
            points=(
                Point("pair", "history + timestep", Quote("37.30")),
                Point("pair", "initial + history", Quote("36.91")),
                Point("pair", "initial + timestep", Quote("36.33")),
            ),
            higher_better=True,
            quotes=(Quote("3"),),
        ),
    ]


def _conditioning_claims_b() -> list[Claim]:
    return [
        _claim(
            "pair_beats_best_single",
            "三种机制放在一起,到底谁和谁最合拍",
            (109, 109),
            "the history + timestep pair beats its strongest single component by 1.16 points",
            Comparison.DIFFERENCE,
            Side.ABOVE,
            metric=_tasks("all", "loops at 3× the trained count", ("pair − best single", "")),
            terms=(("pair − best single", "3×"),),
            points=(Point("pair − best single", "3×", Quote("1.16")),),
        ),
        _claim(
            "triple_below_pair",
            "三种机制放在一起,到底谁和谁最合拍",
            (111, 111),
            "adding the initial state to the best pair (all three) scores below the pair",
            Comparison.DIFFERENCE,
            Side.BELOW,
            metric=_tasks("all", "loops at 3× the trained count", ("triple", ""), ("pair", "")),
            terms=(("triple", "3×"), ("pair", "3×")),
        ),
        _claim(
            "channel_interaction_7x_dense",
            "计算交互度",
            (117, 117),
            "channel-wise injection's cross-loop interaction is nearly 7 times dense injection's",
            Comparison.RATIO,
            Side.ABOVE,
            unit=Unit.RATIO,
            metric=Metric("round_interactions", "interaction", (("channel", "channel"), ("dense", "dense"))),
            terms=(("channel / dense", "interaction"),),
            points=(Point("channel / dense", "interaction", Quote("7")),),
        ),
        _claim(
            "pair_interaction_higher",
            "计算交互度",
            (119, 119),
            "the history + timestep pair interacts across loops 10-20 % more than pairs with the initial state",
            Comparison.RATIO,
            Side.ABOVE,
            unit=Unit.RATIO,
            metric=Metric("round_interactions", "interaction", (), "the pairs of conditionings"),
            terms=(("history + timestep", "interaction"), ("initial pairs", "interaction")),
            quotes=(Quote("10%"), Quote("20%")),
        ),
    ]


def _conditioning_claims() -> list[Claim]:
    return [*_conditioning_claims_a(), *_conditioning_claims_b()]


CLAIMS: tuple[Claim, ...] = (*_extrapolation_claims(), *_layout_claims(), *_conditioning_claims())
