"""Model directories: a published Parcae checkpoint or a looplab export, from the Hugging Face hub or disk.

A *model directory* holds
- `config.json` with `_class_name`: `ParcaeConfig` (the public Parcae code's layout, which looplab's own
  family declares: workers/layouts.py `published_classes`), `looplab.LoopedLM` (what `export_model` writes: our `ModelConfig`) or
  `looplab.Family` (`export_model` of a run of another family: its family, family_config, weights); or with
  `model_type`: `huginn_raven` or `ouro` (the public Huginn or Ouro code's layout, a model of the family
  `families.huginn` or `families.ouro`, read through the layout that family declares: workers/layouts.py);
- the weights: `model.safetensors`, `pytorch_model.bin` or `model.pt` (the first found; a `.bin`/`.pt`
  loads with `torch.load(weights_only=True)`, so opening one never runs code);
- its tokenizer: `tokenizer.json`, or `tokenizer/tokenizer.json` (the published layout's tokenizer
  directory); a looplab export of a byte-level model has none and says `"tokenizer": "byte"`.

A *source* names one: `hf:ORG/NAME[@REVISION]` (through `huggingface_hub` when there is a network; its
local cache otherwise, and with HF_HUB_OFFLINE=1) or a local directory. A source is known by its
revision: the hub's commit of the files, or for a directory `sha256:` of its config.json and weights
(`local_revision`, cached per file size and modification time).

Every bad source is a ConfigError that names the problem: the missing file and what was looked for,
the unknown `_class_name` and the accepted ones, the tensor whose shape differs (both shapes), the
unexpected or missing tensors, the config field looplab cannot compute.

`load_model_dir` reads any of them into a checked `LoopedLM` (a family export or a published family layout: the
family's module as the jobs hold it, `model.contract.FamilyLM`); workers/model_export.py writes a
looplab checkpoint as one (read back bit for bit).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from looplab.model.errors import ConfigError
from looplab.workers.layouts import published_classes, published_layouts

HF_PREFIX = "hf:"
CONFIG = "config.json"
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "model.pt", "model.safetensors.index.json")
SHARD_INDEX = "model.safetensors.index.json"  # a sharded safetensors checkpoint: {"weight_map": name -> file}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer/tokenizer.json")
LOOPLAB_CLASS = "looplab.LoopedLM"
FAMILY_CLASS = "looplab.Family"  # an export of a run of another model family (model/contract/)
# What a hub snapshot needs of a model repo (nothing else is downloaded)
HUB_FILES = [
    CONFIG,
    *WEIGHT_FILES,
    "model-*.safetensors",
    "tokenizer.json",
    "tokenizer/*",
    "tokenizer_config.json",
    "special_tokens_map.json",
]
LAYOUT = (
    f"a model directory holds {CONFIG}, weights as {' / '.join(WEIGHT_FILES)} and a tokenizer as "
    f"{' or '.join(TOKENIZER_FILES)}"
)


@dataclass(frozen=True)
class Source:
    """A parsed source: a hub repo (with the revision asked for, None = main) or a local directory."""

    text: str  # as given, without the @REVISION
    repo: str | None = None
    revision: str | None = None
    path: Path | None = None


def parse_source(text: Any, name: str = "source") -> Source:
    """`hf:ORG/NAME[@REVISION]` or a local directory that exists; ConfigError naming `name` otherwise."""
    accepted = "hf:ORG/NAME[@REVISION] or a local model directory"
    if not isinstance(text, str) or not text.strip():
        raise ConfigError(f"{name}: expected {accepted}, got {text!r}")
    text = text.strip()
    if text.startswith(HF_PREFIX):
        repo, _, revision = text[len(HF_PREFIX) :].partition("@")
        parts = repo.split("/")
        if len(parts) != 2 or not all(parts) or (_ and not revision):
            raise ConfigError(f"{name}: {text!r} is not {HF_PREFIX}ORG/NAME[@REVISION]")
        return Source(f"{HF_PREFIX}{repo}", repo=repo, revision=revision or None)
    path = Path(text).expanduser().resolve()
    if not path.is_dir():
        raise ConfigError(f"{name}: {text!r} is neither {HF_PREFIX}ORG/NAME nor an existing directory")
    return Source(str(path), path=path)


def _hub_error(source: Source, what: str, error: Exception) -> ConfigError:
    from huggingface_hub.errors import EntryNotFoundError, RepositoryNotFoundError, RevisionNotFoundError

    at = f"{source.text}@{source.revision}" if source.revision else source.text
    if isinstance(error, RevisionNotFoundError):
        return ConfigError(f"source: {at}: no such revision on the hub")
    if isinstance(error, RepositoryNotFoundError):
        return ConfigError(f"source: {at}: no such model repository on the hub (or it is private)")
    if isinstance(error, EntryNotFoundError) and "local" not in type(error).__name__.lower():
        return ConfigError(f"source: {at}: the repository has no {what} ({LAYOUT})")
    return ConfigError(
        f"source: {at}: {what} is not in the local hub cache and the hub cannot be reached (offline or "
        f"HF_HUB_OFFLINE=1; {type(error).__name__}): run once with a network, or download the model to a "
        "directory and give that directory"
    )


def hub_config(source: Source) -> tuple[Path, str]:
    """(local config.json, commit) of a hub source: downloaded when online, from the cache otherwise."""
    from huggingface_hub import hf_hub_download

    try:
        path = Path(hf_hub_download(source.repo, CONFIG, revision=source.revision))
    except Exception as e:  # every hub failure becomes one message about the source
        raise _hub_error(source, CONFIG, e) from e
    return path, path.parent.name  # .../snapshots/<commit>/config.json


def materialise(source: Source, revision: str | None = None) -> Path:
    """The local directory of a source: itself, or the hub snapshot at `revision` (a commit) with the
    files a model needs (HUB_FILES), downloaded when online."""
    if source.path is not None:
        return source.path
    from huggingface_hub import snapshot_download

    try:
        return Path(
            snapshot_download(source.repo, revision=revision or source.revision, allow_patterns=HUB_FILES)
        )
    except Exception as e:
        raise _hub_error(source, "the model's files", e) from e


def config_path(directory: Path) -> Path:
    path = directory / CONFIG
    if not path.is_file():
        raise ConfigError(f"source: {directory}: no {CONFIG} ({LAYOUT})")
    return path


def weights_path(directory: Path) -> Path:
    """The directory's weights file (WEIGHT_FILES, the first one there)."""
    for name in WEIGHT_FILES:
        if (directory / name).is_file():
            return directory / name
    raise ConfigError(f"source: {directory}: no weights file; looked for {', '.join(WEIGHT_FILES)}")


