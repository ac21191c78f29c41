"""The lean-recipe note's claims (../shared/seeds/000_e25defff398d2c72.txt): every number as printed,
on the lines cited; its claims on training time and decoding speed are `analysis/claims_lean_cost.py`.
Record types: `analysis/claims_base.py`; the rule: `analysis/claims.py`.

Scales: the note trains on one RTX 5090 24G, 8650 万 (86.5 M) and 1.44 亿 (144 M) parameters on
5 亿, 10 亿 and 20 亿 tokens with seeds 43-45; its noise statement (line 3) is that two trainings of
one recipe differ by up to 0.01 in loss, so a difference under 0.01 counts as noise.
"""

from __future__ import annotations

from looplab.analysis.claims_base import Claim, Comparison, Metric, Point, Quote, Scale, Side, Study, Unit

STUDY = Study(
    key="lean",
    file="000_e25defff398d2c72.txt",
    title="研究笔记 · 2026 年 10 月 23 日 (the lean-recipe note)",
    sha256="dae4efc063be6e039756ee58fbfb9ad883b545d99ac8b63f10288876cab35ec2",
    noise=Quote("0.01"),
    noise_lines=(3, 3),
)
DEVICE = "5090 24G"
M144_1B = Scale("1.44 亿参数", "10 亿 token", (43, 44), DEVICE)
M144_2B = Scale("1.44 亿参数", "20 亿 token", (43, 44), DEVICE)
M86 = Scale("8650 万参数", "5 亿 token", (43, 44, 45), DEVICE)
M86_ONE = Scale("8650 万参数", "5 亿 token", (), DEVICE, "one run per row")
ONE_RUN = Scale("", "", (), DEVICE, "one run; size and tokens not stated")
EQUAL_DATA = "comparison.iso_data_table (sampled recipes at their best loop count, fixed ones at 4)"


def _m(frame: str, column: str, *series: tuple[str, str], at: str = "", note: str = "") -> Metric:
    return Metric(frame, column, tuple(series), at, note)


def _sweep(series: str, seeds: tuple[int, ...], rows: dict) -> tuple[Point, ...]:
    """Points of a depth-sweep table: {loops: (value of seed 1, value of seed 2, ...)}."""
    return tuple(
        Point(series, x, Quote(text), seed) for x, texts in rows.items() for seed, text in zip(seeds, texts)
    )


def _pairs(a: str, b: str, seeds: tuple[int, ...], a_texts: tuple, b_texts: tuple, x=4) -> tuple:
    return (
        *(Point(a, x, Quote(t), s) for s, t in zip(seeds, a_texts)),
        *(Point(b, x, Quote(t), s) for s, t in zip(seeds, b_texts)),
    )


# the table of lines 9-20: parcae at 144 M / 1 B, loops 1-32, seeds 43 and 44
PARCAE_SWEEP = _sweep(
    "parcae",
    (43, 44),
    {
        1: ("3.5066", "3.4944"),
        2: ("3.3393", "3.3357"),
        3: ("3.2840", "3.2822"),
        4: ("3.2622", "3.2610"),
        6: ("3.2487", "3.2478"),
        8: ("3.2463", "3.2451"),
        12: ("3.2458", "3.2446"),
        16: ("3.2459", "3.2447"),
        24: ("3.2461", "3.2449"),
        32: ("3.2461", "3.2449"),
    },
)
# the lean columns of the table of lines 46-57
LEAN_SWEEP = _sweep(
    "lean",
    (43, 44),
    {
        1: ("4.0478", "4.0400"),
        2: ("3.6453", "3.6365"),
        3: ("3.4292", "3.4358"),
        4: ("3.2413", "3.2392"),
        6: ("3.4620", "3.4139"),
        8: ("3.3057", "3.3114"),
        12: ("3.3387", "3.3439"),
        16: ("3.3495", "3.3513"),
        24: ("3.3538", "3.3521"),
        32: ("3.3541", "3.3518"),
    },
)
PARCAE_DEPTH = _m("depth", "val_loss", ("parcae", "parcae"), at="loops 1-32")
LEAN_DEPTH = _m("depth", "val_loss", ("lean", "lean"), at="loops 1-32")
OTHER_LOOPS = (1, 2, 3, 4, 6, 8, 16, 24, 32)


