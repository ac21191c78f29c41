"""The import job: a published checkpoint (or a looplab export) brought in as a run without training.

    Grid("published", job="import", base={"source": "hf:SandyResearch/parcae-140m"},
         then=["depth_sweep", "eval", "decode_bench"])

Its artifact dir ends up as a train job's does for its follow-ups: `final.pt` (a looplab checkpoint:
the mapped weights, the ModelConfig, a spec whose `data` names the validation corpus and the model's
own tokenizer.json) and that `tokenizer.json`. So the depth sweep, the eval job and lm-evaluation-harness
read it as they read a trained run, and the depth sweep's bits per byte are on the same validation
documents as a trained run's (the corpus' val split by document id, workers/data/corpus.py), re-tokenized
with the model's tokenizer: the number that compares across tokenizers (its loss per token does not).

Validation resolves the source (workers/hub.py): it reads config.json (from the hub when online, its
cache otherwise, or the directory) and fills in what the job is: `revision` (the hub commit, or sha256
of the directory's config and weights) and the model as `recipe` + `size` + `model` overrides (the
mapped ModelConfig; a decode bench of the import benchmarks that architecture). A bad source is refused
at submission, naming the problem. The job then fetches the weights of exactly that revision (a local
directory whose files changed since is refused), loads them (weights_only / safetensors) and checks
them tensor by tensor.

Standalone: `python -m looplab.workers.importer --source hf:SandyResearch/parcae-140m --out runs/parcae-140m`.
"""

from __future__ import annotations

import dataclasses
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from looplab.model import fields
from looplab.model.errors import ConfigError
from looplab.model.names import BUILTIN_FAMILY
from looplab.workers import hub
from looplab.workers.identity import spec_to_dict
from looplab.workers.model_fields import family_fields
from looplab.workers.spec_cli import SpecParser, job_parser, run_standalone

RECIPE = "parcae"  # the recipe a Parcae checkpoint is expressed in (every field it sets is a model override)
RESOLVED = ("revision", "recipe", "size", "model", "family", "family_config")  # filled in from the source


@dataclass(frozen=True)
class Spec:
    source: str | None = None
    """hf:ORG/NAME[@REVISION] or a local model directory (config.json, weights, tokenizer)"""
    tokenizer: str | None = None
    """its tokenizer when the source has none: a tokenizer.json, a directory holding one, or hf:ORG/NAME"""
    corpus: str = "offline"
    """the validation text of its follow-ups: this corpus' val documents, re-tokenized with its tokenizer"""
    revision: str | None = None
    """the hub commit, or sha256: of the directory's config and weights (filled in from the source)"""
    recipe: str | None = None
    """the looplab recipe its model is expressed in (filled in from the source)"""
    size: str | None = None
    """the looplab size its model is expressed in (filled in from the source)"""
    model: dict[str, Any] = field(default_factory=dict)
    """its ModelConfig as overrides of recipe x size (filled in from the source)"""
    family: str = BUILTIN_FAMILY
    """its model family: looped, or another family's published layout (filled in from the source)"""
    family_config: dict[str, Any] = field(default_factory=dict)
    """that family's own config (filled in from the source)"""

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Spec:
        from looplab.workers.data.shards import DataSpec

        d = fields.with_defaults("import", d, cls)
        if d["source"] is None:
            raise ConfigError("source: missing; give hf:ORG/NAME[@REVISION] or a local model directory")
        source = hub.parse_source(d["source"])
        tokenizer = fields.optional_text("tokenizer", d["tokenizer"], "a path or hf:ORG/NAME")
        if tokenizer is not None and not tokenizer.startswith(hub.HF_PREFIX):
            tokenizer = str(hub.given_tokenizer(tokenizer))
        corpus = DataSpec.from_dict({"corpus": d["corpus"]}).corpus
        given_revision = fields.optional_text("revision", d["revision"], "a revision string")
        if source.revision and given_revision and given_revision != source.revision:
            raise ConfigError(
                f"revision: {given_revision!r} and the source's @{source.revision}: give the revision once"
            )
        revision, info = _resolve(source, given_revision or source.revision)
        recipe, size, model = as_preset(info)
        resolved = {"revision": revision, "recipe": recipe, "size": size, "model": model}
        resolved["family"], resolved["family_config"] = family_fields(
            info.family or BUILTIN_FAMILY, info.family_config or {}
        )
        for key in RESOLVED:
            given = d[key] if key != "family" or d[key] != BUILTIN_FAMILY else None
            if key != "revision" and given not in (None, {}) and fields.plain(given) != resolved[key]:
                raise ConfigError(
                    f"{key}: set from the source's config.json ({resolved[key]!r}); leave it out (got {d[key]!r})"
                )
        return cls(source=source.text, tokenizer=tokenizer, corpus=corpus, **resolved)

    def to_dict(self) -> dict[str, Any]:
        """Every field; the family's only when it is not looplab's own (stored imports keep their dict)."""
        d = spec_to_dict(self)
        if self.family == BUILTIN_FAMILY:
            del d["family"], d["family_config"]
        return d

    @property
    def imported_from(self) -> str:
        """Where the model came from, as the views show it: SOURCE@REVISION."""
        return f"{self.source}@{self.revision}"