def tokenizer_path(directory: Path) -> Path | None:
    """The directory's tokenizer.json (TOKENIZER_FILES), None when it has none."""
    for name in TOKENIZER_FILES:
        if (directory / name).is_file():
            return directory / name
    return None


def given_tokenizer(text: str) -> Path:
    """A tokenizer named apart from the model: a tokenizer.json, a directory holding one (either layout),
    or `hf:ORG/NAME` (its tokenizer.json)."""
    if text.startswith(HF_PREFIX):
        source = parse_source(text, "tokenizer")
        directory = materialise(source)
    else:
        path = Path(text).expanduser().resolve()
        if path.is_file():
            return path
        directory = path
    found = tokenizer_path(directory) if directory.is_dir() else None
    if found is None:
        raise ConfigError(f"tokenizer: {text!r} holds no {' or '.join(TOKENIZER_FILES)}")
    return found


_DIGESTS: dict[tuple[str, int, int], str] = {}


def _file_sha256(path: Path) -> str:
    stat = path.stat()
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    if key not in _DIGESTS:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 22), b""):
                h.update(block)
        _DIGESTS[key] = h.hexdigest()
    return _DIGESTS[key]


def local_revision(directory: Path) -> str:
    """`sha256:` of a local directory's config.json and weights (what the model is; a sharded checkpoint's
    index and every shard)."""
    weights = weights_path(directory)
    files = [config_path(directory), weights, *(shard_paths(weights) if weights.name == SHARD_INDEX else [])]
    return "sha256:" + hashlib.sha256(" ".join(_file_sha256(f) for f in files).encode()).hexdigest()


