"""The adaptive job (`job`): per-token exit rules scored for loss, compute and decode latency;
`decode` times them, `family` and `routed` adapt families that route tokens themselves.
`python -m looplab.workers.adaptive` runs it standalone."""