def _parcae_depth_claims() -> list[Claim]:
    t1 = ("table 原配方模型：推理时循环几轮，loss 是多少", (7, 20))
    return [
        Claim(
            "lean.parcae_gain_1_to_4",
            STUDY.key,
            *t1,
            "parcae's loss falls from 3.50 to 3.26 from 1 to 4 loops at inference (0.24: derived, 3.50 − 3.26)",
            Comparison.DIFFERENCE,
            Side.BELOW,
            Unit.LOSS,
            M144_1B,
            PARCAE_DEPTH,
            terms=(("parcae", 4), ("parcae", 1)),
            points=PARCAE_SWEEP,
            quotes=(Quote("3.50"), Quote("3.26")),
            across_models=False,
        ),
        Claim(
            "lean.parcae_gain_4_to_8",
            STUDY.key,
            *t1,
            "parcae's loss falls only a little more, about 0.016, from 4 to 8 loops",
            Comparison.DIFFERENCE,
            Side.BELOW,
            Unit.LOSS,
            M144_1B,
            PARCAE_DEPTH,
            terms=(("parcae", 8), ("parcae", 4)),
            points=PARCAE_SWEEP,
            stated=(Quote("0.016"),),
            stated_sign=-1,
            across_models=False,
        ),
        Claim(
            "lean.parcae_share_4_of_8",
            STUDY.key,
            *t1,
            "parcae's first 4 loops carry most (94 %) of its 1→8-loop gain",
            Comparison.SHARE,
            Side.ABOVE,
            Unit.FRACTION,
            M144_1B,
            PARCAE_DEPTH,
            terms=("parcae", 1, 4, 8),
            points=PARCAE_SWEEP,
            stated=(Quote("94%"),),
            across_models=False,
        ),
        Claim(
            "lean.parcae_flat_beyond_8",
            STUDY.key,
            *t1,
            "beyond 8 loops parcae's loss is flat: 12-32 loops within noise of 8",
            Comparison.EQUIVALENT,
            Side.BELOW,
            Unit.LOSS,
            M144_1B,
            PARCAE_DEPTH,
            terms=tuple((("parcae", x), ("parcae", 8)) for x in (12, 16, 24, 32)),
            points=PARCAE_SWEEP,
            across_models=False,
        ),
        _parcae_best_claim(),
    ]


def _parcae_best_claim() -> Claim:
    return Claim(
        "lean.parcae_best_at_12",
        STUDY.key,
        "table note below the equal-data table (原配方取 1 到 32 轮中最好的一档)",
        (9, 34),
        "parcae is best at 12 loops of 1-32 on both seeds",
        Comparison.LOCATION,
        Side.ABOVE,
        Unit.LOSS,
        M144_1B,
        PARCAE_DEPTH,
        terms=("parcae", 12, OTHER_LOOPS),
        points=PARCAE_SWEEP,
        quotes=(Quote("12"),),
        across_models=False,
        own_evidence="12 lies 0.0001 below 16 on both seeds, far inside the note's own noise floor of "
        "0.01 on this sweep (line 3): its table cannot tell 12 from 8-32",
    )


def _flat_and_best_claims() -> list[Claim]:
    return [
        Claim(
            "lean.parcae_flat_6_to_32",
            STUDY.key,
            "section 固定轮数也有代价 and the table of lines 45-57",
            (44, 57),
            "parcae may be run at any of 6-32 loops: all within noise of its best (12)",
            Comparison.EQUIVALENT,
            Side.BELOW,
            Unit.LOSS,
            M144_1B,
            PARCAE_DEPTH,
            terms=tuple((("parcae", x), ("parcae", 12)) for x in (6, 8, 16, 24, 32)),
            points=PARCAE_SWEEP,
            quotes=(Quote("6"), Quote("32")),
            across_models=False,
        ),
        Claim(
            "lean.lean_best_at_4",
            STUDY.key,
            "table 推理时循环几轮，loss 是多少：两种配方对比",
            (44, 57),
            "lean, trained at a fixed 4 loops, is best at 4 and worse at every other count",
            Comparison.LOCATION,
            Side.ABOVE,
            Unit.LOSS,
            M144_1B,
            LEAN_DEPTH,
            terms=("lean", 4, (1, 2, 3, 6, 8, 12, 16, 24, 32)),
            points=LEAN_SWEEP,
            across_models=False,
        ),
        Claim(
            "lean.lean_8_loops_worse",
            STUDY.key,
            "table 推理时循环几轮，loss 是多少：两种配方对比",
            (44, 57),
            "lean at 8 loops is about 0.07 worse than at its trained 4",
            Comparison.DIFFERENCE,
            Side.ABOVE,
            Unit.LOSS,
            M144_1B,
            LEAN_DEPTH,
            terms=(("lean", 8), ("lean", 4)),
            points=LEAN_SWEEP,
            stated=(Quote("0.07"),),
            across_models=False,
        ),
    ]