def shard_paths(index: Path) -> list[Path]:
    """The shard files a sharded checkpoint's index names (sorted, each once); ConfigError naming a
    missing one or an index that is not one."""
    try:
        weight_map = json.loads(index.read_text())["weight_map"]
        files = sorted(set(weight_map.values()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise ConfigError(f"weights: {index} is not a shard index with a weight_map ({e})") from None
    for name in files:
        if not (index.parent / name).is_file():
            raise ConfigError(f"weights: {index} names the shard {name!r}, which is not in {index.parent}")
    return [index.parent / name for name in files]


# ---------------------------------------------------------------- reading a model directory


@dataclass(frozen=True)
class ModelInfo:
    """What config.json says: the ModelConfig, the layout it came in, and the recipe/size a looplab
    export was trained as (None for a Parcae checkpoint)."""

    cfg: Any  # model.config.ModelConfig
    layout: str  # one of `classes()`, or a published layout's model_type
    recipe: str | None = None
    size: str | None = None
    tokenizer: str | None = None  # "byte" when a looplab export says so
    # a model of another family (model/contract/), with its config: a family export (FAMILY_CLASS) or
    # a published layout (workers/layouts.py); None for LoopedLM
    family: str | None = None
    family_config: dict[str, Any] | None = None


def classes() -> tuple[str, ...]:
    """The `_class_name`s a config.json may say: the published layouts' that name one (Parcae's), then a
    looplab export's."""
    return (*published_classes(), LOOPLAB_CLASS, FAMILY_CLASS)


def read_config(directory: Path) -> ModelInfo:
    path = config_path(directory)
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"source: {path}: not a JSON file ({e})") from e
    if not isinstance(raw, dict):
        raise ConfigError(f"source: {path}: expected a JSON object")
    cls = raw.get("_class_name")
    if cls is None and raw.get("model_type") in published_layouts():
        return _family_info(raw, published_layouts()[raw["model_type"]], path)
    if cls in published_classes():  # a layout of looplab's own family (Parcae's): its config is a ModelConfig
        return ModelInfo(published_classes()[cls].config_from_published(raw), cls)
    if cls in (LOOPLAB_CLASS, FAMILY_CLASS):
        from looplab.model.config import ModelConfig

        family = raw.get("family") if cls == FAMILY_CLASS else None
        if cls == FAMILY_CLASS and (
            not isinstance(family, str) or not isinstance(raw.get("family_config"), dict)
        ):
            raise ConfigError(f"config.family: {path} ({cls}) must name the family and its family_config")
        return ModelInfo(
            ModelConfig.from_dict(raw.get("model_config") or {}),
            cls,
            raw.get("recipe"),
            raw.get("size"),
            raw.get("tokenizer"),
            family,
            raw.get("family_config") if family else None,
        )
    raise ConfigError(
        f"config._class_name: {cls!r} in {path} is unknown; accepted: {', '.join(classes())} (or model_type "
        f"{', '.join(published_layouts())})"
    )


def _family_info(raw: dict[str, Any], layout, path: Path) -> ModelInfo:
    """A published layout of another family: its family config (refused by field when the family does
    not compute it) and the run config that carries its vocabulary, context and mean loop count."""
    from looplab.model.presets import preset

    try:
        config, run = layout.config_from_published(raw)
    except ValueError as e:
        raise ConfigError(f"source: {path}: {e}") from None
    cfg = preset("fixed4", "tiny", **run)
    return ModelInfo(cfg, raw["model_type"], "fixed4", "tiny", None, layout.FAMILY, config)


def read_weights(path: Path) -> dict[str, Any]:
    """A state dict from a weights file, executing nothing: safetensors, or torch.load(weights_only)."""
    import torch

    if path.name == SHARD_INDEX:
        return {k: v for shard in shard_paths(path) for k, v in read_weights(shard).items()}
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            state = load_file(str(path))
        else:
            state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # a file that does not load is refused by name
        first = str(e).splitlines()[0] if str(e) else ""
        raise ConfigError(
            f"weights: {path} does not load as a state dict ({type(e).__name__}: {first})"
        ) from e
    if isinstance(state, dict) and isinstance(state.get("model"), dict):
        state = state["model"]  # a training checkpoint of the public code: {"model": state dict, ...}
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ConfigError(f"weights: {path} is not a state dict (name -> tensor)")
    return state


def load_model_dir(directory: str | Path):
    """(LoopedLM on the CPU, its ModelInfo, its tokenizer.json or None) of a model directory, weights
    loaded and checked tensor by tensor; a family export's model is rebuilt through the contract
    (`load_family_dir`), a published layout of another family's mapped by its layout (`_load_published`)."""
    from looplab.model.contract import build_model
    from looplab.model.family_parts import check_tensors

    directory = Path(directory)
    info = read_config(directory)
    if info.family is not None:
        load = _load_published if info.layout in published_layouts() else load_family_dir
        return load(directory, info), info, tokenizer_path(directory)
    model = build_model(info.cfg).module  # the built-in family: a LoopedLM
    want = model.state_dict()
    state = read_weights(weights_path(directory))
    if info.layout in published_classes():
        state = published_classes()[info.layout].state_from_published(state, want, info.cfg)
    else:
        check_tensors(state, want)
    model.load_state_dict(state)
    return model, info, tokenizer_path(directory)


def _load_published(directory: Path, info: ModelInfo):
    """The module (`model.contract.FamilyLM`) of a published layout of another family, its weights
    mapped by the family's layout and checked tensor by tensor."""
    from looplab.model.contract import build_model

    module = build_model(info.cfg, info.family, info.family_config).module
    want = module.inner.state_dict()
    layout = published_layouts()[info.layout]
    try:
        state = layout.state_from_published(read_weights(weights_path(directory)), want, info.family_config)
    except ValueError as e:
        raise ConfigError(f"source: {directory}: {e}") from None
    module.inner.load_state_dict(state)
    return module


def load_family_dir(directory: Path, info: ModelInfo):
    """The model of a family export (FAMILY_CLASS): `model.contract.build_model` of its family and
    family_config (FamilyError naming the family when it does not import here), its own module's weights
    loaded strictly from model.safetensors (a missing or unexpected tensor refused by name)."""
    from safetensors.torch import load_model

    from looplab.model.contract import build_model

    built = build_model(info.cfg, info.family, info.family_config)
    path = directory / WEIGHT_FILES[0]
    if not path.is_file():
        raise ConfigError(f"source: {directory}: a family export keeps its weights in {WEIGHT_FILES[0]}")
    try:
        load_model(built.module.inner, str(path))
    except RuntimeError as e:
        first = str(e).splitlines()[0] if str(e) else ""
        raise ConfigError(f"weights: {path} do not fit family {info.family!r}: {first}") from None
    return built.module


def is_model_dir(path: str | Path) -> bool:
    """A directory with a config.json (a model directory, not a train artifact dir)."""
    return Path(path).is_dir() and (Path(path) / CONFIG).is_file()
