"""The train job (`job`: Spec, run, cost) and what only training uses: the loop (`trainer`), its
state and checkpoints, the learning-rate schedule, optimizers, batching, rewinds and the data-parallel
gang (`distributed`). `python -m looplab.workers.train` runs `cli`."""
