"""The sbatch script `looplab slurm` writes (lab/slurm.py says what each allocation does and why).

Written for a person to read, edit and resubmit: the settings are variables at its top, each step
says what it does, and nothing in it needs looplab to be read."""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

q = shlex.quote


@dataclass(frozen=True)
class SlurmSettings:
    """What one sbatch script of a study needs; every field checked by `lab.slurm.settings`."""

    name: str
    grids: Path
    db: str
    artifacts: Path
    time_minutes: int
    nodes: str
    cpus_per_task: int
    gpus_per_node: int
    signal_before_s: int
    script: Path
    partition: str | None = None
    account: str | None = None
    ray_port: int = 6379
    head_wait_s: int = 300
    python: str = sys.executable

    @property
    def ray(self) -> str:
        return str(Path(self.python).parent / "ray")


def directives(s: SlurmSettings) -> list[str]:
    lines = [
        f"#SBATCH --job-name=looplab-{s.name}",
        f"#SBATCH --nodes={s.nodes}",
        "#SBATCH --ntasks-per-node=1",
        f"#SBATCH --cpus-per-task={s.cpus_per_task}",
        f"#SBATCH --time={s.time_minutes}",
        f"#SBATCH --signal=B:USR1@{s.signal_before_s}",
        "#SBATCH --no-requeue",
        f"#SBATCH --output={s.artifacts}/slurm/%x-%j.out",
    ]
    if s.gpus_per_node:
        lines.insert(4, f"#SBATCH --gpus-per-node={s.gpus_per_node}")
    lines += [f"#SBATCH --partition={s.partition}"] if s.partition else []
    lines += [f"#SBATCH --account={s.account}"] if s.account else []
    return lines


def render(s: SlurmSettings) -> str:
    """The whole script: its settings, then the allocation's steps in order."""
    return _settings(s) + _shared_and_ray(s) + _driver()


def _settings(s: SlurmSettings) -> str:
    head = "\n".join(directives(s))
    return f"""#!/bin/bash
# looplab study "{s.name}" on SLURM, written by `looplab slurm`. Edit it freely; submit with
#   sbatch {q(str(s.script))}
# Each allocation runs the queue until SLURM's warning (USR1, {s.signal_before_s} s before the time
# limit) or a preemption (TERM): then every running job checkpoints and is handed back, and this script
# submits its own follow-on (afterany), whose driver resumes every job from its checkpoint. The chain
# ends when the queue is empty. No SLURM requeue: the follow-on is submitted only when work is left.
{head}

set -uo pipefail

DB={q(s.db)}
ARTIFACTS={q(str(s.artifacts))}   # the same path on every node (checked below)
GRIDS={q(str(s.grids))}
SCRIPT={q(str(s.script))}   # this file, on a path the first node reads (for the follow-on)
LOOPLAB=({q(s.python)} -m looplab)
RAY={q(s.ray)}
RAY_PORT={s.ray_port}
HEAD_WAIT_S={s.head_wait_s}   # how long a worker node polls the head's address before it gives up

say() {{ echo "$(date +%H:%M:%S) [$SLURM_JOB_ID $(hostname)] $*"; }}
RELEASED=   # USR1 or TERM once SLURM has said the allocation ends (step 3 hands the queue back)
release() {{ [ -n "$RELEASED" ] || say "SIG$1: releasing the queue"; RELEASED=$1; }}
trap 'release USR1' USR1
trap 'release TERM' TERM
mapfile -t NODES < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
HEAD_ADDR=$(hostname -I | awk '{{print $1}}')   # this script runs on the allocation's first node
say "allocation of ${{#NODES[@]}} node(s): ${{NODES[*]}}; head $HEAD_ADDR"

"""