def _fixed_depth_claims() -> list[Claim]:
    return [
        Claim(
            "lean.lean_1_loop_worse",
            STUDY.key,
            "table 推理时循环几轮，loss 是多少：两种配方对比",
            (44, 57),
            "lean at 1 loop is about 0.8 worse than at its trained 4",
            Comparison.DIFFERENCE,
            Side.ABOVE,
            Unit.LOSS,
            M144_1B,
            LEAN_DEPTH,
            terms=(("lean", 1), ("lean", 4)),
            points=LEAN_SWEEP,
            stated=(Quote("0.8"),),
            across_models=False,
        ),
        Claim(
            "lean.fixed4_best_at_4",
            STUDY.key,
            "section 固定轮数也有代价",
            (44, 44),
            "a model trained at a fixed 4 loops (fixed4) is best at 4 loops, worse with fewer or more",
            Comparison.LOCATION,
            Side.ABOVE,
            Unit.LOSS,
            M144_1B,
            _m("depth", "val_loss", ("fixed4", "fixed4"), at="loops 1-32"),
            terms=("fixed4", 4, (1, 2, 3, 6, 8, 12, 16, 24, 32)),
            quotes=(Quote("4"),),
            across_models=False,
            own_evidence="the note tabulates the depth sweep of lean only; fixed4's is not printed",
        ),
    ]


def _depth_claims() -> list[Claim]:
    return [*_parcae_depth_claims(), *_flat_and_best_claims(), *_fixed_depth_claims()]


def _update_claims() -> list[Claim]:
    where = ("table 每一轮让隐状态改变了多少", (35, 41))
    metric = _m("round_deltas", "rel_change", ("parcae", "parcae"), ("lean", "lean"), at="rounds 2-4")
    rows = {
        "parcae": ("0.37", "0.18", "0.09"),
        "lean": ("0.62", "0.56", "0.63"),
    }
    points = tuple(Point(s, r, Quote(t)) for s, texts in rows.items() for r, t in zip((2, 3, 4), texts))
    scale = Scale("", "20 亿 token", (), DEVICE, "one model per row")
    return [
        Claim(
            "lean.parcae_update_shrinks",
            STUDY.key,
            *where,
            "parcae's per-round change of the hidden state halves from round 2 to 4 (it converges)",
            Comparison.TREND,
            Side.BELOW,
            Unit.UPDATE,
            scale,
            metric,
            terms=("parcae", (2, 3, 4)),
            points=points,
            across_models=False,
            own_evidence="one model per row and no stated noise for the update size: no interval",
        ),
        Claim(
            "lean.lean_update_stays_large",
            STUDY.key,
            *where,
            "lean still rewrites its hidden state heavily at round 4, far more than parcae",
            Comparison.DIFFERENCE,
            Side.ABOVE,
            Unit.UPDATE,
            scale,
            metric,
            terms=(("lean", 4), ("parcae", 4)),
            points=points,
            own_evidence="one model per row and no stated noise for the update size: no interval",
        ),
    ]