def _resolve(source: hub.Source, revision: str | None) -> tuple[str, hub.ModelInfo]:
    """(the revision that pins it, what its config.json says) of a source, reading only config.json of a
    hub source (and, for a directory, hashing its config and weights)."""
    if source.repo is not None:
        config, commit = hub.hub_config(hub.Source(source.text, source.repo, revision))
        return commit, hub.read_config(config.parent)
    computed = hub.local_revision(source.path)
    if revision is not None and revision != computed:
        raise ConfigError(
            f"revision: {source.path} is now {computed}, not {revision} (its config or weights changed)"
        )
    return computed, hub.read_config(source.path)


def as_preset(info: hub.ModelInfo) -> tuple[str, str, dict[str, Any]]:
    """(recipe, size, overrides) with preset(recipe, size, **overrides) == info.cfg: a looplab export's own
    recipe and size, else the Parcae recipe at the size nearest in width."""
    from looplab.model.presets import RECIPES, SIZES, preset

    cfg = info.cfg
    recipe = info.recipe if info.recipe in RECIPES else RECIPE
    size = (
        info.size if info.size in SIZES else min(SIZES, key=lambda s: abs(SIZES[s]["d_model"] - cfg.d_model))
    )
    base = preset(recipe, size)
    overrides = {
        f.name: fields.plain(getattr(cfg, f.name))
        for f in dataclasses.fields(cfg)
        if getattr(cfg, f.name) != getattr(base, f.name)
    }
    if preset(recipe, size, **overrides) != cfg:  # pragma: no cover - every field is an override
        raise ConfigError(f"model: {cfg} is not expressible as {recipe} x {size} with overrides")
    return recipe, size, overrides


def model_config(spec: Spec):
    """The ModelConfig the spec says the source holds."""
    from looplab.model.presets import preset

    return preset(spec.recipe, spec.size, **spec.model)


def run(spec: Spec, reporter, artifact_dir: str | Path) -> dict[str, Any]:
    """Fetch the source at its revision, load and check it, write final.pt and tokenizer.json."""
    from looplab.model.counts import param_count
    from looplab.workers import checkpoint as ckpt
    from looplab.workers.data.tokenizer import load_tokenizer

    out = Path(artifact_dir)
    out.mkdir(parents=True, exist_ok=True)
    source = hub.parse_source(spec.source)
    reporter.log(f"importing {spec.imported_from}")
    directory = hub.materialise(source, spec.revision if source.repo is not None else None)
    if source.path is not None and hub.local_revision(directory) != spec.revision:
        raise ConfigError(f"source: {directory} changed since the job was submitted (it was {spec.revision})")
    reporter.heartbeat()
    model, info, found = hub.load_model_dir(directory)
    if info.cfg != model_config(spec):
        raise ConfigError(
            f"source: {spec.imported_from}: its config.json no longer gives the submitted model"
        )
    tokenizer = hub.given_tokenizer(spec.tokenizer) if spec.tokenizer is not None else found
    if tokenizer is None and info.tokenizer != "byte":
        raise ConfigError(
            f"tokenizer: {spec.imported_from} holds no {' or '.join(hub.TOKENIZER_FILES)}; give the spec's "
            "tokenizer (a tokenizer.json, a directory with one, or hf:ORG/NAME)"
        )
    data: dict[str, Any] = {"corpus": spec.corpus, "tokenizer": "byte"}
    if tokenizer is not None:
        vocab = load_tokenizer(tokenizer).vocab_size
        if vocab > info.cfg.vocab_size:
            raise ConfigError(
                f"tokenizer: {tokenizer} has {vocab} tokens, more than the model's {info.cfg.vocab_size} rows"
            )
        shutil.copyfile(tokenizer, out / "tokenizer.json")
        data["tokenizer"] = str((out / "tokenizer.json").resolve())
    final = out / ckpt.FINAL
    # a family export's model stays its family's: the follow-ups rebuild it through the contract
    family = {} if info.family is None else {"family": info.family, "family_config": info.family_config}
    state = {
        "model": model.state_dict(),
        "model_config": info.cfg.to_dict(),
        "final": True,
        "spec": {**spec.to_dict(), "data": data, "imported_from": spec.imported_from, **family},
    }
    ckpt.save(final, state)
    reporter.checkpoint(str(final), 0)
    n_params = param_count(info.cfg)["total"] if not family else sum(p.numel() for p in model.parameters())
    reporter.log(f"imported {spec.imported_from}: {n_params:,} parameters, {info.layout} layout")
    return {
        "checkpoint": str(final),
        "imported_from": spec.imported_from,
        "n_params": n_params,
        "layout": info.layout,
        "tokenizer": data["tokenizer"],
    }


def build_parser() -> SpecParser:
    what = (
        "A published checkpoint (hf:ORG/NAME or a local model directory) as a looplab run without training."
    )
    return job_parser(
        Spec,
        "looplab.workers.importer",
        what,
        out_help="artifact dir to write final.pt into",
        out_required=True,
        required=("source",),
    )


def print_table(spec: Spec, out: dict[str, Any], args: Any = None) -> None:
    print(f"imported {out['imported_from']} ({out['layout']}, {out['n_params']:,} parameters)")
    print(f"checkpoint: {out['checkpoint']}")


def main(argv: list[str] | None = None) -> int:
    return run_standalone(build_parser(), Spec, run, print_table, desc="import", argv=argv)


if __name__ == "__main__":
    raise SystemExit(main())
