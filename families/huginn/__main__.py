"""`python -m looplab.families.huginn`: the published Huginn-0125 configuration's parameters and training FLOPs
per token at the recurrence counts the planner prices (4, 8, 16, 32, 64), counted on the meta device
(nothing is allocated); the configuration's source is `families.huginn.config`'s docstring."""

from __future__ import annotations

from looplab.families.huginn import published_counts


def main() -> None:
    counts = published_counts()
    print("Huginn-0125, published configuration (families.huginn.PUBLISHED)")
    for key in ("params", "params_once", "params_recurrent", "params_embedding"):
        print(f"  {key:<18} {counts[key]:>15,}")
    print("  recurrences   training GFLOP per token (4,096-token context)")
    for n, flops in counts["flops_per_token"].items():
        print(f"  {n:>11}   {flops / 1e9:.1f}")


if __name__ == "__main__":
    main()