def _equal_data_claims_a() -> list[Claim]:
    where = ("table of lines 25-33 (同样的训练数据)", (24, 34))
    metric = _m("runs", "eval_loss", ("lean", "lean"), ("parcae", "parcae"), note=EQUAL_DATA)
    p86 = _pairs(
        "lean", "parcae", (43, 44, 45), ("3.5319", "3.5201", "3.5232"), ("3.5502", "3.5475", "3.5537")
    )
    p144 = _pairs("lean", "parcae", (43, 44), ("3.2413", "3.2392"), ("3.2458", "3.2446"))
    p144_2b = _pairs("lean", "parcae", (43, 44), ("3.1024", "3.0981"), ("3.0937", "3.0927"))
    return [
        Claim(
            "lean.lean_beats_parcae_86m",
            STUDY.key,
            *where,
            "at 86 M / 0.5 B tokens lean (4 loops) beats parcae at its best loop count on all three seeds",
            Comparison.DIFFERENCE,
            Side.BELOW,
            Unit.LOSS,
            M86,
            metric,
            terms=(("lean", 4), ("parcae", 4)),
            points=p86,
            stated=(Quote("0.025"),),
            stated_sign=-1,
        ),
        Claim(
            "lean.lean_as_good_144m_1b",
            STUDY.key,
            *where,
            "at 144 M / 1 B tokens lean (4 loops) is as good as parcae at its best (12): no worse beyond noise",
            Comparison.NO_WORSE,
            Side.BELOW,
            Unit.LOSS,
            M144_1B,
            metric,
            terms=(("lean", 4), ("parcae", 4)),
            points=p144,
            stated=(Quote("0.005"),),
            stated_sign=-1,
        ),
        Claim(
            "lean.parcae_overtakes_144m_2b",
            STUDY.key,
            "table of lines 25-33 and the paragraph after the decode table",
            (32, 101),
            "at 144 M / 2 B tokens parcae at 12 loops beats lean by 0.005-0.009 on both seeds",
            Comparison.DIFFERENCE,
            Side.ABOVE,
            Unit.LOSS,
            M144_2B,
            metric,
            terms=(("lean", 4), ("parcae", 4)),
            points=p144_2b,
            stated=(Quote("0.005"), Quote("0.009")),
            own_evidence="two seeds whose differences (under 0.01) lie inside the note's own noise line",
        ),
    ]


def _equal_data_claims_b() -> list[Claim]:
    return [
        Claim(
            "lean.parcae4_worse_144m_2b",
            STUDY.key,
            "paragraph after the decode table",
            (101, 101),
            "at 144 M / 2 B tokens parcae run at 4 loops is 0.013-0.014 worse than lean",
            Comparison.DIFFERENCE,
            Side.ABOVE,
            Unit.LOSS,
            M144_2B,
            _m("depth", "val_loss", at="parcae at 4 loops minus lean at 4, per seed"),
            terms=(("parcae@4 − lean", 4),),
            # the printed range's two ends are the two seeds ("两个种子上都看得到")
            points=(
                Point("parcae@4 − lean", 4, Quote("0.013"), 43),
                Point("parcae@4 − lean", 4, Quote("0.014"), 44),
            ),
            stated=(Quote("0.013"), Quote("0.014")),
        ),
        Claim(
            "lean.fixed4_beats_parcae_86m",
            STUDY.key,
            "table of lines 25-33, column 固定 4 轮",
            (25, 29),
            "at 86 M / 0.5 B tokens fixed4 beats parcae at its best loop count",
            Comparison.DIFFERENCE,
            Side.BELOW,
            Unit.LOSS,
            M86,
            _m("runs", "eval_loss", ("fixed4", "fixed4"), ("parcae", "parcae"), note=EQUAL_DATA),
            terms=(("fixed4", 4), ("parcae", 4)),
            points=_pairs(
                "fixed4",
                "parcae",
                (43, 44, 45),
                ("3.5396", "3.5419", "3.5440"),
                ("3.5502", "3.5475", "3.5537"),
            ),
        ),
    ]


def _equal_data_claims() -> list[Claim]:
    return [*_equal_data_claims_a(), *_equal_data_claims_b()]


ABLATION_ROWS = {
    # variant in looplab: (loss as printed, change as printed)
    "fixed4": ("3.5396", "0"),
    "lean": ("3.5319", "−0.008"),
    "lean_all64": ("3.5317", "−0.008"),
    "lean_w256": ("3.5385", "−0.001"),
    "half_width": ("3.5684", "+0.029"),
    "mlp_only": ("3.5870", "+0.047"),
    "reuse_kv": ("3.5705", "+0.031"),
    "fixed2": ("3.5653", "+0.026"),
    "parcae": ("3.5502", "+0.011"),
    "plain": ("3.5540", "+0.014"),
}
ABLATION_TEXT = {
    "lean": "attending to the last 64 tokens in rounds 2-4 (lean) is no worse than full attention",
    "lean_all64": "attending to the last 64 tokens in all four rounds is no worse than full attention",
    "lean_w256": "attending to the last 256 tokens in rounds 2-4 is no worse than full attention",
    "half_width": "halving the width of rounds 2-4 is worse, by about 0.029",
    "mlp_only": "dropping attention in rounds 2-4 (MLP only) is worse, by about 0.047",
    "reuse_kv": "reusing round 1's KV in rounds 2-4 is worse, by about 0.031",
    "fixed2": "looping only 2 rounds is worse, by about 0.026",
    "parcae": "parcae is worse than fixed4 at equal data, by about 0.011",
    "plain": "a plain 6-layer transformer is worse than fixed4 at equal data, by about 0.014",
}


