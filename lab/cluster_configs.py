"""`looplab cluster-config`: the two other places labs run a study, from the settings `looplab slurm` takes.

- `--target ray`: a Ray cluster-launcher YAML for an on-premises cluster (`provider: local`: a head and
  worker machines by address, reached over ssh), for `ray up`; the study's driver then runs on the head
  with `ray exec` (the command is the YAML's first comment and printed).
- `--target kuberay`: a KubeRay `RayCluster` manifest (apiVersion ray.io/v1), for `kubectl apply`: a head
  and one worker group of `--workers` pods, each mounting the shared artifact volume (a
  PersistentVolumeClaim, ReadWriteMany) at `--artifacts`, the database URL read from a Kubernetes secret
  (never written into the manifest); the driver runs in the head pod (`kubectl exec`, printed).

The same rules as on SLURM, refused naming the option: the database must be PostgreSQL (`--db`: each
machine's driver or worker reaches it), the artifact directory an absolute path, the same on every
machine (`--artifacts`), GPUs per node at least what a job of the grid asks (`--gpus-per-node`).

Checked as far as this machine allows: the launcher YAML against Ray's own published schema
(`ray/autoscaler/ray-schema.json`, which the installed Ray ships: `validate_ray`); the manifest against
the fields KubeRay's RayCluster requires as its documentation states them (`validate_kuberay`: our reading
of the CRD, not the CRD itself, which no registry this machine reaches ships), then as Ray's own KubeRay
autoscaler reads a RayCluster (`kuberay_as_ray_reads_it`: the CPUs, GPUs and workers of each group as Ray
derives them from the manifest, that derived config through Ray's schema). Neither is run against a real
cluster here.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
from pathlib import Path
from typing import Any

import yaml

from looplab.lab.slurm import grid_needs, refuse_db
from looplab.model import fields
from looplab.model.errors import ConfigError

TARGETS = ("ray", "kuberay")
SECRET_KEY = "url"  # the key of the database URL in the Kubernetes secret `--db-secret`


@dataclasses.dataclass(frozen=True)
class ClusterSettings:
    """What either file needs; every field checked by `settings`."""

    name: str
    grids: Path
    db: str
    artifacts: Path
    workers: int
    cpus_per_node: int
    gpus_per_node: int
    head_ip: str | None = None
    worker_ips: tuple[str, ...] = ()
    ssh_user: str | None = None
    image: str | None = None
    db_secret: str = "looplab-db"
    volume_claim: str = "looplab-artifacts"
    ray_port: int = 6379


def settings(args, grids: list) -> ClusterSettings:
    """The options checked against the grids and the target; each refusal names its option."""
    target = fields.choice("--target", args.target, TARGETS)
    db = refuse_db(args.db)
    gpus, cpus, _ = grid_needs(grids)
    gpn = gpus if args.gpus_per_node is None else fields.integer("--gpus-per-node", args.gpus_per_node, lo=0)
    if gpus and gpn < gpus:
        raise ConfigError(
            f"--gpus-per-node: {gpn}, but a job of the grid asks for {gpus} GPU(s); give {gpus} or more"
        )
    cpn = cpus if args.cpus_per_node is None else fields.integer("--cpus-per-node", args.cpus_per_node, lo=1)
    if cpn < cpus:
        raise ConfigError(
            f"--cpus-per-node: {cpn}, but a job of the grid asks for {cpus} CPUs; give {cpus} or more"
        )
    artifacts = Path(args.artifacts)
    if not artifacts.is_absolute():
        raise ConfigError(
            f"--artifacts: {args.artifacts!r} must be an absolute path, the same on every machine"
        )
    name = re.sub(r"[^a-z0-9-]", "-", (args.name or Path(args.grids).stem).lower()).strip("-") or "study"
    extra: dict[str, Any] = {}
    if target == "ray":
        if not args.head_ip:
            raise ConfigError("--head-ip: the head machine's address is required for --target ray")
        ips = tuple(ip.strip() for ip in (args.worker_ips or "").split(",") if ip.strip())
        extra = {"head_ip": args.head_ip, "worker_ips": ips, "ssh_user": args.ssh_user or "looplab"}
        workers = len(ips)
    else:
        if not args.image:
            raise ConfigError(
                "--image: a container image with looplab installed is required for --target kuberay"
            )
        extra = {"image": args.image, "db_secret": args.db_secret, "volume_claim": args.volume_claim}
        workers = fields.integer("--workers", args.workers, lo=0)
    return ClusterSettings(
        name=name,
        grids=Path(args.grids),
        db=db,
        artifacts=artifacts,
        workers=workers,
        cpus_per_node=cpn,
        gpus_per_node=gpn,
        **extra,
    )


def driver_command(s: ClusterSettings) -> str:
    """What runs the study on the head: submit the grids (idempotent), then the queue until it is empty;
    the database from $LOOPLAB_DB (set on the head, or from the secret), so no file holds its password."""
    grids = shlex.quote(f"{s.artifacts}/{s.grids.name}")
    art = shlex.quote(str(s.artifacts))
    return f"looplab submit {grids} && looplab run --address auto --artifacts {art} --until-empty"


def ray_launcher(s: ClusterSettings) -> dict[str, Any]:
    """The cluster-launcher config of an on-premises cluster: the head and the workers by address; every
    machine must already have looplab installed and see the shared artifact directory at the same path."""
    start = f"ray start --address=$RAY_HEAD_IP:{s.ray_port} --num-cpus={s.cpus_per_node} --num-gpus={s.gpus_per_node}"
    return {
        "cluster_name": f"looplab-{s.name}",
        "provider": {"type": "local", "head_ip": s.head_ip, "worker_ips": list(s.worker_ips)},
        "auth": {"ssh_user": s.ssh_user},
        "max_workers": len(s.worker_ips),
        "upscaling_speed": 1.0,
        "idle_timeout_minutes": 5,
        "file_mounts": {},
        # the grid file goes to the shared directory, where the driver's submit reads it
        "initialization_commands": [],
        "setup_commands": [
            f"test -d {shlex.quote(str(s.artifacts))} && test -w {shlex.quote(str(s.artifacts))}"
        ],
        "head_setup_commands": [],
        "worker_setup_commands": [],
        "head_start_ray_commands": [
            "ray stop",
            f"ray start --head --port={s.ray_port} --num-cpus={s.cpus_per_node} --num-gpus={s.gpus_per_node} "
            "--autoscaling-config=~/ray_bootstrap_config.yaml",
        ],
        "worker_start_ray_commands": ["ray stop", start],
    }


def kuberay(s: ClusterSettings) -> dict[str, Any]:
    """A RayCluster of a head and one worker group, each pod mounting the artifact claim at the same path,
    the database URL from the secret `db_secret` as $LOOPLAB_DB (which every looplab command reads)."""
    resources = {"cpu": str(s.cpus_per_node), "memory": "16Gi"}
    if s.gpus_per_node:
        resources["nvidia.com/gpu"] = str(s.gpus_per_node)

    def pod(container: str) -> dict[str, Any]:
        return {
            "spec": {
                "containers": [
                    {
                        "name": container,
                        "image": s.image,
                        "env": [
                            {
                                "name": "LOOPLAB_DB",
                                "valueFrom": {"secretKeyRef": {"name": s.db_secret, "key": SECRET_KEY}},
                            }
                        ],
                        "resources": {"limits": dict(resources), "requests": dict(resources)},
                        "volumeMounts": [{"name": "artifacts", "mountPath": str(s.artifacts)}],
                    }
                ],
                "volumes": [{"name": "artifacts", "persistentVolumeClaim": {"claimName": s.volume_claim}}],
            }
        }

    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": f"looplab-{s.name}"},
        "spec": {
            "headGroupSpec": {
                "rayStartParams": {"num-cpus": str(s.cpus_per_node), "num-gpus": str(s.gpus_per_node)},
                "template": pod("ray-head"),
            },
            "workerGroupSpecs": [
                {
                    "groupName": "workers",
                    "replicas": s.workers,
                    "minReplicas": s.workers,
                    "maxReplicas": s.workers,
                    "rayStartParams": {"num-cpus": str(s.cpus_per_node), "num-gpus": str(s.gpus_per_node)},
                    "template": pod("ray-worker"),
                }
            ],
        },
    }


def validate_ray(config: dict[str, Any]) -> None:
    """As `ray up` reads it: the provider's defaults filled in (`prepare_config`), then Ray's published
    cluster-launcher schema (ray/autoscaler/ray-schema.json, shipped with Ray: `validate_config`)."""
    from ray.autoscaler._private.util import prepare_config, validate_config

    validate_config(prepare_config(config))


def validate_kuberay(manifest: dict[str, Any]) -> None:
    """The fields KubeRay's RayCluster requires, as its documentation states them; ValueError naming the
    first one missing or of the wrong kind."""

    def need(obj: Any, path: str, kind: type) -> Any:
        value = obj
        for key in path.split("."):
            if not isinstance(value, dict) or key not in value:
                raise ValueError(f"RayCluster: {path} is missing")
            value = value[key]
        if not isinstance(value, kind):
            raise ValueError(f"RayCluster: {path} must be a {kind.__name__}, got {type(value).__name__}")
        return value

    if need(manifest, "apiVersion", str) != "ray.io/v1" or need(manifest, "kind", str) != "RayCluster":
        raise ValueError("RayCluster: apiVersion ray.io/v1 and kind RayCluster expected")
    need(manifest, "metadata.name", str)
    groups = [("headGroupSpec", need(manifest, "spec.headGroupSpec", dict))]
    for i, group in enumerate(need(manifest, "spec.workerGroupSpecs", list)):
        need(group, "groupName", str)
        for key in ("replicas", "minReplicas", "maxReplicas"):
            if need(group, key, int) < 0:
                raise ValueError(f"RayCluster: workerGroupSpecs[{i}].{key} must be >= 0")
        groups.append((f"workerGroupSpecs[{i}]", group))
    for where, group in groups:
        params = need(group, "rayStartParams", dict)
        if not all(isinstance(v, str) for v in params.values()):
            raise ValueError(f"RayCluster: {where}.rayStartParams values must be strings")
        for c in need(group, "template.spec.containers", list):
            need(c, "name", str)
            need(c, "image", str)


def kuberay_as_ray_reads_it(manifest: dict[str, Any], s: ClusterSettings) -> dict[str, Any]:
    """The manifest read by the installed Ray's KubeRay autoscaler (the code that turns a RayCluster into
    Ray's own node types, then checks them against Ray's schema); ValueError if a group's CPUs, GPUs or
    worker count as Ray reads them are not what `s` asked for. The operator fills in the namespace of a
    stored RayCluster; here it is "default"."""
    from ray.autoscaler._private.kuberay.autoscaling_config import _derive_autoscaling_config_from_ray_cr

    stored = {**manifest, "metadata": {"namespace": "default", **manifest["metadata"]}}
    derived = _derive_autoscaling_config_from_ray_cr(stored)
    want = {"CPU": s.cpus_per_node, **({"GPU": s.gpus_per_node} if s.gpus_per_node else {})}
    for name, node in derived["available_node_types"].items():
        got = {k: node["resources"].get(k) for k in want}
        if got != want:
            raise ValueError(f"RayCluster: Ray reads group {name!r} as {got}, not {want}")
    if derived["max_workers"] != s.workers:
        raise ValueError(f"RayCluster: Ray reads {derived['max_workers']} worker(s), not {s.workers}")
    return derived


def default_name(target: str, s: ClusterSettings) -> str:
    return f"{s.name}-{'cluster' if target == 'ray' else 'raycluster'}.yaml"


def render(target: str, s: ClusterSettings, filename: str | None = None) -> str:
    """The file's text: a comment saying how to use it (as `filename`), then the YAML."""
    filename = filename or default_name(target, s)
    if target == "ray":
        config = ray_launcher(s)
        validate_ray(config)
        how = [
            f"ray up {filename}   # starts the head and the workers over ssh",
            f"copy {s.grids.name} into {s.artifacts}/, then:",
            f'ray exec {filename} "export LOOPLAB_DB=...; {driver_command(s)}"',
        ]
    else:
        config = kuberay(s)
        validate_kuberay(config)
        kuberay_as_ray_reads_it(config, s)
        how = [
            f"kubectl create secret generic {s.db_secret} --from-literal={SECRET_KEY}=postgresql+psycopg://...",
            f"kubectl apply -f {filename}; copy {s.grids.name} into the claim {s.volume_claim}, then:",
            f"kubectl exec -it HEAD_POD -- sh -c '{driver_command(s)}'",
        ]
    head = [
        f"# looplab study {s.name!r} ({target}): generated by `looplab cluster-config`",
        *(f"#   {h}" for h in how),
    ]
    return "\n".join(head) + "\n" + yaml.safe_dump(config, sort_keys=False)


def cli_cluster_config(args) -> int:
    from looplab.lab.commands import beside_grid_file, load_grids

    with beside_grid_file(args.grids):
        grids = load_grids(args.grids)
    s = settings(args, grids)
    target = args.target
    out = Path(args.output or default_name(target, s))
    text = render(target, s, out.name)
    out.write_text(text)
    print(f"looplab cluster-config: wrote {out.absolute()} ({target}; {s.workers} worker(s))")
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        print(line[1:].strip())
    return 0