def _shared_and_ray(s: SlurmSettings) -> str:
    return f"""# 1. The artifact directory must be one directory on every node: checkpoints written on one node are
#    resumed on another. A file written here must be read back, word for word, on every node.
mkdir -p "$ARTIFACTS/slurm"
PROBE="$ARTIFACTS/slurm/.probe-$SLURM_JOB_ID"
TOKEN="$SLURM_JOB_ID-$RANDOM$RANDOM"
echo "$TOKEN" > "$PROBE"
SEEN=$(srun --nodes=${{#NODES[@]}} --ntasks=${{#NODES[@]}} --ntasks-per-node=1 --overlap cat "$PROBE" 2>/dev/null | grep -cx "$TOKEN")
rm -f "$PROBE"
if [ "$SEEN" -ne "${{#NODES[@]}}" ]; then
  say "error: $ARTIFACTS is not the same directory on every node ($SEEN of ${{#NODES[@]}} read the probe): nothing started"
  exit 1
fi
say "shared artifact directory $ARTIFACTS seen by all ${{#NODES[@]}} node(s)"

# 2. Ray: the head here; every other node polls the head's address (at most HEAD_WAIT_S s), then joins.
#    A Ray node whose start fails (a loaded machine can time it out) is started again, up to 3 times.
ray_head() {{
  "$RAY" start --block --head --port="$RAY_PORT" --node-ip-address="$HEAD_ADDR" --include-dashboard=false \\
    --num-cpus="$SLURM_CPUS_PER_TASK" --num-gpus={s.gpus_per_node} --disable-usage-stats &
  RAY_HEAD=$!
}}
ray_head
RAY_WORKERS=
READY="$ARTIFACTS/slurm/.ready-$SLURM_JOB_ID"   # a file per worker node that joined
mkdir -p "$READY"
export HEAD_ADDR RAY_PORT HEAD_WAIT_S RAY READY GPUS={s.gpus_per_node}   # for the worker nodes' step
if [ "${{#NODES[@]}}" -gt 1 ]; then
  srun --nodes=$((${{#NODES[@]}} - 1)) --ntasks=$((${{#NODES[@]}} - 1)) --ntasks-per-node=1 --overlap \\
    --exclude="${{NODES[0]}}" --kill-on-bad-exit=0 bash -c '
    set -o pipefail; tries=0
    for i in $(seq 1 "$HEAD_WAIT_S"); do
      if (exec 3<>"/dev/tcp/$HEAD_ADDR/$RAY_PORT") 2>/dev/null; then
        "$RAY" start --block --address="$HEAD_ADDR:$RAY_PORT" --node-ip-address="$(hostname -I | awk "{{print \\$1}}")" \\
          --num-cpus="$SLURM_CPUS_PER_TASK" --num-gpus="$GPUS" --disable-usage-stats 2>&1 |
          while IFS= read -r line; do   # joined: say so to the first node (a file in READY)
            echo "$line"; case "$line" in *"Ray runtime started"*) touch "$READY/$(hostname)";; esac
          done && exit 0
        tries=$((tries + 1)); [ "$tries" -ge 3 ] && exit 1
        echo "$(hostname): ray start failed; trying again" >&2
      fi
      sleep 1
    done
    echo "$(hostname): the Ray head $HEAD_ADDR:$RAY_PORT did not answer in $HEAD_WAIT_S s" >&2; exit 1' &
  RAY_WORKERS=$!
fi
"${{LOOPLAB[@]}}" --db "$DB" submit "$GRIDS"   # while Ray starts: the grids (adds nothing once in)
TRIES=1
for i in $(seq 1 "$HEAD_WAIT_S"); do   # the driver needs the head up too
  (exec 3<>"/dev/tcp/$HEAD_ADDR/$RAY_PORT") 2>/dev/null && break
  if ! kill -0 "$RAY_HEAD" 2>/dev/null && [ "$TRIES" -lt 3 ]; then
    TRIES=$((TRIES + 1)); say "the Ray head did not start; trying again"; ray_head
  fi
  sleep 1
done
for i in $(seq 1 "$HEAD_WAIT_S"); do   # the driver books the Ray it finds when it starts: all nodes first
  [ "$(ls "$READY" | wc -l)" -ge $((${{#NODES[@]}} - 1)) ] && break
  sleep 1
done
say "Ray: the head and $(ls "$READY" | wc -l) of $((${{#NODES[@]}} - 1)) other node(s) joined"

"""


def _driver() -> str:
    return """# 3. The driver runs the queue. USR1 (the time limit's warning) or TERM (a preemption) releases it:
#    every running job checkpoints and goes back to the queue.
# The driver starts with USR1 and TERM ignored (so one that comes while it imports cannot end it) and
# takes them once it is up; a released driver is sent the signal again every 2 s until it has stopped.
(trap '' USR1 TERM; exec "${LOOPLAB[@]}" --db "$DB" run --address "$HEAD_ADDR:$RAY_PORT" \\
  --artifacts "$ARTIFACTS" --until-empty --release-on USR1,TERM) &
DRIVER=$!
RC=
until [ -n "$RC" ]; do
  if [ -n "$RELEASED" ]; then
    kill -"$RELEASED" "$DRIVER" 2>/dev/null; sleep 2
    kill -0 "$DRIVER" 2>/dev/null || { wait "$DRIVER"; RC=$?; }
  else
    wait "$DRIVER"; STATUS=$?   # a trapped signal ends the wait early: the driver still runs
    kill -0 "$DRIVER" 2>/dev/null || RC=$STATUS
  fi
done
say "driver exited with $RC"

# 4. Handed back with work left: the follow-on allocation takes the queue over.
if [ -n "$RELEASED" ] && [ "$RC" -eq 0 ]; then
  sbatch --dependency=afterany:"$SLURM_JOB_ID" "$SCRIPT" && say "follow-on submitted"
fi
kill "$RAY_HEAD" $RAY_WORKERS 2>/dev/null
wait
rm -rf "$READY"
say "done"
exit "$RC"
"""