def _ablation_claims() -> list[Claim]:
    points = tuple(Point(v, 4, Quote(loss)) for v, (loss, _) in ABLATION_ROWS.items())
    out = []
    for variant, text in ABLATION_TEXT.items():
        change = ABLATION_ROWS[variant][1]
        no_worse = change.startswith("−")
        out.append(
            Claim(
                f"lean.ablation_{variant}",
                STUDY.key,
                "table 从循环块里削掉一部分计算，loss 怎么变",
                (59, 73),
                text,
                Comparison.NO_WORSE if no_worse else Comparison.DIFFERENCE,
                Side.BELOW if no_worse else Side.ABOVE,
                Unit.LOSS,
                M86_ONE,
                _m("runs", "eval_loss", (variant, variant), ("fixed4", "fixed4"), note=EQUAL_DATA),
                terms=((variant, 4), ("fixed4", 4)),
                points=points,
                stated=(Quote(change),),
            )
        )
    return out


def _controls() -> list[Claim]:
    return [
        Claim(
            "lean.all_rounds_grad_beats_6_loops",
            STUDY.key,
            "paragraph 两个对照实验 (first control)",
            (43, 43),
            "at equal training time, 4 loops all with gradients beat 6 loops whose first 3 get none, by 0.023",
            Comparison.DIFFERENCE,
            Side.ABOVE,
            Unit.LOSS,
            ONE_RUN,
            _m(
                "runs",
                "eval_loss",
                ("fixed6_grad3", "fixed6_grad3"),
                ("fixed4", "fixed4"),
                note="iso-time pair",
            ),
            terms=(("fixed6_grad3 − fixed4", "equal time"),),
            points=(Point("fixed6_grad3 − fixed4", "equal time", Quote("0.023")),),
            stated=(Quote("0.023"),),
        ),
        Claim(
            "lean.last1_grad_halves_gain",
            STUDY.key,
            "paragraph 两个对照实验 (second control)",
            (43, 43),
            "parcae with a gradient through the last round only gains less from looping: 1→8 loops 0.11, not 0.23",
            Comparison.DIFFERENCE,
            Side.BELOW,
            Unit.LOSS,
            ONE_RUN,
            _m("depth", "val_loss", at="parcae_last1's and parcae's gain L1 − L8"),
            terms=(("parcae_last1", "L1 − L8"), ("parcae", "L1 − L8")),
            points=(
                Point("parcae_last1", "L1 − L8", Quote("0.11")),
                Point("parcae", "L1 − L8", Quote("0.23")),
            ),
        ),
        Claim(
            "lean.fixed8_beats_parcae_86m",
            STUDY.key,
            "paragraph 看起来训练量越大",
            (102, 102),
            "on the smaller model a fixed 8 loops beats parcae by 0.034",
            Comparison.DIFFERENCE,
            Side.ABOVE,
            Unit.LOSS,
            Scale("", "", (), DEVICE, "the smaller model (8650 万参数); tokens not stated"),
            _m("runs", "eval_loss", ("parcae", "parcae"), ("fixed8", "fixed8"), note=EQUAL_DATA),
            terms=(("parcae − fixed8", 8),),
            points=(Point("parcae − fixed8", 8, Quote("0.034")),),
            stated=(Quote("0.034"),),
            quotes=(Quote("8"),),
        ),
        Claim(
            "lean.far_copy_tokens_worse",
            STUDY.key,
            "paragraph 这个算力节省也不是免费的",
            (75, 75),
            "lean is worse than parcae by about 0.02 on tokens that copy from over 500 tokens back (about 3 %)",
            Comparison.DIFFERENCE,
            Side.ABOVE,
            Unit.LOSS,
            ONE_RUN,
            _m(
                "depth",
                "far_copy_loss",
                ("lean", "lean"),
                ("parcae", "parcae"),
                at="loops 4 and parcae's best",
            ),
            terms=(("lean − parcae on far copies", "far copy"),),
            points=(Point("lean − parcae on far copies", "far copy", Quote("0.02")),),
            stated=(Quote("0.02"),),
            quotes=(Quote("500"), Quote("3%")),
        ),
    ]


CLAIMS: tuple[Claim, ...] = (
    *_depth_claims(),
    *_update_claims(),
    *_equal_data_claims(),
    *_ablation_claims(),
    *_controls(),
)
