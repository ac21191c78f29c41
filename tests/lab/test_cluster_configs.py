"""`looplab cluster-config`: the Ray cluster-launcher YAML checked against Ray's own published schema (it
ships with Ray), the KubeRay RayCluster manifest against the fields its documentation requires; both from
the settings `looplab slurm` takes, neither holding the database password; bad input refused by option.
The manifest is also read by Ray's own KubeRay autoscaler code, which must find the groups we meant."""

from __future__ import annotations

import dataclasses
import re

import pytest
import yaml

from looplab.lab.cli import main
from looplab.lab.cluster_configs import (
    ClusterSettings,
    kuberay_as_ray_reads_it,
    validate_kuberay,
    validate_ray,
)
from tests.lab.test_slurm import PG, grid_file


def config(tmp_path, *args, db=PG, grids=None):
    out = tmp_path / "out.yaml"
    argv = [
        "--db",
        db,
        "cluster-config",
        grids or grid_file(tmp_path),
        "--artifacts",
        "/shared/art",
        "-o",
        str(out),
    ]
    assert main([*argv, *args]) == 0
    text = out.read_text()
    assert "secret@" not in text and ":secret" not in text  # the database password is in no file
    return text, yaml.safe_load(text)


def test_the_launcher_yaml_passes_rays_own_schema_and_starts_every_machine(tmp_path, capsys):
    grids = grid_file(tmp_path, resources={"num_cpus": 2, "num_gpus": 1})
    args = ("--target", "ray", "--head-ip", "10.0.0.1", "--worker-ips", "10.0.0.2, 10.0.0.3")
    text, cfg = config(tmp_path, *args, grids=grids)
    validate_ray(cfg)
    assert cfg["provider"] == {"type": "local", "head_ip": "10.0.0.1", "worker_ips": ["10.0.0.2", "10.0.0.3"]}
    assert cfg["max_workers"] == 2 and cfg["auth"] == {"ssh_user": "looplab"}
    assert (
        "--num-gpus=1" in cfg["head_start_ray_commands"][1]
        and "--num-cpus=2" in cfg["worker_start_ray_commands"][1]
    )
    assert "$RAY_HEAD_IP:6379" in cfg["worker_start_ray_commands"][1]
    printed = capsys.readouterr().out
    assert (
        "ray exec" in printed
        and "looplab run --address auto --artifacts /shared/art --until-empty" in printed
    )
    from jsonschema import ValidationError

    with pytest.raises(ValidationError, match="'soon' is not of type 'number'"):  # the schema is read
        validate_ray({**cfg, "idle_timeout_minutes": "soon"})
    with pytest.raises(ValidationError, match="Additional properties are not allowed"):
        validate_ray({**cfg, "head_commands": []})


def test_the_raycluster_manifest_has_every_field_kuberay_requires(tmp_path):
    grids = grid_file(tmp_path, resources={"num_cpus": 2, "num_gpus": 1})
    args = ("--target", "kuberay", "--image", "lab/looplab:1", "--workers", "3")
    text, manifest = config(tmp_path, *args, grids=grids)
    validate_kuberay(manifest)
    assert (manifest["apiVersion"], manifest["kind"]) == ("ray.io/v1", "RayCluster")
    (group,) = manifest["spec"]["workerGroupSpecs"]
    assert group["replicas"] == group["minReplicas"] == group["maxReplicas"] == 3
    (worker,) = group["template"]["spec"]["containers"]
    assert worker["resources"]["limits"]["nvidia.com/gpu"] == "1" and worker["image"] == "lab/looplab:1"
    assert worker["volumeMounts"] == [{"name": "artifacts", "mountPath": "/shared/art"}]
    env = {e["name"]: e for e in worker["env"]}
    assert env["LOOPLAB_DB"]["valueFrom"]["secretKeyRef"] == {"name": "looplab-db", "key": "url"}
    for bad, says in (
        ({**manifest, "kind": "Pod"}, "kind RayCluster"),
        ({**manifest, "spec": {"workerGroupSpecs": []}}, "spec.headGroupSpec is missing"),
    ):
        with pytest.raises(ValueError, match=says):
            validate_kuberay(bad)
    asked = ClusterSettings("s", tmp_path, "", tmp_path, workers=3, cpus_per_node=2, gpus_per_node=1)
    derived = kuberay_as_ray_reads_it(manifest, asked)  # Ray's own reading of a RayCluster
    assert derived["available_node_types"]["workers"]["resources"]["GPU"] == 1
    assert derived["available_node_types"]["workers"]["min_workers"] == 3
    for changed, says in (
        (
            {"gpus_per_node": 2},
            "Ray reads group 'headgroup' as {'CPU': 2, 'GPU': 1}, not {'CPU': 2, 'GPU': 2}",
        ),
        ({"workers": 4}, "Ray reads 3 worker\\(s\\), not 4"),
    ):
        with pytest.raises(ValueError, match=re.escape(says) if "{" in says else says):
            kuberay_as_ray_reads_it(manifest, dataclasses.replace(asked, **changed))
    group["rayStartParams"]["num-cpus"] = "two"  # a value Ray cannot read is refused by Ray's own code
    with pytest.raises(ValueError, match="invalid literal for int.*'two'"):
        kuberay_as_ray_reads_it(manifest, asked)
    group["replicas"] = -1
    with pytest.raises(ValueError, match=r"workerGroupSpecs\[0\].replicas must be >= 0"):
        validate_kuberay(manifest)


@pytest.mark.parametrize(
    ("args", "db", "says"),
    [
        (("--target", "slurm"), PG, "--target: .*accepted"),
        (("--target", "ray"), "sqlite:////tmp/x.db", "--db: a SQLite file"),
        (("--target", "ray"), PG, "--head-ip: the head machine's address is required"),
        (("--target", "kuberay"), PG, "--image: a container image"),
        (("--target", "kuberay", "--image", "i", "--workers", "-1"), PG, "--workers: must be >= 0"),
        (
            ("--target", "kuberay", "--image", "i", "--gpus-per-node", "0"),
            PG,
            "--gpus-per-node: 0, but a job",
        ),
    ],
)
def test_bad_input_is_refused_naming_the_option(tmp_path, capsys, args, db, says):
    grids = grid_file(tmp_path, resources={"num_gpus": 1})
    out = ["-o", str(tmp_path / "out.yaml")]
    assert main(["--db", db, "cluster-config", grids, "--artifacts", "/shared/art", *out, *args]) == 2
    assert re.search(says, capsys.readouterr().err)
    argv = ["--db", PG, "cluster-config", grids, "--artifacts", "rel", "--target", "ray", "--head-ip", "h"]
    assert main([*argv, *out]) == 2
    assert "--artifacts: 'rel' must be an absolute path" in capsys.readouterr().err
    assert not (tmp_path / "out.yaml").exists()  # nothing written
