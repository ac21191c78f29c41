"""looplab's lab: what a researcher does with the queue. The interfaces (the `looplab` command line,
the Python API `Queue`, the terminal display) and the lab's tools (the planner, study grids and demos,
reports, exports, the scaling-law fit). It sits above the queue (`orchestrator/`) and imports it; the
queue never imports the lab (but for `from orchestrator import Queue`, kept for users' scripts).
"""
