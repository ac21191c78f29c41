"""The numbers of looplab: pure functions of DataFrames, below everything that reads them.

The command line (`looplab fit`), the demo's tables, reports and the dashboard's pages all compute
with these functions, so they live under those callers rather than inside one of them: this package
imports pandas, numpy, scipy and `model` (its field checks and `ConfigError`) and nothing else: no
database, no Streamlit, no orchestrator. The frames come from `orchestrator.frames`; whatever needs a
job state is given already-filtered rows (job states are `orchestrator/states.py`'s).

- `variants`: which rows are seeds of one configuration, missing values, the architecture columns;
- `comparison`: variants against a reference at equal data, compute and time; decode and throughput;
- `curves`: depth curves, loop geometry per round, training curves, loss against wall time;
- `stats`: noise floor, intervals, verdicts, seeds needed, the L(D) exchange rate;
- `scaling`, `iso_depth`: the iso-depth scaling law, its fit and what it answers;
- `extrapolation`, `tasks`, `timing`: depth extrapolation, task accuracy, contended timings.
"""
